"""A pipeline's results as DataFrames: its replicas, dead letters and batch history.

What ``cdcflow tables``, ``show``, ``dead-letters`` and ``history`` print, and what the Python
API returns. An internal table that does not exist yet (no batch has run, nothing was
dead-lettered) reads as an empty DataFrame with the table's columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import (
    BATCHES,
    DEAD_LETTER_FIELDS,
    DEAD_LETTERS,
    HISTORY_FIELDS,
    Fields,
    ddl,
)
from cdcflow.spark.errors import table_not_found
from cdcflow.spark.sql import lit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.config import PipelineConfig


def replica_names(cfg: PipelineConfig, spark: SparkSession) -> list[str]:
    """Names of the pipeline's replica (and changelog) tables, sorted."""
    return sorted(Catalog(cfg.catalog.name).table_names(spark, cfg.namespace))


def row_counts(cfg: PipelineConfig, spark: SparkSession, names: list[str]) -> dict[str, int]:
    """Rows of each of the pipeline's tables named: from the current snapshot's summary where
    it is exact (a table without delete files), else from one count over the others."""
    catalog = Catalog(cfg.catalog.name)
    counts: dict[str, int] = {}
    scan: list[str] = []
    for name in names:
        summary = catalog.current_summary(spark, cfg.namespace, name)
        if summary is None:
            continue
        if summary.get("total-delete-files", "0") == "0" and "total-records" in summary:
            counts[name] = int(summary["total-records"])
        elif not summary:
            counts[name] = 0
        else:
            scan.append(name)
    if scan:
        parts = [
            f"SELECT {lit(n)} AS name, count(*) AS n FROM {replica_ident(cfg, n)}" for n in scan
        ]
        for r in spark.sql(" UNION ALL ".join(parts)).collect():
            counts[r["name"]] = int(r["n"])
    return counts


def replica_ident(cfg: PipelineConfig, name: str) -> str:
    """The SQL identifier of one of the pipeline's tables (``catalog.namespace.name``)."""
    return Catalog(cfg.catalog.name).ident(cfg.namespace, name)


def replica(cfg: PipelineConfig, spark: SparkSession, name: str) -> DataFrame:
    """The rows of one replica (or changelog) table, ``_cdc`` metadata column included;
    :class:`~cdcflow.spark.errors.TableNotFound` naming the pipeline's tables when there is no
    such table."""
    names = replica_names(cfg, spark)
    if name not in names:
        raise table_not_found(name, names, f"{cfg.catalog.name}.{cfg.namespace}")
    return spark.table(replica_ident(cfg, name))


def _internal(cfg: PipelineConfig, spark: SparkSession, name: str, fields: Fields) -> DataFrame:
    catalog = Catalog(cfg.catalog.name)
    namespace = cfg.namespace + "__cdcflow"
    if not catalog.exists(spark, namespace, name):
        return spark.createDataFrame([], ddl(fields))
    return spark.table(catalog.ident(namespace, name))


def dead_letters(cfg: PipelineConfig, spark: SparkSession) -> DataFrame:
    """Every dead letter of the pipeline: where the message came from (``source``,
    ``origin``, ``offset``, ``line``, ``item``), ``error_code``, ``error_message``, the
    message's bytes (``raw``) and whether it was replayed (``replayed_at``)."""
    return _internal(cfg, spark, DEAD_LETTERS, DEAD_LETTER_FIELDS)


def maintenance(cfg: PipelineConfig, spark: SparkSession) -> DataFrame:
    """One row per maintenance action: ``batch_id`` after which it ran (-1: run by hand),
    ``table``, ``action``, ``seconds``, files, bytes and snapshots before and after."""
    from cdcflow.iceberg.maintain import MAINTENANCE, MAINTENANCE_FIELDS

    return _internal(cfg, spark, MAINTENANCE, MAINTENANCE_FIELDS)


def history(cfg: PipelineConfig, spark: SparkSession) -> DataFrame:
    """One row per batch applied: ``source``, ``batch_id``, counts of events, duplicates,
    stale events, conflicts and dead letters, and the seconds of each stage."""
    return _internal(cfg, spark, BATCHES, HISTORY_FIELDS)
