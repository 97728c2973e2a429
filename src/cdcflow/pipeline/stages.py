"""The stages of one batch, each of one shape: it takes the batch's context and what the stage
before it handed on (a :class:`Batch`), and returns what it hands on, its part of the report
included. :class:`cdcflow.pipeline.batch.BatchRunner` runs them in order:

1. :class:`Decode` — the metadata aggregate over the decoded rows (where decoding happens),
   the rows of files Spark's scan never reads, rejections to the dead letters;
2. :class:`Segments` — split messages put together across batches (only when the batch has
   segments or earlier ones wait);
3. :class:`Hold` — a transaction's events held until its whole transaction is there
   (``consistency``);
4. :class:`Apply` — the tables' plans and DDL, the staging aggregate with its counts and
   rejections, and every table's statements (:mod:`cdcflow.pipeline.writes`);
5. :class:`DeadLetters` — what the stages before gathered;
6. :class:`Record` — the batch's report and its row in the batch history.

What a stage keeps in Spark's storage is released when the batch ends (``ctx.releases``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from cdcflow.decode.columns import SEGMENT, SKIPPED
from cdcflow.engine.deadletters import rejected_rows
from cdcflow.engine.execute import BatchStage, newest_truncates
from cdcflow.engine.hold import HoldResult, HoldStage
from cdcflow.engine.keys import match_keys
from cdcflow.engine.meta import MARKERS, BatchMeta, aggregate, with_batch_columns
from cdcflow.engine.plan import (
    Mode,
    TablePlan,
    TableSettings,
    TableState,
    decide,
    ordered_truncate,
)
from cdcflow.engine.rules import applied
from cdcflow.engine.segments import SegmentResult, SegmentStage
from cdcflow.engine.stats import TableStats
from cdcflow.engine.steps import batch_plan, table_ddl
from cdcflow.iceberg.catalog import Catalog, TableInfo
from cdcflow.iceberg.layouts import (
    HELD,
    KEY_PROPERTY,
    MULTISET_LOG,
    SEGMENT_FIELDS,
    SEGMENTS,
    TOMBSTONES,
    held_fields,
)
from cdcflow.iceberg.tombstones import TombstoneIndex
from cdcflow.iceberg.write import Writer
from cdcflow.pipeline.report import UNDECODED, BatchReport, TableOutcome
from cdcflow.pipeline.writes import BatchContext, BatchWork, BatchWrites
from cdcflow.spark.sql import ScopedPool, lit, q

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.config import PipelineConfig


@dataclass(frozen=True)
class Batch:
    """What the stages of one batch hand each other."""

    #: every decoded row of the batch: events, segments, rejections, skipped records
    decoded: DataFrame
    #: the events to apply, as the stages so far leave them
    events: DataFrame
    #: their metadata (one aggregate, taken again where a stage changed the events)
    meta: BatchMeta = field(default_factory=BatchMeta)
    segments: SegmentResult | None = None
    hold: HoldResult | None = None
    #: what each written table's statements did
    outcomes: tuple[TableOutcome, ...] = ()
    #: the dead letters written
    dead_written: int = 0
    report: BatchReport | None = None


class Stage(Protocol):
    """One stage of a batch."""

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        """What the stage hands on, from what it was handed."""
        ...


class BatchColumns:
    """Decoded rows with the batch's working columns: segments tagged with the source (whoever
    decoded them), the tables' rules applied (``apply_as_deletes``, ``apply_as_truncates``,
    ``ignore_null_updates``: ``rules``, their SQL, ``None`` where no table has one)."""

    def __init__(self, source: str, replica_name: str, rules: Mapping[str, str | None]) -> None:
        self.source = source
        self.replica_name = replica_name
        self.rules = dict(rules)

    def __call__(self, df: DataFrame) -> DataFrame:
        tag = (
            f"CASE WHEN operation = '{SEGMENT}' THEN map_concat(map_filter(metadata, "
            f"(k, v) -> k <> 'cdcflow.source'), map('cdcflow.source', {lit(self.source)})) "
            "ELSE metadata END AS metadata"
        )
        columns = [tag if c == "metadata" else q(c) for c in df.columns]
        if any(self.rules.values()):
            columns = [
                tag if c == "metadata" else e
                for c, e in zip(df.columns, applied(df.columns, **self.rules), strict=True)
            ]
        return with_batch_columns(df.selectExpr(*columns), self.source, self.replica_name)


class Decode:
    """The batch's metadata, one aggregate over its decoded rows (and over the rows of its
    zero-byte files, which Spark's scan never reads: ``empty_files``); its rejections go to
    the dead letters. ``sized`` is told the batch's number of rows."""

    def __init__(
        self,
        pipeline_id: str,
        empty_files: Callable[[SparkSession, set[str], int], DataFrame | None],
        sized: Callable[[SparkSession, int], None],
    ) -> None:
        self.pipeline_id = pipeline_id
        self.empty_files = empty_files
        self.sized = sized

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        spark, decoded = ctx.spark, batch.decoded
        meta = BatchMeta()
        with ctx.clock.stage("decode"):
            meta.add(aggregate(spark, decoded))
            empty = self.empty_files(spark, meta.origins, ctx.batch_id)
            if empty is not None:
                meta.add(aggregate(spark, empty))
                decoded = decoded.unionByName(empty)
        self.sized(spark, meta.events + meta.rejected + meta.segments)
        events = decoded.where("error_code IS NULL").where(
            f"NOT (operation <=> '{SEGMENT}' OR operation <=> '{SKIPPED}')"
        )
        if meta.rejected:
            rejected = decoded.where("error_code IS NOT NULL")
            ctx.dead.append(rejected_rows(rejected, self.pipeline_id, ctx.batch_id))
        return replace(batch, decoded=decoded, events=events, meta=meta)


