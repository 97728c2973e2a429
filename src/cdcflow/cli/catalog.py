"""``cdcflow migrate-catalog``: move the tables of a Hadoop warehouse into the configured
catalog."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("migrate-catalog")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--from",
    "source",
    type=click.Path(file_okay=False),
    help="The Hadoop warehouse (default: the configuration's warehouse).",
)
def migrate_catalog_cmd(config: str, source: str | None) -> None:
    """Register every table of a warehouse that a Hadoop catalog wrote (earlier versions'
    default) in CONFIG's catalog (the embedded one by default), under the same namespace and
    name: the tables keep their files, snapshots and commit ledger, so the pipeline goes on
    where it was. Takes the pipeline's run lock; tables the catalog lists already are left
    alone, so running it again does nothing."""
    from cdcflow.config import load_config_file
    from cdcflow.errors import ConfigError
    from cdcflow.iceberg.migrate import hadoop_tables, move_tables
    from cdcflow.pipeline.checkpoint import Checkpoint
    from cdcflow.pipeline.session import spark_settings
    from cdcflow.spark.session import build_session

    cfg = load_config_file(config)
    if cfg.catalog.type == "hadoop":
        raise ConfigError(
            "catalog.type is hadoop: set the catalog to move the tables into (leave `type` "
            "out for the embedded one) and name the Hadoop warehouse with --from if it differs",
            code="CONFIG_INVALID",
        )
    warehouse = Path(source or cfg.catalog.warehouse)
    tables = hadoop_tables(warehouse)
    if not tables:
        click.echo(f"no table of a Hadoop catalog in {warehouse}")
        return
    checkpoint = Checkpoint(cfg, lambda: build_session(spark_settings(cfg)))
    checkpoint.acquire()
    try:
        spark = build_session(spark_settings(cfg))
        moved = move_tables(spark, cfg.catalog.name, warehouse, click.echo)
        click.echo(f"{len(moved)} table(s) moved into catalog {cfg.catalog.name}")
    finally:
        checkpoint.release()
