"""Commands to look at results without writing Spark code.

Every command prints a table (numbers with thousands separators, long values cut unless
``--full``) or, with ``--output json``, one JSON object per line. ``tables``, ``show``,
``history``, ``dead-letters``, ``watermarks`` and ``status`` read the catalog with pyiceberg
(no JVM) where it can open it, else with Spark (:mod:`cdcflow.observe.tables`); ``sql`` and
``dead-letters --replay`` run on Spark.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from cdcflow.cli.render import json_line, text_value
from cdcflow.observe.status import duration
from cdcflow.observe.values import ANY, Shape

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.config import PipelineConfig
    from cdcflow.observe.tables import Listing, Results
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
    from cdcflow.pipeline.session import spark_settings
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
    from cdcflow.pipeline.session import open_session

    cfg = load_config_file(config)
    return cfg, open_session(cfg, read_settings(cfg, short))


def _cut(text: str, full: bool) -> str:
    if not full and len(text) > _CUT:
        return text[: _CUT - 1] + "…"
    return text


def emit(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    output: str,
    full: bool = False,
    shapes: Sequence[Shape] | None = None,
) -> None:
    """Print rows as an aligned table or as JSON lines (see :mod:`cdcflow.cli.render`);
    ``shapes``: each column's type, where the values come from a table."""
    kinds: list[Shape] = list(shapes) if shapes is not None else [ANY] * len(columns)
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


def emit_listing(listing: Listing, output: str, full: bool = False) -> None:
    """Print a listing's rows (:func:`emit`)."""
    emit(listing.columns, listing.rows, output, full, listing.shapes)


def say(message: str, output: str) -> None:
    """A line that is not a row: on stdout beside a table, on stderr beside JSON lines."""
    click.echo(message, err=output == "json")


def _frame(df: DataFrame, limit: int, output: str, full: bool) -> None:
    from cdcflow.observe.values import spark_shape

    rows = [tuple(r) for r in df.limit(limit).collect()]
    emit(df.columns, rows, output, full, [spark_shape(f.dataType) for f in df.schema.fields])


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


def _reading(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--spark",
        "use_spark",
        is_flag=True,
        help="Read through Spark even where pyiceberg can open the catalog.",
    )(fn)


def open_results(config: str, use_spark: bool = False) -> Results:
    """A pipeline's tables for a read command: read with pyiceberg where it can open the
    catalog, else (or with ``use_spark``) with Spark, saying why in one line. Nothing is
    created: a catalog that does not exist is ``CATALOG_NOT_FOUND``."""
    from cdcflow.config import load_config_file
    from cdcflow.observe.catalog import CatalogUnreadable, check_exists, open_catalog
    from cdcflow.observe.tables_iceberg import IcebergResults
    from cdcflow.observe.tables_spark import SparkResults

    cfg = load_config_file(config)
    check_exists(cfg.catalog)
    if not use_spark:
        try:
            return IcebergResults(cfg, open_catalog(cfg.catalog))
        except CatalogUnreadable as e:
            click.echo(
                f"cdcflow: catalog {cfg.catalog.name!r}: {e.reason}; reading it with Spark",
                err=True,
            )
    _, spark = _session(config)
    return SparkResults(cfg, spark)


@click.command("tables")
@_config_arg
@_common
@_reading
def tables_cmd(config: str, output: str, full: bool, use_spark: bool) -> None:
    """List the replica tables of a pipeline with their row counts."""
    results = open_results(config, use_spark)
    names = results.replica_names()
    counts = results.row_counts(names)
    rows = [(f"{results.where}.{n}", counts[n]) for n in names if n in counts]
    emit(["table", "rows"], rows, output, full)


@click.command("show")
@_config_arg
@click.argument("table")
@click.option("--limit", default=20, show_default=True)
@_common
@_reading
def show_cmd(config: str, table: str, limit: int, output: str, full: bool, use_spark: bool) -> None:
    """Show rows of a replica table in key order (a history table's versions by key and
    start, a changelog's events by sequence), and how many more there are."""
    results = open_results(config, use_spark)
    listing = results.show(table, limit)
    emit_listing(listing, output, full)
    more = (listing.total or 0) - len(listing.rows)
    if more > 0:
        say(f"… {more:,} more row(s) of {listing.total:,} (--limit shows more)", output)


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


