"""What keeps a long run flat, between batches and under the run's lock: maintenance rounds
over the replicas written since the last one and the internal tables
(:mod:`cdcflow.iceberg.maintain`), each action recorded; tombstones and closed groups of
split-message segments dropped once past their retention; tombstones of earlier versions
(one table per replica) moved into the one tombstone table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cdcflow.engine.encoding import typed_text
from cdcflow.engine.segments import SegmentStage
from cdcflow.engine.statements import expire_tombstones_sql
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import KEY_PROPERTY, SEGMENTS, TOMBSTONES
from cdcflow.iceberg.maintain import MAINTENANCE, MAINTENANCE_FIELDS, Action, Maintainer
from cdcflow.iceberg.tombstones import ensure_tombstones
from cdcflow.spark.sql import lit, q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.config import MaintenanceConfig, PipelineConfig

#: How often tombstones and closed segment groups past their retention are dropped.
EXPIRY_INTERVAL = 3600.0

#: When the tombstones of an internal namespace were last expired in this process, by the
#: catalog's name and location: pipelines made one after another in one process —
#: ``apply_changes`` called batch by batch, a new pipeline per call — share it, so each does
#: not pay the expiry's ``DELETE`` again (a new process expires on its first batch).
_EXPIRED: dict[tuple[str | None, ...], float] = {}


class Upkeep:
    """The upkeep of one source's pipeline (``pipeline_id``: the ledger its batches go
    under; ``segments``: the source's segment stage, whose closed groups expire)."""

    def __init__(
        self, cfg: PipelineConfig, catalog: Catalog, pipeline_id: str, segments: SegmentStage
    ) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self.pipeline_id = pipeline_id
        self.segments = segments
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + "__cdcflow"
        #: replicas written since the last maintenance round, and batches since it
        self.written: set[str] = set()
        self.since_maintenance = 0
        # the first batch of a process drops what is past the retention, then every hour
        # (_EXPIRED): never the way out of a run, when a stop may find the JVM shutting down
        self._expiry: tuple[str | None, ...] | None = None

    @property
    def maintenance_every(self) -> int:
        """Batches between maintenance rounds (the pipeline's policy, else the most frequent
        of the tables' own; no round when nothing is maintained)."""
        policies = [self.cfg.maintenance] + [t.maintenance for t in self.cfg.tables.values()]
        found = [p.every_batches for p in policies if p is not None and p.enabled]
        return min(found) if found else 2**62

    def after_batch(self, spark: SparkSession, batch_id: int, written: set[str]) -> list[Action]:
        """Count a batch that wrote ``written``; the maintenance round when one is due: after
        each batch whose id is one below a multiple of ``every_batches`` (19, 39, … by
        default), and after ``every_batches`` batches of this process. The batch id keeps the
        rounds coming when a process runs fewer batches than that — ``apply_changes`` called
        batch by batch, a scheduled run without ``--follow`` — where a count of the process's
        own batches would never reach it (the round checks each table's files, so a table
        written by an earlier process and not since has not grown)."""
        self.written.update(written)
        self.since_maintenance += 1
        every = self.maintenance_every
        if self.since_maintenance < every and (batch_id + 1) % every:
            return []
        return self.maintain(spark, batch_id)

    def maintain(
        self,
        spark: SparkSession,
        batch_id: int,
        tables: list[str] | None = None,
        forced: bool = False,
        internal: bool = True,
    ) -> list[Action]:
        """A maintenance round (see :mod:`cdcflow.iceberg.maintain`) over the replicas written
        since the last one (or ``tables``), then the internal tables (``internal``); each
        action recorded in the maintenance table. ``forced`` (run by hand): every action due
        at all."""
        names = sorted(self.written) if tables is None else tables
        self.written.clear()
        self.since_maintenance = 0
        targets = [(self.namespace, n) for n in names]
        if internal:
            found = self.catalog.table_names(spark, self.internal)
            targets += [(self.internal, n) for n in sorted(found)]

        def policy_of(namespace: str, name: str) -> MaintenanceConfig | None:
            return self.cfg.maintenance_of(name if namespace == self.namespace else None)

        actions = Maintainer(self.catalog, policy_of).run(spark, targets, forced)
        if actions:
            self._record(spark, batch_id, actions)
        return actions

    def _record(self, spark: SparkSession, batch_id: int, actions: list[Action]) -> None:
        self.catalog.ensure_table(spark, self.internal, MAINTENANCE, MAINTENANCE_FIELDS)
        ident = self.catalog.ident(self.internal, MAINTENANCE)
        rows = ", ".join(
            f"({lit(self.pipeline_id)}, {int(batch_id)}, current_timestamp(), "
            f"{lit(a.namespace)}, {lit(a.table)}, {lit(a.action)}, {a.seconds:.3f}D, "
            f"{a.before.files}L, {a.after.files}L, {a.before.bytes}L, {a.after.bytes}L, "
            f"{a.before.snapshots}L, {a.after.snapshots}L)"
            for a in actions
        )
        spark.sql(f"INSERT INTO {ident} VALUES {rows}")

    def _expiry_key(self, spark: SparkSession) -> tuple[str | None, ...]:
        """Whose expiry this is: the internal namespace of a catalog at its location (read
        from the session once)."""
        if self._expiry is None:
            conf = f"spark.sql.catalog.{self.catalog.name}"
            where = [spark.conf.get(f"{conf}.{k}", None) for k in ("warehouse", "uri")]
            self._expiry = (self.catalog.name, *where, self.internal)
        return self._expiry

    def expire_when_due(self, spark: SparkSession) -> None:
        """:meth:`expire` on the first batch of a process, then every hour (or every
        retention, when that is shorter), whichever pipeline of the process runs it."""
        last = _EXPIRED.get(self._expiry_key(spark), 0.0)
        if time.time() - last > min(EXPIRY_INTERVAL, self.cfg.retention_seconds):
            self.expire(spark)

    def expire(self, spark: SparkSession) -> None:
        """Drop tombstones, and closed groups of split-message segments, older than
        ``tombstone_retention``."""
        _EXPIRED[self._expiry_key(spark)] = time.time()
        retention = self.cfg.retention_seconds
        if self.catalog.exists(spark, self.internal, TOMBSTONES):
            ident = self.catalog.ident(self.internal, TOMBSTONES)
            spark.sql(expire_tombstones_sql(ident, retention))
        if self.catalog.exists(spark, self.internal, SEGMENTS):
            spark.sql(self.segments.expire_sql(retention))

    def migrate_tombstones(self, spark: SparkSession) -> None:
        """Tombstones kept one table per replica (``tombstones__<table>``, typed key columns)
        by earlier versions move into the one tombstone table (a crash half-way copies some
        twice, which changes nothing: a key's highest tombstone counts)."""
        names = self.catalog.table_names(spark, self.internal)
        old = sorted(n for n in names if n.startswith("tombstones__"))
        if not old:
            if TOMBSTONES in names:
                ensure_tombstones(spark, self.catalog, self.internal)
            return
        ensure_tombstones(spark, self.catalog, self.internal)
        target = self.catalog.ident(self.internal, TOMBSTONES)
        for name in old:
            info = self.catalog.info(spark, self.internal, name)
            if info is None:
                continue
            keys = [k for k in info.properties.get(KEY_PROPERTY, "").split(",") if k]
            if keys and all(k in info.columns for k in keys):
                texts = ", ".join(typed_text(q(k), info.columns[k]) for k in keys)
                spark.sql(
                    f"INSERT INTO {target} (target, key, seq, deleted_at) "
                    f"SELECT {lit(name.removeprefix('tombstones__'))}, to_json(array({texts})), "
                    f"_seq, _deleted_at FROM {self.catalog.ident(self.internal, name)}"
                )
            spark.sql(f"DROP TABLE {self.catalog.ident(self.internal, name)}")
            self.catalog.forget(self.internal, name)
        self.catalog.forget(self.internal)
