"""Commands to look at results without writing Spark code.

Every command prints a table (numbers with thousands separators, long values cut unless
``--full``) or, with ``--output json``, one JSON object per line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from cdcflow.cli.render import json_line, text_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import DataType

    from cdcflow.config import PipelineConfig
    from cdcflow.spark.session import SparkSettings

_CUT = 60


#: Driver JVM options for a command that lives a few seconds: the quick (C1) compiler only and
#: a serial collector start the JVM and plan the first queries about twice as fast (a
#: pipeline that runs for long gains from the optimising compiler and keeps the defaults).
#: The compiled-code cache keeps its usual 240 MB (C1 alone reserves 48 MB, which a long
#: command can fill, after which the JVM stops compiling).
SHORT_LIVED_JVM: dict[str, str] = {
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
    ),
}


def read_settings(cfg: PipelineConfig, short: bool = True) -> SparkSettings:
    """The Spark settings of a command over a pipeline's results: the pipeline's own, with
    :data:`SHORT_LIVED_JVM` when ``short`` and this process starts the JVM itself (no session
    yet, not under ``spark-submit``) and the configuration sets no driver Java options."""
    from cdcflow.pipeline.query import spark_settings
    from cdcflow.spark.session import launched_by_spark_submit, session_running

    settings = spark_settings(cfg)
    if (
        not short
        or session_running()
        or launched_by_spark_submit(os.environ)
        or any(k in settings.conf for k in SHORT_LIVED_JVM)
    ):
        return settings
    return dataclasses.replace(settings, conf={**SHORT_LIVED_JVM, **settings.conf})


def _session(config: str, short: bool = True) -> tuple[PipelineConfig, SparkSession]:
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import open_session

    cfg = load_config_file(config)
    return cfg, open_session(cfg, read_settings(cfg, short))


def duration(seconds: float | None) -> str:
    """``2d 03:04:05``, ``04:05``... for a number of seconds."""
    if seconds is None:
        return ""
    sign = "-" if seconds < 0 else ""
    total = round(abs(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{days}d {clock}" if days else f"{sign}{clock}"


def _cut(text: str, full: bool) -> str:
    if not full and len(text) > _CUT:
        return text[: _CUT - 1] + "…"
    return text


def emit(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    output: str,
    full: bool = False,
    types: Sequence[DataType | None] | None = None,
) -> None:
    """Print rows as an aligned table or as JSON lines (see :mod:`cdcflow.cli.render`);
    ``types``: the Spark type of each column, where the values come from Spark."""
    kinds: list[DataType | None] = list(types) if types is not None else [None] * len(columns)
    if output == "json":
        for row in rows:
            click.echo(json_line(list(columns), row, kinds))
        return
    cells = [
        [_cut(text_value(v, t), full) for v, t in zip(row, kinds, strict=True)] for row in rows
    ]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(values):
            out.append(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]))
        return "  ".join(out).rstrip()

    click.echo(line(columns))
    for r in cells:
        click.echo(line(r))


def _frame(df: DataFrame, limit: int, output: str, full: bool) -> None:
    rows = [tuple(r) for r in df.limit(limit).collect()]
    emit(df.columns, rows, output, full, [f.dataType for f in df.schema.fields])


_config_arg = click.argument("config", type=click.Path(dir_okay=False))


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="An aligned table, or one JSON object per line.",
    )(fn)
    return click.option("--full", is_flag=True, help="Do not cut long values.")(fn)


def _internal(cfg: PipelineConfig, spark: SparkSession, name: str) -> str | None:
    from cdcflow.iceberg.catalog import Catalog

    catalog = Catalog(cfg.catalog.name)
    internal = f"{cfg.namespace}__cdcflow"
    if not catalog.exists(spark, internal, name):
        return None
    return catalog.ident(internal, name)


@click.command("tables")
@_config_arg
@_common
def tables_cmd(config: str, output: str, full: bool) -> None:
    """List the replica tables of a pipeline with their row counts."""
    from cdcflow.pipeline.results import replica_names, row_counts

    cfg, spark = _session(config)
    names = replica_names(cfg, spark)
    counts = row_counts(cfg, spark, names)
    rows = [(f"{cfg.catalog.name}.{cfg.namespace}.{n}", counts[n]) for n in names if n in counts]
    emit(["table", "rows"], rows, output, full)


@click.command("show")
@_config_arg
@click.argument("table")
@click.option("--limit", default=20, show_default=True)
@_common
def show_cmd(config: str, table: str, limit: int, output: str, full: bool) -> None:
    """Show rows of a replica table."""
    from cdcflow.pipeline.results import replica

    cfg, spark = _session(config)
    _frame(replica(cfg, spark, table), limit, output, full)


@click.command("sql")
@_config_arg
@click.argument("query")
@click.option("--limit", default=100, show_default=True)
@_common
def sql_cmd(config: str, query: str, limit: int, output: str, full: bool) -> None:
    """Run a SQL query (tables are catalog.namespace.table)."""
    from cdcflow.pipeline.results import replica_names
    from cdcflow.spark.errors import TableNotFound, spark_problem

    cfg, spark = _session(config)
    try:
        _frame(spark.sql(query), limit, output, full)
    except Exception as e:
        problem = spark_problem(e, query)
        if problem is None:
            raise
        if isinstance(problem, TableNotFound):
            where = f"{cfg.catalog.name}.{cfg.namespace}"
            names = ", ".join(f"{where}.{n}" for n in replica_names(cfg, spark)) or "none yet"
            problem.hint = f"the pipeline's tables: {names}"
        raise problem from e


def _rows_or_json(df: DataFrame, empty: str, output: str, full: bool) -> list[Row] | None:
    """A listing's rows to render as a table; ``None`` when it was said already (``empty``
    when there are none, or the rows as JSON lines)."""
    found = df.collect()
    if not found:
        click.echo(empty, err=output == "json")
        return None
    if output == "json":
        emit(df.columns, found, output, full, [f.dataType for f in df.schema.fields])
        return None
    return found


@click.command("history")
@_config_arg
@click.option("--limit", default=50, show_default=True)
@click.option(
    "--maintenance",
    "upkeep",
    is_flag=True,
    help="Show the maintenance actions only: table, action, seconds, files, bytes and "
    "snapshots before → after.",
)
@_common
def history_cmd(config: str, limit: int, upkeep: bool, output: str, full: bool) -> None:
    """Show the batch history of a pipeline: counts, the seconds each stage took, and the
    maintenance actions between the batches (JSON output: the batches only; with
    --maintenance: the maintenance actions only)."""
    from pyspark.sql.functions import col

    from cdcflow.iceberg.maintain import change_text
    from cdcflow.pipeline.results import history, maintenance

    cfg, spark = _session(config)
    if upkeep:
        df = maintenance(cfg, spark).orderBy("at", ascending=False).limit(limit)
        found = _rows_or_json(df, "no maintenance yet", output, full)
        if found is None:
            return
        actions: list[tuple[Any, ...]] = [
            (
                r["batch_id"],
                r["at"],
                f"{r['namespace']}.{r['table']}",
                r["action"],
                round(r["seconds"], 1),
                f"{r['files_before']} → {r['files_after']}",
                f"{r['bytes_before']:,} → {r['bytes_after']:,}",
                f"{r['snapshots_before']} → {r['snapshots_after']}",
            )
            for r in found
        ]
        columns = ["batch", "at", "table", "action", "seconds", "files", "bytes", "snapshots"]
        emit(columns, actions, output, full)
        return
    df = history(cfg, spark).orderBy("started_at", "batch_id", ascending=False).limit(limit)
    found = _rows_or_json(df, "no batches yet", output, full)
    if found is None:
        return
    columns = [
        "source",
        "batch",
        "started",
        "events",
        "applied",
        "duplicates",
        "stale",
        "conflicts",
        "dead-lettered",
        "seconds",
        "slowest stage or action",
    ]
    listed: list[tuple[Any, tuple[Any, ...]]] = []
    for r in found:
        d = r.asDict()
        stages = d.get("stages") or {}
        slowest = max(stages.items(), key=lambda kv: kv[1]) if stages else None
        row = (
            d.get("source") or d["pipeline"],
            d["batch_id"],
            d["started_at"],
            d["events"],
            d.get("applied"),
            d["duplicates"],
            d["stale"],
            d["conflicts"],
            d["dead_lettered"],
            round(d["seconds"], 1),
            f"{slowest[0]} {slowest[1]:.1f}s" if slowest else "",
        )
        listed.append((d["started_at"], row))
    # the maintenance actions of the same span, listed by time with the batches they followed
    oldest = min(d for d, _ in listed)
    for a in maintenance(cfg, spark).where(col("at") >= oldest).collect():
        change = change_text(
            a["action"],
            (a["files_before"], a["files_after"]),
            (a["snapshots_before"], a["snapshots_after"]),
        )
        row = (
            "maintenance",
            a["batch_id"] if a["batch_id"] >= 0 else "by hand",
            a["at"],
            *([None] * 6),
            round(a["seconds"], 1),
            f"{a['action']} {a['namespace']}.{a['table']} ({change})",
        )
        listed.append((a["at"], row))
    listed.sort(key=lambda t: t[0], reverse=True)
    rows = [row for _, row in listed]
    emit(columns, rows, output, full)


@click.command("watermarks")
@_config_arg
@click.option("--limit", default=100, show_default=True)
@_common
def watermarks_cmd(config: str, limit: int, output: str, full: bool) -> None:
    """Show how far each scope (table or topic) is resolved — complete up to a point of the
    source's time — and how far that lags behind now."""
    cfg, spark = _session(config)
    ident = _internal(cfg, spark, "watermarks")
    if ident is None:
        click.echo("no resolved watermarks yet (the producers sent no RESOLVED events)")
        return
    df = spark.sql(
        f"""
        SELECT coalesce(src, '') AS source, dialect, scope, count(*) AS partitions,
               min(resolved_at) AS resolved_to,
               unix_micros(current_timestamp()) / 1e6 - unix_micros(min(resolved_at)) / 1e6
                 AS lag_seconds
        FROM {ident} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        """
    )
    rows = []
    for r in df.limit(limit).collect():
        lag = r["lag_seconds"]
        rows.append(
            (
                r["source"],
                r["dialect"],
                r["scope"],
                r["partitions"],
                r["resolved_to"],
                round(lag, 3) if output == "json" else duration(lag),
            )
        )
    columns = ["source", "dialect", "scope", "partitions", "resolved_to"]
    emit([*columns, "lag_seconds" if output == "json" else "lag"], rows, output, full)