#: Columns of ``cdcflow history`` (as a table).
HISTORY_COLUMNS = [
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
#: The ledger of replayed dead letters ends so (:mod:`cdcflow.pipeline.replay`).
REPLAY_LEDGER = "/replay"


def batch_source(row: dict[str, Any]) -> str:
    """A batch's source as ``history`` names it: replays of dead letters marked so."""
    name = str(row.get("source") or row["pipeline"])
    return f"{name} (replay)" if str(row.get("pipeline") or "").endswith(REPLAY_LEDGER) else name


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
@_reading
def history_cmd(
    config: str, limit: int, upkeep: bool, output: str, full: bool, use_spark: bool
) -> None:
    """Show the batch history of a pipeline: counts, the seconds each stage took, and the
    maintenance actions between the batches (JSON output: the batches only; with
    --maintenance: the maintenance actions only). Replays of dead letters are marked
    ``(replay)`` after their source."""
    from cdcflow.iceberg.maintain import change_text

    results = open_results(config, use_spark)
    if upkeep:
        found = results.maintenance(limit)
        if _said(found, "no maintenance yet", output, full) or found is None:
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
            for r in found.dicts()
        ]
        columns = ["batch", "at", "table", "action", "seconds", "files", "bytes", "snapshots"]
        emit(columns, actions, output, full)
        return
    batches = results.batches(limit)
    if _said(batches, "no batches yet", output, full) or batches is None:
        return
    listed: list[tuple[Any, tuple[Any, ...]]] = []
    for d in batches.dicts():
        slowest = slowest_stage(d.get("stages") or {})
        row = (
            batch_source(d),
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
        listed.append((_instant(d["started_at"]), row))
    # the maintenance actions of the same span, listed by time with the batches they followed
    oldest = min(at for at, _ in listed)
    upkeep_rows = results.maintenance()
    for a in upkeep_rows.dicts() if upkeep_rows else []:
        at = _instant(a["at"])
        if at < oldest:
            continue
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
        listed.append((at, row))
    listed.sort(key=lambda t: t[0], reverse=True)
    emit(HISTORY_COLUMNS, [row for _, row in listed], output, full)


def _said(found: Listing | None, empty: str, output: str, full: bool) -> bool:
    """Whether a listing was said already: ``empty`` when it has no rows, its rows as JSON
    lines; else it is for a table of the command's own."""
    if not found or not found.rows:
        say(empty, output)
        return True
    if output == "json":
        emit_listing(found, output, full)
        return True
    return False


def slowest_stage(stages: dict[str, float]) -> tuple[str, float] | None:
    """The stage that took longest; of stages as long, the one that runs first."""
    from cdcflow.pipeline.report import STAGES

    def rank(name: str) -> tuple[int, str]:
        return (STAGES.index(name) if name in STAGES else len(STAGES), name)

    ordered = sorted(stages.items(), key=lambda kv: rank(kv[0]))
    return max(ordered, key=lambda kv: kv[1]) if ordered else None


def _instant(value: dt.datetime) -> dt.datetime:
    """A ``timestamp`` as an aware UTC time, whichever reader gave it (PySpark: naive, in the
    local time zone)."""
    return (value if value.tzinfo is not None else value.astimezone()).astimezone(dt.UTC)


@click.command("watermarks")
@_config_arg
@click.option("--limit", default=100, show_default=True)
@_common
@_reading
def watermarks_cmd(config: str, limit: int, output: str, full: bool, use_spark: bool) -> None:
    """Show how far each scope (table or topic) is resolved — complete up to a point of the
    source's time — and how far that lags behind now."""
    results = open_results(config, use_spark)
    found = results.watermarks()
    if found is None:
        click.echo("no resolved watermarks yet (the producers sent no RESOLVED events)")
        return
    now = dt.datetime.now(dt.UTC)
    rows = []
    for w in found[:limit]:
        lag = (now - _instant(w.resolved_to)).total_seconds() if w.resolved_to else None
        shown: Any = (
            (round(lag, 3) if lag is not None else None) if output == "json" else duration(lag)
        )
        rows.append((w.source, w.dialect, w.scope, w.partitions, w.resolved_to, shown))
    columns = ["source", "dialect", "scope", "partitions", "resolved_to"]
    emit([*columns, "lag_seconds" if output == "json" else "lag"], rows, output, full)