class Segments:
    """Split messages put together (:mod:`cdcflow.engine.segments`): the batch's segments
    recorded, the messages they complete decoded and added to the events, what cannot be
    completed to the dead letters. Nothing to do when the batch has no segment and none
    waits."""

    def __init__(
        self,
        catalog: Catalog,
        internal: str,
        writer: Writer,
        stage: SegmentStage,
        columns: BatchColumns,
    ) -> None:
        self.catalog = catalog
        self.internal = internal
        self.writer = writer
        self.stage = stage
        self.columns = columns

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        spark, batch_id, meta = ctx.spark, ctx.batch_id, batch.meta
        if not (meta.segments or self.stage.has_pending(spark)):
            return batch
        with ctx.clock.stage("segments"):
            self.catalog.ensure_table(spark, self.internal, SEGMENTS, SEGMENT_FIELDS)
            valid = batch.decoded.where("error_code IS NULL")
            seg = self.stage.run(
                spark, valid.where(f"operation = '{SEGMENT}'"), batch_id, ctx.check
            )
            ctx.releases.append(seg.release)
            for st in seg.statements:
                self.writer.run(spark, st, batch_id)
            assembled = self.columns(seg.assembled)
            whole = assembled.where(f"error_code IS NULL AND NOT (operation <=> '{SKIPPED}')")
            if seg.complete:
                meta.add(aggregate(spark, whole))
            if seg.rejected:
                rejected = assembled.where("error_code IS NOT NULL")
                ctx.dead.append(rejected_rows(rejected, self.stage.pipeline, batch_id))
            if seg.dead_groups or seg.late:
                ctx.dead.append(seg.dead)
        return replace(batch, events=batch.events.unionByName(whole), segments=seg)


class Hold:
    """A transaction's events held until the whole transaction is there, and released then
    (:mod:`cdcflow.engine.hold`); the metadata taken again over what is released."""

    def __init__(
        self, catalog: Catalog, internal: str, writer: Writer, writes: BatchWrites, stage: HoldStage
    ) -> None:
        self.catalog = catalog
        self.internal = internal
        self.writer = writer
        self.writes = writes
        self.stage = stage

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        spark, events, meta = ctx.spark, batch.events, batch.meta
        with ctx.clock.stage("hold"):
            if meta.ops.get("RESOLVED"):
                self.writes.watermarks(ctx, events)
            self.catalog.ensure_table(spark, self.internal, HELD, held_fields())
            hold = self.stage.run(spark, events, ctx.batch_id, ctx.check, meta.ops.get("COMMIT", 0))
            try:
                for st in hold.statements:
                    self.writer.run(spark, st, ctx.batch_id, ctx.check)
            finally:
                hold.release()
            if hold.unchanged:
                return replace(batch, hold=hold)
            released = BatchMeta(
                segments=meta.segments,
                rejected=meta.rejected,
                rejected_codes=meta.rejected_codes,
                skipped=meta.skipped,
            )
            released.add(aggregate(spark, hold.events))
        return replace(batch, events=hold.events, meta=released, hold=hold)


