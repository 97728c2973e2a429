"""A batch's writes: what the engine decided, run by the Iceberg layer.

:class:`BatchWrites` runs every statement of a batch once it is planned and staged: each
table's DDL, then its statements (a truncate, the guarded ``MERGE`` or changelog, an scd2
table's versions after the history log), ``parallel_tables`` at a time on the batch's pool,
each under the commit ledger (:mod:`cdcflow.iceberg.write`), and the internal tables'
(tombstones, watermarks, dead letters, the batch history). The statements' text comes from
:mod:`cdcflow.engine.stage` and :mod:`cdcflow.engine.history`; nothing here decides.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.config import PipelineConfig
from cdcflow.engine.execute import BatchStage, release_checkpoint
from cdcflow.engine.history import (
    create_history_columns,
    history_merge_sql,
    log_merge_sql,
    touched_sql,
    versions_sql,
)
from cdcflow.engine.hold import HoldResult
from cdcflow.engine.meta import BatchMeta
from cdcflow.engine.plan import TablePlan
from cdcflow.engine.stage import (
    TableStats,
    changelog_sql,
    create_changelog_columns,
    create_replica_columns,
    merge_sql,
    tombstones_sql,
    truncate_sql,
)
from cdcflow.engine.watermarks import watermarks_sql
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import (
    BATCHES,
    CDC_STRUCT,
    CHANGELOG_STRUCT,
    DEAD_LETTER_FIELDS,
    DEAD_LETTERS,
    HISTORY_FIELDS,
    HISTORY_LOG,
    HISTORY_LOG_FIELDS,
    HISTORY_STRUCT,
    KEY_PROPERTY,
    TOMBSTONE_FIELDS,
    TOMBSTONES,
    TRUNCATE_PROPERTY,
    WATERMARK_FIELDS,
    WATERMARKS,
)
from cdcflow.iceberg.write import Statement, Writer, Written
from cdcflow.pipeline.report import BatchReport, StageClock, TableOutcome
from cdcflow.spark.sql import lit, q, view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class BatchContext:
    """What every step of one batch shares: the batch's session and id, whether the batch
    may be a replay of one already committed (``check``: internal writes that are not
    idempotent look themselves up), when it started, its stage clock and the dead letters
    gathered so far (written at the end)."""

    spark: SparkSession
    batch_id: int
    check: bool
    started: float
    clock: StageClock = field(default_factory=StageClock)
    dead: list[DataFrame] = field(default_factory=list)


@dataclass(frozen=True)
class BatchWork:
    """What the batch writes once planned and staged: its events and their metadata, the
    tables' plans, the staged rows and their counts, and the consistency hold's result."""

    events: DataFrame
    meta: BatchMeta
    plans: Sequence[TablePlan]
    stage: BatchStage | None
    stats: Mapping[str, TableStats]
    hold: HoldResult | None


class BatchWrites:
    """The writes of one source's batches (``source``: its id; ``pipeline_id``: the ledger
    its statements are recorded under)."""

    def __init__(
        self, cfg: PipelineConfig, catalog: Catalog, writer: Writer, pipeline_id: str, source: str
    ) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self.writer = writer
        self.pipeline_id = pipeline_id
        self.source = source
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + "__cdcflow"

    def ddl(self, spark: SparkSession, plan: TablePlan) -> None:
        """Create or evolve one table as its plan says (the truncate watermark is set after
        the rows it removes are gone)."""
        ns, name, schema = self.namespace, plan.name, plan.schema
        props = {k: v for k, v in plan.properties.items() if k != TRUNCATE_PROPERTY}
        if plan.mode == "append":
            if not plan.exists:
                cols = create_changelog_columns(plan, CHANGELOG_STRUCT)
                self.catalog.create_table(spark, ns, name, cols, props)
            elif schema.add or schema.widen or props:
                self.catalog.alter(
                    spark, ns, name, schema.add, schema.widen, props, ("before.", "after.")
                )
            return
        if plan.keys is None:
            if plan.exists and not plan.meta.row_events and (schema.add or schema.widen):
                self.catalog.alter(spark, ns, name, schema.add, schema.widen)
            return
        if not plan.exists:
            if plan.writes_rows:
                props[KEY_PROPERTY] = ",".join(plan.keys)
                if plan.mode == "scd2":
                    cols = create_history_columns(plan, HISTORY_STRUCT)
                else:
                    cols = create_replica_columns(plan, CDC_STRUCT)
                self.catalog.create_table(spark, ns, name, cols, props)
            return
        if schema.add or schema.widen or props:
            self.catalog.alter(spark, ns, name, schema.add, schema.widen, props)

    def watermarks(self, ctx: BatchContext, events: DataFrame) -> Written:
        spark = ctx.spark
        self.catalog.ensure_table(spark, self.internal, WATERMARKS, WATERMARK_FIELDS)
        ident = self.catalog.ident(self.internal, WATERMARKS)
        sql = watermarks_sql(spark, ident, events, ctx.batch_id, self.source)
        return self.writer.run(
            spark, Statement(self.internal, WATERMARKS, "watermarks", sql), ctx.batch_id
        )

    def write(
        self, ctx: BatchContext, pool: ThreadPoolExecutor, work: BatchWork
    ) -> list[TableOutcome]:
        """Every table's writes and the internal tables', concurrently."""
        phase = time.perf_counter()
        stage, meta = work.stage, work.meta
        tables: list[tuple[TablePlan, Future[tuple[TableOutcome, float]]]] = []
        internal: list[Future[Written]] = []
        if stage is not None:
            log: Future[Written] | None = None
            if stage.winners_view is not None:
                # submitted first, so it runs before the history tables that wait for it
                log = pool.submit(self.history_log, ctx, stage)
                internal.append(log)
            for plan in work.plans:
                job = pool.submit(self.table, ctx, work, plan, log)
                tables.append((plan, job))
            merged = {p.target for p in stage.merge}
            if any(s.deletes for t, s in work.stats.items() if t in merged):
                internal.append(pool.submit(self.tombstones, ctx, stage))
        if meta.ops.get("RESOLVED") and work.hold is None:
            internal.append(pool.submit(self.watermarks, ctx, work.events))
        outputs: Future[list[DataFrame]] | None = None
        if self.cfg.outputs:
            outputs = pool.submit(self.outputs, ctx, work.events)
        outcomes: list[TableOutcome] = []
        merge_done = internal_done = phase
        for _plan, future in tables:
            outcome, finished = future.result()
            outcomes.append(outcome)
            merge_done = max(merge_done, finished)
        for written in internal:
            written.result()
            internal_done = max(internal_done, time.perf_counter())
        if tables:
            ctx.clock.add("merge", merge_done - phase)
        if internal:
            ctx.clock.add("internal", internal_done - phase)
        if outputs is not None:
            ctx.dead.extend(outputs.result())
            ctx.clock.add("outputs", time.perf_counter() - phase)
        return outcomes

    def table(
        self,
        ctx: BatchContext,
        work: BatchWork,
        plan: TablePlan,
        log: Future[Written] | None = None,
    ) -> tuple[TableOutcome, float]:
        """One table's statements, in order: a truncate, then the merge (or changelog); for
        an scd2 table, its versions once the history log holds the batch (``log``)."""
        started = time.perf_counter()
        spark, batch_id, stage = ctx.spark, ctx.batch_id, work.stage
        assert stage is not None
        events = work.meta.tables[plan.target].events
        s = work.stats.get(plan.target, TableStats())
        rejected = sum((s.rejected or {}).values())
        ident = self.catalog.ident(self.namespace, plan.name)
        stale = 0
        if plan.mode == "scd2":
            if plan.keys is not None and s.live and log is not None:
                log.result()
                self.versions(ctx, plan, stage)
            outcome = TableOutcome(
                plan.name,
                "scd2",
                events,
                s.duplicates,
                s.conflicts,
                0,
                rejected,
                time.perf_counter() - started,
            )
            return outcome, time.perf_counter()
        if plan.mode == "append":
            if plan.meta.events > rejected:
                sql = changelog_sql(ident, stage.changelog_source(plan))
                self.writer.run(
                    spark, Statement(self.namespace, plan.name, "append", sql), batch_id
                )
            outcome = TableOutcome(plan.name, "append", events, dead_lettered=rejected)
            return outcome, time.perf_counter()
        truncate = plan.truncate if plan.keys is not None else None
        if truncate is not None and not s.live:
            sql = truncate_sql(ident, truncate)
            self.writer.run(spark, Statement(self.namespace, plan.name, "truncate", sql), batch_id)
        if plan.keys is not None and s.live:
            # a TRUNCATE with changes after it: one commit (the MERGE deletes the older rows)
            sql = merge_sql(ident, plan, stage.merge_source(plan), truncate)
            written = self.writer.run(
                spark, Statement(self.namespace, plan.name, "merge", sql, report=True), batch_id
            )
            # stale: a key's newest events that lost to its tombstone, or that the guarded
            # MERGE did not write because the replica row was newer (merge-on-read: written
            # rows are the commit's added records)
            stale = max(0, s.writes - written.count("added-records"))
        if truncate is not None:
            # the watermark after the rows: a crash before it repeats an idempotent statement
            self.catalog.alter(
                spark, self.namespace, plan.name, properties={TRUNCATE_PROPERTY: truncate}
            )
        outcome = TableOutcome(
            plan.name,
            "merge",
            events,
            s.duplicates,
            s.conflicts,
            stale + s.buried,
            rejected,
            time.perf_counter() - started,
        )
        return outcome, time.perf_counter()

    def history_log(self, ctx: BatchContext, stage: BatchStage) -> Written:
        """Record the batch's events of the scd2 tables (idempotent: a replay adds nothing)."""
        spark = ctx.spark
        self.catalog.ensure_table(
            spark, self.internal, HISTORY_LOG, HISTORY_LOG_FIELDS, partitioned_by="target"
        )
        ident = self.catalog.ident(self.internal, HISTORY_LOG)
        sql = log_merge_sql(ident, stage.history_log_source(), [p.name for p in stage.history])
        st = Statement(self.internal, HISTORY_LOG, "log", sql)
        return self.writer.run(spark, st, ctx.batch_id)

    def versions(self, ctx: BatchContext, plan: TablePlan, stage: BatchStage) -> Written:
        """Recompute the versions of the keys the batch touched and make the history table
        hold exactly them."""
        assert stage.winners_view is not None
        spark = ctx.spark
        log = self.catalog.ident(self.internal, HISTORY_LOG)
        touched = touched_sql(stage.winners_view, log, plan, plan.meta.ops.get("TRUNCATE", 0) > 0)
        versions = spark.sql(versions_sql(log, touched, plan)).localCheckpoint(eager=True)
        try:
            ident = self.catalog.ident(self.namespace, plan.name)
            sql = history_merge_sql(ident, plan, view(versions, "versions"), touched)
            return self.writer.run(
                spark, Statement(self.namespace, plan.name, "versions", sql), ctx.batch_id
            )
        finally:
            release_checkpoint(versions)

    def tombstones(self, ctx: BatchContext, stage: BatchStage) -> Written:
        spark = ctx.spark
        self.catalog.ensure_table(spark, self.internal, TOMBSTONES, TOMBSTONE_FIELDS)
        ident = self.catalog.ident(self.internal, TOMBSTONES)
        sql = tombstones_sql(ident, stage.deletes_source())
        st = Statement(self.internal, TOMBSTONES, "tombstones", sql, once=True)
        return self.writer.run(spark, st, ctx.batch_id, ctx.check)

    def outputs(self, ctx: BatchContext, events: DataFrame) -> list[DataFrame]:
        from cdcflow.outputs.stream import emit

        return emit(events, list(self.cfg.outputs), self.pipeline_id, ctx.batch_id)

    def dead_letters(self, ctx: BatchContext) -> int:
        spark, dead = ctx.spark, ctx.dead
        rows = dead[0]
        for d in dead[1:]:
            rows = rows.unionByName(d)
        self.catalog.ensure_table(spark, self.internal, DEAD_LETTERS, DEAD_LETTER_FIELDS)
        ident = self.catalog.ident(self.internal, DEAD_LETTERS)
        st = Statement(
            self.internal,
            DEAD_LETTERS,
            "dead_letters",
            f"INSERT INTO {ident} ({', '.join(q(n) for n, _ in DEAD_LETTER_FIELDS)}) "
            f"SELECT * FROM {view(rows, 'dlq')}",
            once=True,
            report=True,
        )
        written = self.writer.run(spark, st, ctx.batch_id, ctx.check)
        return written.count("added-records")

    def history(self, ctx: BatchContext, report: BatchReport) -> None:
        spark, clock = ctx.spark, ctx.clock
        self.catalog.ensure_table(spark, self.internal, BATCHES, HISTORY_FIELDS)
        ident = self.catalog.ident(self.internal, BATCHES)
        ops = ", ".join(f"{lit(k)}, CAST({v} AS bigint)" for k, v in report.operations.items())
        tables = ", ".join(f"{lit(k)}, CAST({v} AS bigint)" for k, v in report.tables.items())
        stages = ", ".join(f"{lit(k)}, CAST({v:.3f} AS double)" for k, v in clock.seconds.items())
        lost = ", ".join(f"{lit(k)}, {lit(v)}" for k, v in sorted(report.skipped.items()))
        sql = f"""
            INSERT INTO {ident} (pipeline, batch_id, started_at, finished_at, events, operations,
                                 duplicates, conflicts, stale, dead_lettered, tables, seconds,
                                 stages, source, applied, undelivered, skipped)
            SELECT {lit(self.pipeline_id)}, {report.batch_id},
              timestamp_millis({int(ctx.started * 1000)}), current_timestamp(), {report.events},
              {f"map({ops})" if ops else "CAST(map() AS map<string,bigint>)"},
              {report.duplicates}, {report.conflicts}, {report.stale}, {report.dead_lettered},
              {f"map({tables})" if tables else "CAST(map() AS map<string,bigint>)"},
              {report.seconds:.3f}D,
              {f"map({stages})" if stages else "CAST(map() AS map<string,double>)"},
              {lit(self.source)}, {report.applied}, {report.undelivered},
              {f"map({lost})" if lost else "CAST(map() AS map<string,string>)"}
        """
        self.writer.run(spark, Statement(self.internal, BATCHES, "history", sql), report.batch_id)
