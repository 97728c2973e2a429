"""A batch's writes: what the engine decided, run by the Iceberg layer.

:class:`BatchWrites` executes what :mod:`cdcflow.engine.steps` decided: each table's DDL
before the batch is staged, then the batch's plan — each table's steps (a truncate, the
guarded ``MERGE`` or the append into a replica the batch created, the changelog, the
truncate watermark, an scd2 table's versions after the history log, a keyless table's
copies after its log) ``parallel_tables`` at a time on the batch's pool, each under the
commit ledger (:mod:`cdcflow.iceberg.write`), and the internal tables' (history log, the
keyless tables' log, tombstones, watermarks), then the dead letters and the batch history.
The statements' text comes from :mod:`cdcflow.engine.statements`, :mod:`cdcflow.engine.history`
and :mod:`cdcflow.engine.multiset`; nothing here decides.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.config import PipelineConfig
from cdcflow.engine import multiset
from cdcflow.engine.execute import BatchStage, release_checkpoint
from cdcflow.engine.history import (
    history_write_sql,
    log_merge_sql,
    touched_sql,
    versions_sql,
)
from cdcflow.engine.hold import HoldResult
from cdcflow.engine.meta import BatchMeta
from cdcflow.engine.plan import TablePlan
from cdcflow.engine.statements import (
    changelog_sql,
    insert_sql,
    merge_sql,
    tombstones_sql,
    truncate_sql,
)
from cdcflow.engine.stats import TableStats
from cdcflow.engine.steps import BatchPlan, Step, TableDdl
from cdcflow.engine.watermarks import watermarks_sql
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import (
    BATCHES,
    DEAD_LETTER_FIELDS,
    DEAD_LETTERS,
    HISTORY_FIELDS,
    HISTORY_LOG,
    HISTORY_LOG_FIELDS,
    MULTISET_LOG,
    MULTISET_LOG_FIELDS,
    TOMBSTONES,
    TRUNCATE_PROPERTY,
    WATERMARK_FIELDS,
    WATERMARKS,
)
from cdcflow.iceberg.tombstones import ensure_tombstones
from cdcflow.iceberg.write import Statement, Writer, Written
from cdcflow.pipeline.report import BatchReport, StageClock, TableFiles, TableOutcome
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
    #: what the batch keeps in Spark's storage, released when it ends
    releases: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class BatchWork:
    """What the batch writes once planned and staged: its events and their metadata, the
    tables' plans, the staged rows and their counts, the consistency hold's result and the
    steps that write them (:func:`cdcflow.engine.steps.batch_plan`)."""

    events: DataFrame
    meta: BatchMeta
    plans: Sequence[TablePlan]
    stage: BatchStage | None
    stats: Mapping[str, TableStats]
    hold: HoldResult | None
    steps: BatchPlan


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

    def ddl(self, spark: SparkSession, ddl: TableDdl) -> None:
        """Create or alter one table (:func:`cdcflow.engine.steps.table_ddl`)."""
        if ddl.columns is not None:
            self.catalog.create_table(spark, self.namespace, ddl.name, ddl.columns, ddl.properties)
        else:
            self.catalog.alter(
                spark, self.namespace, ddl.name, ddl.add, ddl.widen, ddl.properties, ddl.prefixes
            )

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
        """Execute the batch's plan (:class:`cdcflow.engine.steps.BatchPlan`): every table's
        steps in their order and the internal tables', concurrently; a step waits for those it
        names in ``after``."""
        phase = time.perf_counter()
        steps = work.steps
        awaited = {name for s in steps.steps for name in s.after}
        started: dict[str, Future[Written | None]] = {}
        # the internal steps others wait for start first, so a table's task never waits for a
        # step queued behind it on the pool
        first = [s for s in steps.internal if s.name in awaited]
        for step in first:
            started[step.name] = pool.submit(self.internal_step, ctx, work, step)
        tables = [
            pool.submit(self.table, ctx, work, plan, steps.tables.get(plan.target, ()), started)
            for plan in work.plans
        ]
        for step in steps.internal:
            if step.name not in started:
                started[step.name] = pool.submit(self.internal_step, ctx, work, step)
        outputs: Future[list[DataFrame]] | None = None
        if self.cfg.outputs:
            outputs = pool.submit(self.outputs, ctx, work.events)
        outcomes: list[TableOutcome] = []
        merge_done = internal_done = phase
        for future in tables:
            outcome, finished = future.result()
            outcomes.append(outcome)
            merge_done = max(merge_done, finished)
        for step in steps.internal:
            started[step.name].result()
            internal_done = max(internal_done, time.perf_counter())
        if tables:
            ctx.clock.add("merge", merge_done - phase)
        if steps.internal:
            ctx.clock.add("internal", internal_done - phase)
        if outputs is not None:
            ctx.dead.extend(outputs.result())
            ctx.clock.add("outputs", time.perf_counter() - phase)
        return outcomes

    def internal_step(self, ctx: BatchContext, work: BatchWork, step: Step) -> Written:
        """One internal table's step: the history log, the tombstones or the watermarks."""
        if step.kind == "watermarks":
            return self.watermarks(ctx, work.events)
        assert work.stage is not None
        if step.kind == "log":
            return self.history_log(ctx, work.stage)
        if step.kind == "multiset_log":
            replaces = any(work.stats.get(p.target, TableStats()).replaced for p in work.plans)
            return self.multiset_log(ctx, work.stage, replaces)
        if step.kind == "tombstones":
            return self.tombstones(ctx, work.stage)
        raise ValueError(f"not an internal step: {step.name}")

    def table(
        self,
        ctx: BatchContext,
        work: BatchWork,
        plan: TablePlan,
        steps: Sequence[Step],
        started: Mapping[str, Future[Written | None]],
    ) -> tuple[TableOutcome, float]:
        """One table's steps, in order (each once those it waits for are done), and what the
        batch did to the table."""
        began = time.perf_counter()
        merged: Written | None = None
        last: Written | None = None
        for step in steps:
            for name in step.after:
                started[name].result()
            written = self.table_step(ctx, work, plan, step)
            if step.kind in ("merge", "insert"):
                merged = written
            if written is not None and written.statement.report:
                last = written
        s = work.stats.get(plan.target, TableStats())
        tmeta = work.meta.tables[plan.target]
        events = tmeta.events
        rejected = sum((s.rejected or {}).values())
        seconds = time.perf_counter() - began
        if plan.mode == "append":
            outcome = TableOutcome(plan.name, "append", events, dead_lettered=rejected)
        elif plan.multiset:
            # nothing is stale but what a TRUNCATE the table has seen buried
            outcome = TableOutcome(
                plan.name, "merge", events, s.duplicates, s.conflicts, s.buried, rejected, seconds
            )
        elif plan.mode == "scd2":
            outcome = TableOutcome(
                plan.name, "scd2", events, s.duplicates, s.conflicts, 0, rejected, seconds
            )
        else:
            # stale: a key's newest events that lost to its tombstone, or that the guarded
            # MERGE did not write because the replica row was newer (merge-on-read: written
            # rows are the commit's added records)
            stale = max(0, s.writes - merged.count("added-records")) if merged else 0
            outcome = TableOutcome(
                plan.name,
                "merge",
                events,
                s.duplicates,
                s.conflicts,
                stale + s.buried,
                rejected,
                seconds,
            )
        # what observing the pipeline needs, from what the batch already knows
        outcome = dataclasses.replace(
            outcome,
            newest=tmeta.newest,
            files=TableFiles.of(last.summary, last.snapshots) if last else None,
            dead_letter_codes=dict(s.rejected or {}),
        )
        return outcome, time.perf_counter()

    def table_step(
        self, ctx: BatchContext, work: BatchWork, plan: TablePlan, step: Step
    ) -> Written | None:
        """Run one step of a table's plan (``None``: a step that commits no statement)."""
        spark, batch_id, stage = ctx.spark, ctx.batch_id, work.stage
        assert stage is not None
        ident = self.catalog.ident(self.namespace, plan.name)
        if step.kind == "versions":
            return self.versions(ctx, plan, stage)
        if step.kind == "multiset":
            return self.multiset(ctx, plan, stage)
        if step.kind == "mark_truncate":
            assert plan.truncate is not None
            self.catalog.alter(
                spark, self.namespace, plan.name, properties={TRUNCATE_PROPERTY: plan.truncate}
            )
            return None
        if step.kind == "changelog":
            sql = changelog_sql(ident, stage.changelog_source(plan))
            st = Statement(self.namespace, plan.name, "append", sql, report=True)
        elif step.kind == "truncate":
            assert plan.truncate is not None
            sql = truncate_sql(ident, plan.truncate)
            st = Statement(self.namespace, plan.name, "truncate", sql)
        elif step.kind == "merge":
            sql = merge_sql(ident, plan, stage.merge_source(plan), plan.truncate)
            st = Statement(self.namespace, plan.name, "merge", sql, report=True)
        elif step.kind == "insert":
            # the table's rows of the batch, committed as its merge step: a replay skips it
            sql = insert_sql(ident, plan, stage.merge_source(plan))
            st = Statement(self.namespace, plan.name, "merge", sql, once=True, report=True)
        else:
            raise ValueError(f"not a table step: {step.name}")
        return self.writer.run(spark, st, batch_id, ctx.check)

    def history_log(self, ctx: BatchContext, stage: BatchStage) -> Written:
        """Record the batch's events of the scd2 tables (idempotent: a replay adds nothing)."""
        spark = ctx.spark
        self.catalog.ensure_table(
            spark, self.internal, HISTORY_LOG, HISTORY_LOG_FIELDS, partitioned_by="target"
        )
        ident = self.catalog.ident(self.internal, HISTORY_LOG)
        sql = log_merge_sql(
            ident, stage.history_log_source(), [p.name for p in stage.tables.history]
        )
        st = Statement(self.internal, HISTORY_LOG, "log", sql)
        return self.writer.run(spark, st, ctx.batch_id)

    def multiset_log(self, ctx: BatchContext, stage: BatchStage, replaces: bool) -> Written:
        """Record the keyless tables' events the batch applies first (appended; merged when
        some replace a different copy logged before)."""
        spark = ctx.spark
        self.catalog.ensure_table(
            spark, self.internal, MULTISET_LOG, MULTISET_LOG_FIELDS, partitioned_by="target"
        )
        ident = self.catalog.ident(self.internal, MULTISET_LOG)
        sql = multiset.log_write_sql(
            ident,
            stage.multiset_log_source(),
            stage.tables.multiset,
            self.pipeline_id,
            ctx.batch_id,
            replaces,
        )
        st = Statement(self.internal, MULTISET_LOG, "multiset_log", sql, once=True)
        return self.writer.run(spark, st, ctx.batch_id, ctx.check)

    def multiset(self, ctx: BatchContext, plan: TablePlan, stage: BatchStage) -> Written:
        """Make one keyless replica hold the images the batch touched as many times as the
        log counts them (appended into a replica the batch created)."""
        spark = ctx.spark
        # a batch that only truncates may find no log yet
        self.catalog.ensure_table(
            spark, self.internal, MULTISET_LOG, MULTISET_LOG_FIELDS, partitioned_by="target"
        )
        log = self.catalog.ident(self.internal, MULTISET_LOG)
        ident = self.catalog.ident(self.namespace, plan.name)
        sql = multiset.write_sql(ident, plan, stage.multiset_source(plan, log))
        st = Statement(
            self.namespace, plan.name, "multiset", sql, once=not plan.exists, report=True
        )
        return self.writer.run(spark, st, ctx.batch_id, ctx.check)

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
            sql = history_write_sql(ident, plan, view(versions, "versions"), touched)
            # the append into a new table is skipped on a replay that finds it committed
            st = Statement(
                self.namespace, plan.name, "versions", sql, once=not plan.exists, report=True
            )
            return self.writer.run(spark, st, ctx.batch_id, ctx.check)
        finally:
            release_checkpoint(versions)

    def tombstones(self, ctx: BatchContext, stage: BatchStage) -> Written:
        spark = ctx.spark
        ensure_tombstones(spark, self.catalog, self.internal)
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
        passed = ", ".join(
            f"{lit(k)}, CAST({v} AS bigint)" for k, v in sorted(report.skipped_messages.items())
        )
        times = ", ".join(
            f"{lit(o.table)}, timestamp_micros({round(o.newest.timestamp() * 1e6)})"
            for o in report.outcomes
            if o.newest is not None
        )
        sql = f"""
            INSERT INTO {ident} (pipeline, batch_id, started_at, finished_at, events, operations,
                                 duplicates, conflicts, stale, dead_lettered, tables, seconds,
                                 stages, source, applied, undelivered, skipped, source_times,
                                 skipped_messages)
            SELECT {lit(self.pipeline_id)}, {report.batch_id},
              timestamp_millis({int(ctx.started * 1000)}), current_timestamp(), {report.events},
              {f"map({ops})" if ops else "CAST(map() AS map<string,bigint>)"},
              {report.duplicates}, {report.conflicts}, {report.stale}, {report.dead_lettered},
              {f"map({tables})" if tables else "CAST(map() AS map<string,bigint>)"},
              {report.seconds:.3f}D,
              {f"map({stages})" if stages else "CAST(map() AS map<string,double>)"},
              {lit(self.source)}, {report.applied}, {report.undelivered},
              {f"map({lost})" if lost else "CAST(map() AS map<string,string>)"},
              {f"map({times})" if times else "CAST(map() AS map<string,timestamp>)"},
              {f"map({passed})" if passed else "CAST(map() AS map<string,bigint>)"}
        """
        self.writer.run(spark, Statement(self.internal, BATCHES, "history", sql), report.batch_id)