class Apply:
    """The tables' plans and DDL, the staging aggregate (validation, dedup, collapse) with its
    counts and rejections, and every table's statements, ``parallel_tables`` at a time."""

    def __init__(
        self,
        cfg: PipelineConfig,
        catalog: Catalog,
        writes: BatchWrites,
        tombstones: TombstoneIndex,
        source: str,
        source_keys: Mapping[str, list[str]],
    ) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + "__cdcflow"
        self.pipeline_id = writes.pipeline_id
        self.writes = writes
        self.tombstones = tombstones
        self.source = source
        self.source_keys = {t: list(k) for t, k in source_keys.items() if k}
        #: the target tables' settings, built once from the configuration
        self._settings: dict[str, TableSettings] = {}

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        spark, clock, events, meta = ctx.spark, ctx.clock, batch.events, batch.meta
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
                        tombs, looked = self._tombstones(spark, stage)
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
                    watermarks=bool(meta.ops.get("RESOLVED")) and batch.hold is None,
                )
                work = BatchWork(events, meta, plans, stage, stats, batch.hold, steps)
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
        return replace(batch, outcomes=tuple(outcomes))

    def _tombstones(
        self, spark: SparkSession, stage: BatchStage
    ) -> tuple[str | None, set[str] | None]:
        """The tombstone table and the replicas that look it up: only those that may have
        tombstones (none: ``None``)."""
        if not (stage.tables.merge and self.catalog.exists(spark, self.internal, TOMBSTONES)):
            return None, None
        have = self.tombstones.targets(spark)
        looked = {p.name for p in stage.tables.merge if not p.soft_deletes}
        looked = looked if have is None else looked & have
        return (self.catalog.ident(self.internal, TOMBSTONES) if looked else None), looked

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
            and not self.source_keys.get(s.name)
        ]
        if unnamed:
            matched = match_keys(spark, events, unnamed)

        plans = [
            decide(
                s,
                meta.tables[s.target],
                states[s.target],
                source=self.source,
                source_keys=self.source_keys.get(s.name),
                matched_keys=matched.get(s.target),
            )
            for s in pending
        ]
        ordered = [p for p in plans if p.sequence_by and p.meta.ops.get("TRUNCATE")]
        if ordered:
            # a TRUNCATE of a table ordered by its columns is placed in their order
            found = newest_truncates(spark, events, ordered)
            plans = [
                ordered_truncate(p, found[p.target]) if p.target in found else p for p in plans
            ]
        return plans

    def settings(self, target: str) -> TableSettings:
        """The settings of a target table, built once from the configuration."""
        found = self._settings.get(target)
        if found is None:
            found = self._settings[target] = TableSettings.of(target, self.cfg.table(target))
        return found


class DeadLetters:
    """The dead letters the stages before gathered, written in one append."""

    def __init__(self, writes: BatchWrites) -> None:
        self.writes = writes

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        written = 0
        with ctx.clock.stage("dead_letters"):
            if ctx.dead:
                written = self.writes.dead_letters(ctx)
        return replace(batch, dead_written=written)


class Record:
    """The batch's report — each event counted once as applied, a duplicate, stale, a
    conflict or dead-lettered — and its row in the batch history. ``skipped``: what the
    batch could not read (a Kafka source past lost offsets)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        writes: BatchWrites,
        source_name: str,
        skipped: Callable[[], Mapping[str, str]],
    ) -> None:
        self.cfg = cfg
        self.writes = writes
        self.source_name = source_name
        self.skipped = skipped

    def run(self, ctx: BatchContext, batch: Batch) -> Batch:
        meta, seg, hold, outcomes = batch.meta, batch.segments, batch.hold, batch.outcomes
        # every message that gave no event and ends as a dead letter counts as one event
        unread = meta.rejected
        if seg is not None:
            unread += seg.rejected + seg.dead_segments + seg.late
        dead_input = unread + sum(o.dead_lettered for o in outcomes)
        total = meta.events + unread
        duplicates = sum(o.duplicates for o in outcomes)
        conflicts = sum(o.conflicts for o in outcomes)
        stale = sum(o.stale for o in outcomes)
        undelivered = max(0, batch.dead_written - dead_input) if self.cfg.outputs else 0
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
            source=self.source_name,
            tables={o.table: o.events for o in outcomes},
            seconds=time.time() - ctx.started,
            outcomes=tuple(outcomes),
            segments=meta.segments,
            reassembled=seg.complete if seg is not None else 0,
            held=hold.held if hold is not None else 0,
            released=hold.released if hold is not None else 0,
            stages=dict(ctx.clock.seconds),
            skipped=dict(self.skipped()),
            skipped_messages=dict(meta.skipped),
            dead_letter_codes=codes,
        )
        with ctx.clock.stage("history"):
            self.writes.history(ctx, report)
        return replace(batch, report=replace(report, stages=dict(ctx.clock.seconds)))


def _state(info: TableInfo | None, mode: Mode) -> TableState | None:
    if info is None:
        return None
    columns = info.structs.get("after", {}) if mode == "append" else info.columns
    return TableState(columns=dict(columns), properties=dict(info.properties))
