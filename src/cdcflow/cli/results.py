"""Commands to look at results without writing Spark code."""

from __future__ import annotations

from typing import Any

import click


def _session(config: str) -> tuple[Any, Any]:
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import spark_settings
    from cdcflow.spark.session import build_session

    cfg = load_config_file(config)
    return cfg, build_session(spark_settings(cfg))


def _print(df: Any, limit: int, as_json: bool) -> None:
    if as_json:
        for row in df.limit(limit).toJSON().collect():
            click.echo(row)
    else:
        click.echo(df._jdf.showString(limit, 60, False))


_config_arg = click.argument("config", type=click.Path(dir_okay=False))
_json_opt = click.option(
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Table text or JSON lines.",
)


@click.command("tables")
@_config_arg
def tables_cmd(config: str) -> None:
    """List the replica tables of a pipeline with their row counts."""
    cfg, spark = _session(config)
    ns = f"{cfg.catalog.name}.{cfg.namespace}"
    try:
        names = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {ns}").collect()]
    except Exception:
        names = []
    for name in sorted(names):
        n = spark.sql(f"SELECT count(*) AS n FROM {ns}.`{name}`").collect()[0]["n"]
        click.echo(f"{ns}.{name}\t{n}")


@click.command("show")
@_config_arg
@click.argument("table")
@click.option("--limit", default=20, show_default=True)
@_json_opt
def show_cmd(config: str, table: str, limit: int, output: str) -> None:
    """Show rows of a replica table."""
    cfg, spark = _session(config)
    _print(spark.table(f"{cfg.catalog.name}.{cfg.namespace}.`{table}`"), limit, output == "json")


@click.command("sql")
@_config_arg
@click.argument("query")
@click.option("--limit", default=100, show_default=True)
@_json_opt
def sql_cmd(config: str, query: str, limit: int, output: str) -> None:
    """Run a SQL query (tables are catalog.namespace.table)."""
    _, spark = _session(config)
    _print(spark.sql(query), limit, output == "json")


@click.command("dead-letters")
@_config_arg
@click.option("--limit", default=50, show_default=True)
@_json_opt
def dead_letters_cmd(config: str, limit: int, output: str) -> None:
    """List dead-lettered messages: origin, error code and message."""
    cfg, spark = _session(config)
    ident = f"{cfg.catalog.name}.{cfg.namespace}__cdcflow.dead_letters"
    from cdcflow.iceberg.catalog import Catalog

    if not Catalog(cfg.catalog.name).exists(spark, f"{cfg.namespace}__cdcflow", "dead_letters"):
        click.echo("no dead letters")
        return
    df = spark.sql(
        f"SELECT batch_id, origin, line, offset, item, dialect, error_code, error_message, "
        f"substring(CAST(raw AS string), 1, 80) AS raw FROM {ident} ORDER BY batch_id, origin, "
        "offset, item"
    )
    _print(df, limit, output == "json")


@click.command("history")
@_config_arg
@click.option("--limit", default=50, show_default=True)
@_json_opt
def history_cmd(config: str, limit: int, output: str) -> None:
    """Show the batch history of a pipeline."""
    cfg, spark = _session(config)
    ident = f"{cfg.catalog.name}.{cfg.namespace}__cdcflow.batches"
    from cdcflow.iceberg.catalog import Catalog

    if not Catalog(cfg.catalog.name).exists(spark, f"{cfg.namespace}__cdcflow", "batches"):
        click.echo("no batches yet")
        return
    _print(spark.sql(f"SELECT * FROM {ident} ORDER BY started_at DESC"), limit, output == "json")


@click.command("watermarks")
@_config_arg
@click.option("--limit", default=100, show_default=True)
@_json_opt
def watermarks_cmd(config: str, limit: int, output: str) -> None:
    """Show how far each scope (table or topic) is resolved — complete up to a point of the
    source's time — and how far that lags behind now."""
    cfg, spark = _session(config)
    ident = f"{cfg.catalog.name}.{cfg.namespace}__cdcflow.watermarks"
    from cdcflow.iceberg.catalog import Catalog

    if not Catalog(cfg.catalog.name).exists(spark, f"{cfg.namespace}__cdcflow", "watermarks"):
        click.echo("no resolved watermarks yet (the producers sent no RESOLVED events)")
        return
    df = spark.sql(
        f"""
        SELECT dialect, scope, count(*) AS partitions, min(resolved_at) AS resolved_to,
               round(unix_micros(current_timestamp()) / 1e6
                     - unix_micros(min(resolved_at)) / 1e6, 1) AS lag_seconds
        FROM {ident} GROUP BY dialect, scope ORDER BY dialect, scope
        """
    )
    _print(df, limit, output == "json")
