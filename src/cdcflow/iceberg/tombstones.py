"""Which replicas have tombstones, known from the tombstone table's metadata.

The tombstone table is partitioned by replica name, so the replicas it holds tombstones for are
its partitions: read once (from its manifests, through the ``partitions`` metadata table), then
kept current by the appends this process makes, and read again whenever the table changed
otherwise (expiry, maintenance, another writer). A batch looks tombstones up only for the
replicas that may have some; a replica that never had a delete costs no look-up.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cdcflow.iceberg.catalog import Catalog, TableInfo
from cdcflow.iceberg.layouts import (
    TOMBSTONE_FIELDS,
    TOMBSTONE_PARTITION,
    TOMBSTONES,
    TOMBSTONES_PARTITIONED,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def ensure_tombstones(spark: SparkSession, catalog: Catalog, namespace: str) -> TableInfo:
    """The tombstone table of an internal namespace, created partitioned by replica when
    missing; one of an earlier version gets the partitioning (its files written before keep
    none until maintenance rewrites them)."""
    info = catalog.ensure_table(
        spark,
        namespace,
        TOMBSTONES,
        TOMBSTONE_FIELDS,
        properties={TOMBSTONES_PARTITIONED: TOMBSTONE_PARTITION},
        partitioned_by=TOMBSTONE_PARTITION,
    )
    if info.properties.get(TOMBSTONES_PARTITIONED) == TOMBSTONE_PARTITION:
        return info
    ident = catalog.ident(namespace, TOMBSTONES)
    spark.sql(f"ALTER TABLE {ident} ADD PARTITION FIELD {TOMBSTONE_PARTITION}")
    found = catalog.alter(
        spark, namespace, TOMBSTONES, properties={TOMBSTONES_PARTITIONED: TOMBSTONE_PARTITION}
    )
    assert found is not None
    return found


class TombstoneIndex:
    """The replicas with tombstones in ``<namespace>.tombstones``."""

    def __init__(self, catalog: Catalog, namespace: str) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self.ident = catalog.ident(namespace, TOMBSTONES)
        self._lock = threading.Lock()
        #: the snapshot the targets were read at (``None``: not read, or out of date)
        self._snapshot: int | None = None
        #: replicas that may have tombstones (``None``: not known — every one may)
        self._targets: set[str] | None = None

    def _current(self, spark: SparkSession) -> tuple[int | None, int | None]:
        """The table's current snapshot and its parent."""
        table = self.catalog.load(spark, self.namespace, TOMBSTONES)
        snap = table.current() if table is not None else None
        return (None, None) if snap is None else (snap.id, snap.parent)

    def targets(self, spark: SparkSession) -> set[str] | None:
        """The replicas that may have tombstones now (``None``: any may, e.g. files written
        before the table was partitioned by replica)."""
        current, _ = self._current(spark)
        with self._lock:
            if current is not None and current == self._snapshot:
                return None if self._targets is None else set(self._targets)
        found = self._read(spark) if current is not None else set()
        with self._lock:
            self._snapshot, self._targets = current, found
        return None if found is None else set(found)

    def _read(self, spark: SparkSession) -> set[str] | None:
        info = self.catalog.info(spark, self.namespace, TOMBSTONES)
        if info is None or info.properties.get(TOMBSTONES_PARTITIONED) != TOMBSTONE_PARTITION:
            return None
        rows = spark.sql(
            f"SELECT DISTINCT partition.{TOMBSTONE_PARTITION} AS t FROM {self.ident}.partitions"
        ).collect()
        values = [r["t"] for r in rows]
        # files from before the table was partitioned have no replica name of their own
        return None if any(v is None for v in values) else {str(v) for v in values}

    def appended(self, spark: SparkSession, before: int | None, targets: Iterable[str]) -> None:
        """Record that this process appended tombstones of ``targets`` on top of snapshot
        ``before`` (what :meth:`snapshot` said before the append); when anything else was
        committed in between, the index is read again next time."""
        current, parent = self._current(spark)
        with self._lock:
            if (
                before is not None
                and before == self._snapshot
                and parent == before
                and self._targets is not None
            ):
                self._targets |= set(targets)
                self._snapshot = current
            else:
                self._snapshot = None

    @property
    def snapshot(self) -> int | None:
        """The snapshot the index was read at (or kept current to)."""
        with self._lock:
            return self._snapshot
