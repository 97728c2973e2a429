"""Table metadata kept between batches, and the DDL that keeps it current.

A pipeline looks at the same tables batch after batch: their columns, properties and whether
they exist are read once per run from the catalog (a few milliseconds each on a classic
session, through the session's own catalog object: :mod:`cdcflow.iceberg.tables`) and cached;
every DDL this process makes reloads the table it changed. Snapshot summaries (the commit
ledger, the figures a commit reports) are read the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdcflow.iceberg import ledger
from cdcflow.iceberg.tables import TableHandle, list_tables, open_table
from cdcflow.spark.sql import lit, q
from cdcflow.types import spark_type

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Properties of every table cdcflow creates: merge-on-read row-level changes, and old
#: metadata files cleaned up as commits go (a pipeline commits every few seconds for months).
TABLE_PROPERTIES: dict[str, str] = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}
#: How many snapshots back a ledger look-up walks at most.
MAX_WALK = 500


@dataclass(frozen=True)
class TableInfo:
    """What a table looks like now: columns (name → Spark type, top level, in table order),
    the fields of its struct columns, and its properties."""

    namespace: str
    name: str
    columns: dict[str, str]
    structs: dict[str, dict[str, str]] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)


class Catalog:
    """One Iceberg catalog of the session, by name (``spark.sql.catalog.<name>``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._tables: dict[str, set[str]] = {}
        self._info: dict[tuple[str, str], TableInfo] = {}

    # ------------------------------------------------------------------ names

    def ident(self, namespace: str, name: str) -> str:
        """The SQL identifier ``catalog.namespace.table``, quoted."""
        return f"{q(self.name)}.{q(namespace)}.{q(name)}"

    # ------------------------------------------------------------------ reads

    def ensure_namespace(self, spark: SparkSession, namespace: str) -> None:
        """Create a namespace if missing (remembered for the run)."""
        with self._lock:
            if namespace in self._tables:
                return
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {q(self.name)}.{q(namespace)}")
        self.table_names(spark, namespace)

    def table_names(self, spark: SparkSession, namespace: str) -> set[str]:
        """Tables of a namespace (listed once per run, then kept up to date by this object)."""
        with self._lock:
            if namespace in self._tables:
                return set(self._tables[namespace])
        names = list_tables(spark, self.name, namespace)
        with self._lock:
            self._tables[namespace] = names
        return set(names)

    def exists(self, spark: SparkSession, namespace: str, name: str) -> bool:
        """Whether a table exists (from the cached listing)."""
        return name in self.table_names(spark, namespace)

    def load(self, spark: SparkSession, namespace: str, name: str) -> TableHandle | None:
        """The table's metadata as it is now, or ``None``."""
        return open_table(spark, self.name, namespace, name)

    def info(self, spark: SparkSession, namespace: str, name: str) -> TableInfo | None:
        """Columns and properties of a table (cached for the run), ``None`` when missing."""
        key = (namespace, name)
        with self._lock:
            if key in self._info:
                return self._info[key]
        if not self.exists(spark, namespace, name):
            return None
        return self.refresh(spark, namespace, name)

    def refresh(self, spark: SparkSession, namespace: str, name: str) -> TableInfo | None:
        """Reload a table's columns and properties."""
        table = self.load(spark, namespace, name)
        if table is None:
            with self._lock:
                self._info.pop((namespace, name), None)
                self._tables.setdefault(namespace, set()).discard(name)
            return None
        columns, structs = _columns(table.schema())
        info = TableInfo(namespace, name, columns, structs, table.properties())
        with self._lock:
            self._info[(namespace, name)] = info
            self._tables.setdefault(namespace, set()).add(name)
        return info

    def forget(self, namespace: str, name: str | None = None) -> None:
        """Drop what is cached about a table (or a whole namespace)."""
        with self._lock:
            if name is None:
                self._tables.pop(namespace, None)
                for key in [k for k in self._info if k[0] == namespace]:
                    del self._info[key]
            else:
                self._info.pop((namespace, name), None)

    # ------------------------------------------------------------------ the ledger

    def summaries(
        self, spark: SparkSession, namespace: str, name: str, pipeline: str, batch_id: int
    ) -> dict[str, dict[str, str]]:
        """Snapshot summaries of ``(pipeline, batch)`` commits of a table, by step (walking back
        from the current snapshot until an older batch of the pipeline)."""
        return self.commits(spark, namespace, name, pipeline, batch_id)[0]

    def commits(
        self, spark: SparkSession, namespace: str, name: str, pipeline: str, batch_id: int
    ) -> tuple[dict[str, dict[str, str]], int]:
        """:meth:`summaries`, and the number of snapshots the table's metadata holds."""
        table = self.load(spark, namespace, name)
        if table is None:
            return {}, 0
        out: dict[str, dict[str, str]] = {}
        snap = table.current()
        for _ in range(MAX_WALK):
            if snap is None:
                break
            summary = snap.summary
            if summary.get(ledger.PIPELINE) == pipeline:
                b = summary.get(ledger.BATCH)
                if b == str(batch_id):
                    out.setdefault(summary.get(ledger.STEP, ""), summary)
                elif b is not None and b.isdigit() and int(b) < batch_id:
                    break
            snap = table.snapshot(snap.parent) if snap.parent is not None else None
        return out, table.snapshot_count()

    def current_summary(
        self, spark: SparkSession, namespace: str, name: str
    ) -> dict[str, str] | None:
        """The summary of a table's current snapshot (``{}`` for a table without one), ``None``
        when the table does not exist."""
        table = self.load(spark, namespace, name)
        if table is None:
            return None
        snap = table.current()
        return {} if snap is None else dict(snap.summary)

    def committed_steps(
        self, spark: SparkSession, namespace: str, name: str, pipeline: str, batch_id: int
    ) -> set[str]:
        """Steps of ``(pipeline, batch)`` already committed to a table."""
        return set(self.summaries(spark, namespace, name, pipeline, batch_id))

    # ------------------------------------------------------------------ DDL

    def create_table(
        self,
        spark: SparkSession,
        namespace: str,
        name: str,
        columns_sql: str,
        properties: Mapping[str, str] | None = None,
        partitioned_by: str | None = None,
    ) -> TableInfo:
        """``CREATE TABLE IF NOT EXISTS`` with cdcflow's table properties (plus ``properties``)."""
        props = {**TABLE_PROPERTIES, **(properties or {})}
        prop_sql = ", ".join(f"{lit(k)}={lit(v)}" for k, v in props.items())
        part = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.ident(namespace, name)} ({columns_sql}) "
            f"USING iceberg{part} TBLPROPERTIES ({prop_sql})"
        )
        info = self.refresh(spark, namespace, name)
        assert info is not None
        return info

    def ensure_table(
        self,
        spark: SparkSession,
        namespace: str,
        name: str,
        fields: Sequence[tuple[str, str]],
        properties: Mapping[str, str] | None = None,
        partitioned_by: str | None = None,
    ) -> TableInfo:
        """An internal table: created when missing, given the columns it lacks (a table of an
        earlier version) when not."""
        info = self.info(spark, namespace, name)
        if info is None:
            columns = ", ".join(f"{q(n)} {t}" for n, t in fields)
            return self.create_table(spark, namespace, name, columns, properties, partitioned_by)
        missing = [(n, t) for n, t in fields if n not in info.columns]
        if missing:
            cols = ", ".join(f"{q(n)} {t}" for n, t in missing)
            spark.sql(f"ALTER TABLE {self.ident(namespace, name)} ADD COLUMNS ({cols})")
            refreshed = self.refresh(spark, namespace, name)
            assert refreshed is not None
            return refreshed
        return info

    def alter(
        self,
        spark: SparkSession,
        namespace: str,
        name: str,
        add: Mapping[str, str] | None = None,
        widen: Mapping[str, str] | None = None,
        properties: Mapping[str, str] | None = None,
        prefixes: Iterable[str] = ("",),
    ) -> TableInfo | None:
        """Add columns, widen column types (canonical types) and set properties; ``prefixes``
        repeats column changes inside struct columns (``before.``, ``after.``)."""
        ident = self.ident(namespace, name)
        changed = False
        for prefix in prefixes:
            if add:
                cols = ", ".join(f"{prefix}{q(c)} {spark_type(t)}" for c, t in add.items())
                spark.sql(f"ALTER TABLE {ident} ADD COLUMNS ({cols})")
                changed = True
            for c, t in (widen or {}).items():
                spark.sql(f"ALTER TABLE {ident} ALTER COLUMN {prefix}{q(c)} TYPE {spark_type(t)}")
                changed = True
        if properties:
            sets = ", ".join(f"{lit(k)} = {lit(v)}" for k, v in properties.items())
            spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ({sets})")
            changed = True
        return (
            self.refresh(spark, namespace, name) if changed else self.info(spark, namespace, name)
        )


def _columns(schema: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    from pyspark.sql.types import StructType

    st = StructType.fromJson(dict(schema))
    columns: dict[str, str] = {}
    structs: dict[str, dict[str, str]] = {}
    for f in st.fields:
        columns[f.name] = f.dataType.simpleString()
        if isinstance(f.dataType, StructType):
            structs[f.name] = {x.name: x.dataType.simpleString() for x in f.dataType.fields}
    return columns, structs
