"""Warehouses written by a Hadoop catalog, and moving their tables into another catalog.

A Hadoop catalog keeps its tables in the warehouse folder itself
(``<warehouse>/<namespace>/<table>/metadata/version-hint.text`` names the current
``v<N>.metadata.json``). The embedded default is a JDBC catalog whose SQLite file lists its
tables; a warehouse of Hadoop tables opened with it would look empty, and a pipeline would start
its replicas again beside the old files. :func:`unregistered` finds such tables without Spark;
:func:`register_sql` is the statement that moves one (its snapshots, and so the commit ledger,
come along unchanged).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.spark.sql import lit, q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HadoopTable:
    """A table a Hadoop catalog wrote: its namespace, name and current metadata file."""

    namespace: str
    name: str
    metadata: Path


def hadoop_tables(warehouse: Path) -> list[HadoopTable]:
    """The tables of a Hadoop catalog's warehouse (one-level namespaces), sorted."""
    out: list[HadoopTable] = []
    for hint in sorted(warehouse.glob("*/*/metadata/version-hint.text")):
        try:
            version = int(hint.read_text().strip())
        except (OSError, ValueError):
            continue
        metadata = hint.parent / f"v{version}.metadata.json"
        if metadata.is_file():
            table = hint.parent.parent
            out.append(HadoopTable(table.parent.name, table.name, metadata))
    return out


def registered(database: Path, catalog: str) -> set[tuple[str, str]]:
    """(namespace, table) of the tables an Iceberg JDBC catalog on an SQLite file lists."""
    if not database.is_file():
        return set()
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute(
            "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ?",
            (catalog,),
        ).fetchall()
    except sqlite3.OperationalError:  # no table yet: the catalog has listed nothing
        return set()
    finally:
        con.close()
    return {(str(ns), str(name)) for ns, name in rows}


def unregistered(warehouse: Path, database: Path, catalog: str) -> list[HadoopTable]:
    """Hadoop tables of a local warehouse that the SQLite catalog beside them does not list."""
    known = registered(database, catalog)
    return [t for t in hadoop_tables(warehouse) if (t.namespace, t.name) not in known]


def register_sql(catalog: str, table: HadoopTable) -> str:
    """The statement that registers a Hadoop table's current metadata in ``catalog``."""
    return (
        f"CALL {q(catalog)}.system.register_table(table => "
        f"{lit(f'{table.namespace}.{table.name}')}, metadata_file => {lit(str(table.metadata))})"
    )


def move_tables(
    spark: SparkSession, catalog: str, warehouse: Path, echo: Callable[[str], None] = print
) -> list[HadoopTable]:
    """Register every Hadoop table of ``warehouse`` that ``catalog`` does not list yet;
    returns the tables registered."""
    from cdcflow.iceberg.catalog import Catalog

    known = Catalog(catalog)
    moved: list[HadoopTable] = []
    for table in hadoop_tables(warehouse):
        name = f"{table.namespace}.{table.name}"
        if known.exists(spark, table.namespace, table.name):
            echo(f"{name}: listed already")
            continue
        known.ensure_namespace(spark, table.namespace)
        spark.sql(register_sql(catalog, table))
        echo(f"{name}: registered ({table.metadata.name})")
        moved.append(table)
    return moved
