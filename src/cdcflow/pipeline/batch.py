"""One micro-batch: the engine decides, the Iceberg layer writes.

The ``foreachBatch`` function. Per batch it runs a constant number of Spark jobs whatever the
number of tables — the metadata aggregate (where decoding happens), the staging aggregate over
every table at once — plus one ``MERGE`` per table written (concurrently, ``parallel_tables`` at
a time) and at most one commit per internal table; counts come from those steps and from the
commits' own snapshot summaries. Table metadata is read once per run and kept up to date by the
run's own DDL. On the first batch of a run (the only one Spark may replay) one look-up in the
batch history says whether the batch is already done; every other write is idempotent (guarded
merges, tombstones that only rise) or looked up in its own table (dead letters).

The runner orchestrates: lock → decode → segments and hold → plan → execute → report, with
one ``BatchContext`` per batch. The plans and their statements are built without Spark
(:mod:`cdcflow.engine.plan`, :mod:`cdcflow.engine.stage`); ``BatchStage``
(:mod:`cdcflow.engine.execute`) stages the batch and ``BatchWrites``
(:mod:`cdcflow.pipeline.writes`) runs the statements that commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.config import MaintenanceConfig, PipelineConfig, SourceConfig, parse_duration
from cdcflow.decode.columns import SEGMENT, SKIPPED
from cdcflow.dialects.base import DialectOptions
from cdcflow.engine.deadletters import rejected_rows
from cdcflow.engine.encoding import typed_text
from cdcflow.engine.execute import BatchStage, newest_truncates
from cdcflow.engine.hold import HoldResult, HoldStage
from cdcflow.engine.keys import match_keys
from cdcflow.engine.meta import MARKERS, BatchMeta, aggregate, target_expr, with_batch_columns
from cdcflow.engine.plan import Mode, TablePlan, TableSettings, TableState, decide
from cdcflow.engine.rules import applied, conditions, marked_sql
from cdcflow.engine.segments import SegmentResult, SegmentStage
from cdcflow.engine.statements import expire_tombstones_sql
from cdcflow.engine.stats import TableStats
from cdcflow.engine.steps import batch_plan, table_ddl
from cdcflow.errors import CdcflowError
from cdcflow.iceberg.catalog import Catalog, TableInfo
from cdcflow.iceberg.layouts import (
    BATCHES,
    HELD,
    KEY_PROPERTY,
    MULTISET_LOG,
    SEGMENT_FIELDS,
    SEGMENTS,
    TOMBSTONES,
    held_fields,
)
from cdcflow.iceberg.maintain import MAINTENANCE, MAINTENANCE_FIELDS, Action, Maintainer
from cdcflow.iceberg.tombstones import TombstoneIndex, ensure_tombstones
from cdcflow.iceberg.write import Writer
from cdcflow.pipeline.checkpoint import DIRECT
from cdcflow.pipeline.report import UNDECODED, BatchReport, Reports
from cdcflow.pipeline.writes import BatchContext, BatchWork, BatchWrites
from cdcflow.spark.sql import ScopedPool, lit, q, views_dropped

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.pipeline.checkpoint import Checkpoint, SourceRecord

#: The Spark local property naming the streaming query of a ``foreachBatch`` call.
QUERY_ID = "sql.streaming.queryId"
#: The local property naming the query's run (Spark sets the job group to the run id).
RUN_ID = "spark.jobGroup.id"
#: How often tombstones and closed segment groups past their retention are dropped.
EXPIRY_INTERVAL = 3600.0
#: Batches of fewer events run their queries without adaptive execution, which runs each
#: shuffle stage as a Spark job of its own and plans the rest again after it: for a small
#: batch that is half its jobs, for a large one a plan fitted to its data.
SMALL_BATCH = 10_000
ADAPTIVE = "spark.sql.adaptive.enabled"


def source_options(src: SourceConfig) -> DialectOptions:
    """Decoder options of one configured source."""
    return DialectOptions(
        table_keys={t: tuple(k) for t, k in src.keys.items()},
        column_types={t: dict(c) for t, c in src.types.items()},
        extra=dict(src.options),
    )


class StopRequested(CdcflowError):
    """The pipeline is stopping: a batch that has not started yet is left for the next run."""

    code = "STOP_REQUESTED"


@dataclass
class Shared:
    """What the queries of one pipeline share: the catalog's cached metadata, the lock that
    keeps their batches from running at the same time (they write the same internal tables),
    the stop flag, and the reports in the order batches finished."""

    catalog: Catalog
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    reports: Reports = field(default_factory=Reports)
    #: the replicas with tombstones, by internal namespace
    tombstones: dict[str, TombstoneIndex] = field(default_factory=dict)


class BatchRunner:
    """The ``foreachBatch`` function of one source's query."""

    def __init__(
        self,
        cfg: PipelineConfig,
        record: SourceRecord,
        src: SourceConfig,
        shared: Shared,
        on_report: Callable[[BatchReport], None] | None = None,
        adaptive: bool = True,
        replay: bool = False,
        checkpoint: str | None = None,
        owner: Checkpoint | None = None,
        checked: bool = False,
    ) -> None:
        """``replay``: the batches are replayed dead letters (late events by nature): no
        split-message segments are judged and no transaction is held back. ``checkpoint``:
        Spark's checkpoint of the source's query, when known. ``owner``: the pipeline's
        checkpoint, which records the streaming query that applies the source. ``checked``:
        the batches are frames of the pipeline's own stream, whose canonical events are
        already decoded and checked (:meth:`cdcflow.pipeline.query.Pipeline.stream`), and
        are taken as they are."""
        self.cfg = cfg
        self.checked = checked
        #: Spark's checkpoint of the source's query (its file log names zero-byte files).
        self.checkpoint = checkpoint
        self.owner = owner
        self.adaptive = adaptive
        self.record = record
        self.src = src
        self.source = record.id
        self.pipeline_id = record.ledger
        self.on_report = on_report
        self.shared = shared
        self.catalog = shared.catalog
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + "__cdcflow"
        self.writer = Writer(self.catalog, self.pipeline_id)
        self.tombstones = shared.tombstones.setdefault(
            self.internal, TombstoneIndex(self.catalog, self.internal)
        )
        self.writes = BatchWrites(cfg, self.catalog, self.writer, self.pipeline_id, record.id)
        self.first_batch = True
        #: what the batch in progress cannot read (a Kafka source past lost offsets)
        self.skipped: dict[str, str] = {}
        #: the highest batch id this function has begun to apply
        self.begun: int | None = None
        #: replicas written since the last maintenance round, and batches since it
        self.written: set[str] = set()
        self.since_maintenance = 0
        #: the run of the streaming query that gave the last batch
        self.run: str | None = None
        #: whether the last batch was small (:data:`SMALL_BATCH`)
        self.small = False
        self.reports = Reports()
        #: the target tables' settings, built once from the configuration
        self._settings: dict[str, TableSettings] = {}
        self.failure: BaseException | None = None
        # the first batch of a run drops what is past the retention, then every hour: never
        # the way out of a run, when a stop may find the JVM shutting down
        self.last_expiry = 0.0
        target = target_expr(record.replica_name, record.id)
        #: the table rules' marks (SQL), ``None`` where no table has the rule
        self._rules = {
            rule: marked_sql(conditions(cfg, setting), target)
            for rule, setting in (
                ("deletes", "apply_as_deletes"),
                ("truncates", "apply_as_truncates"),
                ("nulls", "ignore_null_updates"),
            )
        }
        self.segment_stage = SegmentStage(
            self.catalog,
            self.internal,
            self.pipeline_id,
            parse_duration(cfg.segment_wait),
            {record.id: source_options(src)},
            source=record.id,
        )
        if replay:
            self.segment_stage.pending = False
        self.hold_stage = (
            HoldStage(
                self.catalog, self.internal, self.pipeline_id, cfg.consistency, source=record.id
            )
            if cfg.consistency != "none" and not replay
            else None
        )

    # ------------------------------------------------------------------ entry

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Apply one micro-batch: ``df`` holds raw messages (decoded here with the source's
        dialect), decoded rows, or canonical events (see
        :func:`cdcflow.decode.spark.decoded_frame`); a batch id already committed is
        skipped."""
        while not self.shared.lock.acquire(timeout=0.2):
            if self.shared.stopping.is_set():
                raise StopRequested(f"batch {batch_id} of source {self.source} left for later")
        try:
            if self.shared.stopping.is_set():
                raise StopRequested(f"batch {batch_id} of source {self.source} left for later")
            with views_dropped(df.sparkSession):
                self._batch(df, batch_id)
        except StopRequested:
            raise
        except BaseException as e:
            self.failure = e
            raise
        finally:
            self.shared.lock.release()

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        started = time.time()
        # the batch frame belongs to the query's own session: temp views must live there
        spark = df.sparkSession
        # a streaming query's batch runs with adaptive execution off; the batch's own queries
        # (staging, merges) are ordinary batch queries that gain from it unless the batch is
        # small (decided after the metadata aggregate, which goes by the last batch's size)
        self._adapt(spark)
        self._follow_run(spark)
        if self.first_batch:
            self._claim_query(spark)
        # the first batch of a run may be a replay of one already committed, and so may any
        # batch id not above those already begun (a task retried, a call repeated)
        check = self.first_batch or (self.begun is not None and batch_id <= self.begun)
        self.begun = batch_id if self.begun is None else max(self.begun, batch_id)
        self.catalog.ensure_namespace(spark, self.namespace)
        self.catalog.ensure_namespace(spark, self.internal)
        if check:
            self._migrate_tombstones(spark)
            if self.catalog.committed_steps(
                spark, self.internal, BATCHES, self.pipeline_id, batch_id
            ):
                self.first_batch = False
                return
        self.skipped = self._skipped(spark, batch_id)
        decoded = self._columns(self._frame(df)).persist()
        ctx = BatchContext(spark, batch_id, check, started)
        try:
            report = self._process(ctx, decoded)
        finally:
            decoded.unpersist()
        self.first_batch = False
        self.written.update(o.table for o in report.outcomes)
        self.since_maintenance += 1
        if self.since_maintenance >= self.maintenance_every:
            actions = self.maintain(spark, batch_id)
            if actions:
                lines = tuple(a.line() for a in actions)
                done = {"maintenance": lines, "actions": tuple(actions)}
                report = BatchReport(**{**report.__dict__, **done})
        self.reports.add(report)
        self.shared.reports.add(report)
        if time.time() - self.last_expiry > min(EXPIRY_INTERVAL, self.cfg.retention_seconds):
            self.expire(spark)
        if self.on_report:
            self.on_report(report)

    def _adapt(self, spark: SparkSession) -> None:
        """Adaptive execution for the batch's queries: as the session has it, except for a
        small batch (:data:`SMALL_BATCH`)."""
        spark.conf.set(ADAPTIVE, "true" if self.adaptive and not self.small else "false")

    @property
    def maintenance_every(self) -> int:
        """Batches between maintenance rounds (the pipeline's policy, else the most frequent
        of the tables' own; no round when nothing is maintained)."""
        policies = [self.cfg.maintenance] + [t.maintenance for t in self.cfg.tables.values()]
        found = [p.every_batches for p in policies if p is not None and p.enabled]
        return min(found) if found else 2**62

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
            self._record_maintenance(spark, batch_id, actions)
        return actions

    def _record_maintenance(
        self, spark: SparkSession, batch_id: int, actions: list[Action]
    ) -> None:
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

    def _skipped(self, spark: SparkSession, batch_id: int) -> dict[str, str]:
        """For a Kafka source that goes on past lost offsets, what this batch cannot read
        (see :mod:`cdcflow.pipeline.kafka`)."""
        kafka = self.src.kafka
        if kafka is None or kafka.fail_on_data_loss or self.checkpoint is None:
            return {}
        from cdcflow.pipeline.kafka import batch_start, log_starts, skipped

        start = batch_start(spark, self.checkpoint, batch_id)
        earliest = log_starts(spark, kafka.spark_options(self.src.name), sorted(start))
        return skipped(start, earliest)

    def _empty_files(self, spark: SparkSession, seen: set[str], batch_id: int) -> DataFrame | None:
        """The rows of the batch's zero-byte files, which Spark's scan never reads (the files
        of the batch not among the origins its aggregate saw), else ``None``."""
        if self.checkpoint is None:
            return None
        from cdcflow.decode.spark import empty_files

        found = empty_files(
            spark,
            self.checkpoint,
            batch_id,
            seen,
            self.src.dialect,
            source_options(self.src),
            self.source,
        )
        return None if found is None else self._columns(found)

    def _follow_run(self, spark: SparkSession) -> None:
        """A query restarted with the same function begins a new run (and calls outside a
        streaming query are a run of their own), whose first batch may be a replay of one
        already committed: it is checked like the first batch of a process."""
        context = spark.sparkContext
        run = context.getLocalProperty(RUN_ID) if context.getLocalProperty(QUERY_ID) else None
        run = run or DIRECT
        if self.run is not None and run != self.run:
            self.first_batch = True
        self.run = run

    def _claim_query(self, spark: SparkSession) -> None:
        """Record the streaming query running this batch as the source's (``direct`` outside
        a streaming query), or refuse another; find the query's checkpoint when it is the
        pipeline's. A runner without an owner (replays of dead letters, with a ledger of their
        own) records nothing."""
        if self.owner is None:
            return
        query = spark.sparkContext.getLocalProperty(QUERY_ID) or DIRECT
        self.record = self.owner.claim_query(self.record, query)
        if self.checkpoint is None and self.owner.query_id(self.record) == query:
            self.checkpoint = self.owner.query_path(self.record)

    def _frame(self, df: DataFrame) -> DataFrame:
        """The decoded frame of a batch: raw messages decoded with the source's dialect,
        canonical events given the decoded frame's columns (and their types checked, unless
        the pipeline's own stream did)."""
        from cdcflow.decode.spark import decode_dataframe, decoded_frame, is_decoded

        if is_decoded(df):
            return df if self.checked else decoded_frame(df)
        return decode_dataframe(df, self.src.dialect, source_options(self.src), self.source)

    def _columns(self, df: DataFrame) -> DataFrame:
        """Decoded rows with the batch's working columns: segments tagged with this source
        (whoever decoded them), the tables' rules applied (``apply_as_deletes``,
        ``apply_as_truncates``, ``ignore_null_updates``)."""
        tag = (
            f"CASE WHEN operation = '{SEGMENT}' THEN map_concat(map_filter(metadata, "
            f"(k, v) -> k <> 'cdcflow.source'), map('cdcflow.source', {lit(self.source)})) "
            "ELSE metadata END AS metadata"
        )
        columns = [tag if c == "metadata" else q(c) for c in df.columns]
        if any(self._rules.values()):
            columns = [
                tag if c == "metadata" else e
                for c, e in zip(df.columns, applied(df.columns, **self._rules), strict=True)
            ]
        return with_batch_columns(df.selectExpr(*columns), self.source, self.record.replica_name)

    def _migrate_tombstones(self, spark: SparkSession) -> None:
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

    def expire(self, spark: SparkSession) -> None:
        """Drop tombstones, and closed groups of split-message segments, older than
        ``tombstone_retention``."""
        self.last_expiry = time.time()
        retention = self.cfg.retention_seconds
        if self.catalog.exists(spark, self.internal, TOMBSTONES):
            ident = self.catalog.ident(self.internal, TOMBSTONES)
            spark.sql(expire_tombstones_sql(ident, retention))
        if self.catalog.exists(spark, self.internal, SEGMENTS):
            spark.sql(self.segment_stage.expire_sql(retention))

    # ------------------------------------------------------------------ a batch

    def _process(self, ctx: BatchContext, decoded: DataFrame) -> BatchReport:
        spark, clock = ctx.spark, ctx.clock
        meta = BatchMeta()
        with clock.stage("decode"):
            meta.add(aggregate(spark, decoded))
            empty = self._empty_files(spark, meta.origins, ctx.batch_id)
            if empty is not None:
                meta.add(aggregate(spark, empty))
                decoded = decoded.unionByName(empty)
        self.small = meta.events + meta.rejected + meta.segments < SMALL_BATCH
        self._adapt(spark)
        valid = decoded.where("error_code IS NULL")
        events = valid.where(f"NOT (operation <=> '{SEGMENT}' OR operation <=> '{SKIPPED}')")
        if meta.rejected:
            rejected = decoded.where("error_code IS NOT NULL")
            ctx.dead.append(rejected_rows(rejected, self.pipeline_id, ctx.batch_id))
        seg: SegmentResult | None = None
        hold: HoldResult | None = None
        try:
            if meta.segments or self.segment_stage.has_pending(spark):
                with clock.stage("segments"):
                    seg, events = self._segments(ctx, valid, events, meta)
            if self.hold_stage is not None:
                with clock.stage("hold"):
                    hold, events, meta = self._hold(ctx, events, meta)
            return self._apply(ctx, events, meta, seg, hold)
        finally:
            if seg is not None:
                seg.release()

    def _segments(
        self, ctx: BatchContext, valid: DataFrame, events: DataFrame, meta: BatchMeta
    ) -> tuple[SegmentResult, DataFrame]:
        spark, batch_id = ctx.spark, ctx.batch_id
        self.catalog.ensure_table(spark, self.internal, SEGMENTS, SEGMENT_FIELDS)
        seg = self.segment_stage.run(
            spark, valid.where(f"operation = '{SEGMENT}'"), batch_id, ctx.check
        )
        for st in seg.statements:
            self.writer.run(spark, st, batch_id)
        assembled = self._columns(seg.assembled)
        whole = assembled.where(f"error_code IS NULL AND NOT (operation <=> '{SKIPPED}')")
        if seg.complete:
            meta.add(aggregate(spark, whole))
        if seg.rejected:
            rejected = assembled.where("error_code IS NOT NULL")
            ctx.dead.append(rejected_rows(rejected, self.pipeline_id, batch_id))
        if seg.dead_groups or seg.late:
            ctx.dead.append(seg.dead)
        return seg, events.unionByName(whole)

    def _hold(
        self, ctx: BatchContext, events: DataFrame, meta: BatchMeta
    ) -> tuple[HoldResult, DataFrame, BatchMeta]:
        assert self.hold_stage is not None
        spark = ctx.spark
        if meta.ops.get("RESOLVED"):
            self.writes.watermarks(ctx, events)
        self.catalog.ensure_table(spark, self.internal, HELD, held_fields())
        hold = self.hold_stage.run(
            spark, events, ctx.batch_id, ctx.check, meta.ops.get("COMMIT", 0)
        )
        try:
            for st in hold.statements:
                self.writer.run(spark, st, ctx.batch_id, ctx.check)
        finally:
            hold.release()
        if hold.unchanged:
            return hold, events, meta
        released = BatchMeta(
            segments=meta.segments,
            rejected=meta.rejected,
            rejected_codes=meta.rejected_codes,
            skipped=meta.skipped,
        )
        released.add(aggregate(spark, hold.events))
        return hold, hold.events, released

    # ------------------------------------------------------------------ plan

    def plan(self, spark: SparkSession, events: DataFrame, meta: BatchMeta) -> list[TablePlan]:
        """The decisions for every target table of the batch (no writes)."""
        states: dict[str, TableState | None] = {}
        pending: list[TableSettings] = []
        for target, tmeta in sorted(meta.tables.items()):
            if not set(tmeta.ops) - set(MARKERS):
                continue
            settings = self.settings(target)
            info = self.catalog.info(spark, self.namespace, settings.name)
            states[target] = _state(info, settings.mode)
            pending.append(settings)
        matched: dict[str, tuple[str, ...]] = {}
        unnamed = [
            s.target
            for s in pending
            if s.mode != "append"
            and not s.keyless
            and meta.tables[s.target].positional_keys
            and not meta.tables[s.target].key_sets
            and not s.keys
            and not (states[s.target] and states[s.target].properties.get(KEY_PROPERTY))  # type: ignore[union-attr]
            and not self._source_keys(s.name)
        ]
        if unnamed:
            matched = match_keys(spark, events, unnamed)

        def plan_of(settings: TableSettings, truncate_at: str | None) -> TablePlan:
            target = settings.target
            return decide(
                settings,
                meta.tables[target],
                states[target],
                source=self.source,
                source_keys=self._source_keys(settings.name),
                matched_keys=matched.get(target),
                truncate_at=truncate_at,
            )

        plans = [plan_of(s, None) for s in pending]
        ordered = [p for p in plans if p.sequence_by and p.meta.ops.get("TRUNCATE")]
        if ordered:
            # a TRUNCATE of a table ordered by its columns is placed in their order
            found = newest_truncates(spark, events, ordered)
            plans = [
                plan_of(s, found.get(s.target)) if s.target in found else p
                for p, s in zip(plans, pending, strict=True)
            ]
        return plans

    def settings(self, target: str) -> TableSettings:
        """The settings of a target table, built once from the configuration."""
        found = self._settings.get(target)
        if found is None:
            found = self._settings[target] = TableSettings.of(target, self.cfg.table(target))
        return found

    def _source_keys(self, name: str) -> list[str] | None:
        found = self.src.keys.get(name)
        return list(found) if found else None

    # ------------------------------------------------------------------ apply

    def _apply(
        self,
        ctx: BatchContext,
        events: DataFrame,
        meta: BatchMeta,
        seg: SegmentResult | None,
        hold: HoldResult | None,
    ) -> BatchReport:
        spark, clock = ctx.spark, ctx.clock
        workers = max(1, self.cfg.parallel_tables)
        with ScopedPool(max_workers=workers) as pool:
            with clock.stage("plan"):
                plans = self.plan(spark, events, meta)
                ddls = [d for d in (table_ddl(p) for p in plans) if d is not None]
                for f in [pool.submit(self.writes.ddl, spark, d) for d in ddls]:
                    f.result()
            stage = BatchStage(spark, events, plans) if plans else None
            stats: dict[str, TableStats] = {}
            before: int | None = None
            try:
                if stage is not None and (
                    stage.tables.keyed or stage.tables.multiset or stage.has_rules
                ):
                    with clock.stage("validate"):
                        tombs, looked = None, None
                        if stage.tables.merge and self.catalog.exists(
                            spark, self.internal, TOMBSTONES
                        ):
                            # only the replicas that may have tombstones look them up
                            have = self.tombstones.targets(spark)
                            looked = {p.name for p in stage.tables.merge if not p.soft_deletes}
                            looked = looked if have is None else looked & have
                            if looked:
                                tombs = self.catalog.ident(self.internal, TOMBSTONES)
                        before = self.tombstones.snapshot
                        if stage.tables.keyed or stage.tables.multiset:
                            log = None
                            if stage.tables.multiset and self.catalog.exists(
                                spark, self.internal, MULTISET_LOG
                            ):
                                log = self.catalog.ident(self.internal, MULTISET_LOG)
                            stage.stage(tombs, looked, log, (self.pipeline_id, ctx.batch_id))
                        stats = stage.stats()
                    if any(s.rejected for s in stats.values()):
                        ctx.dead.append(stage.rejected(self.pipeline_id, ctx.batch_id))
                steps = batch_plan(
                    plans,
                    stats,
                    logged=stage is not None and stage.winners_view is not None,
                    watermarks=bool(meta.ops.get("RESOLVED")) and hold is None,
                )
                work = BatchWork(events, meta, plans, stage, stats, hold, steps)
                outcomes = self.writes.write(ctx, pool, work)
                if any(s.kind == "tombstones" for s in steps.internal):
                    deleted = [
                        p.name
                        for p in plans
                        if p.mode == "merge"
                        and not p.soft_deletes
                        and stats.get(p.target, TableStats()).deletes
                    ]
                    self.tombstones.appended(spark, before, deleted)
            finally:
                if stage is not None:
                    stage.release()
        dead_n = 0
        with clock.stage("dead_letters"):
            if ctx.dead:
                dead_n = self.writes.dead_letters(ctx)
        # every message that gave no event and ends as a dead letter counts as one event
        unread = meta.rejected
        if seg is not None:
            unread += seg.rejected + seg.dead_segments + seg.late
        dead_input = unread + sum(o.dead_lettered for o in outcomes)
        total = meta.events + unread
        duplicates = sum(o.duplicates for o in outcomes)
        conflicts = sum(o.conflicts for o in outcomes)
        stale = sum(o.stale for o in outcomes)
        undelivered = max(0, dead_n - dead_input) if self.cfg.outputs else 0
        codes = dict(meta.rejected_codes)
        for found in [*(o.dead_letter_codes for o in outcomes), seg.codes if seg else {}]:
            for code, n in found.items():
                codes[code] = codes.get(code, 0) + n
        if undelivered:
            codes["DELIVERY_FAILED"] = codes.get("DELIVERY_FAILED", 0) + undelivered
        operations = dict(meta.ops)
        if unread:
            operations[UNDECODED] = unread
        report = BatchReport(
            batch_id=ctx.batch_id,
            events=total,
            operations=operations,
            duplicates=duplicates,
            conflicts=conflicts,
            stale=stale,
            dead_lettered=dead_input,
            applied=total - duplicates - conflicts - stale - dead_input,
            undelivered=undelivered,
            source=self.src.name,
            tables={o.table: o.events for o in outcomes},
            seconds=time.time() - ctx.started,
            outcomes=tuple(outcomes),
            segments=meta.segments,
            reassembled=seg.complete if seg is not None else 0,
            held=hold.held if hold is not None else 0,
            released=hold.released if hold is not None else 0,
            stages=dict(clock.seconds),
            skipped=dict(self.skipped),
            skipped_messages=dict(meta.skipped),
            dead_letter_codes=codes,
        )
        with clock.stage("history"):
            self.writes.history(ctx, report)
        return BatchReport(**{**report.__dict__, "stages": dict(clock.seconds)})


def _state(info: TableInfo | None, mode: Mode) -> TableState | None:
    if info is None:
        return None
    columns = info.structs.get("after", {}) if mode == "append" else info.columns
    return TableState(columns=dict(columns), properties=dict(info.properties))
