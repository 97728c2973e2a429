"""One micro-batch: the engine decides, the Iceberg layer writes.

The ``foreachBatch`` function. Per batch it runs a constant number of Spark jobs whatever the
number of tables — the metadata aggregate (where decoding happens), the staging aggregate over
every table at once — plus one ``MERGE`` per table written (concurrently, ``parallel_tables`` at
a time) and at most one commit per internal table; counts come from those steps and from the
commits' own snapshot summaries. Table metadata is read once per run and kept up to date by the
run's own DDL. On the first batch of a run (the only one Spark may replay) one look-up in the
batch history says whether the batch is already done; every other write is idempotent (guarded
merges, tombstones that only rise) or looked up in its own table (dead letters).

The runner takes the lock, tells a replayed batch, and runs the batch's stages in order
(:mod:`cdcflow.pipeline.stages`: decode → segments → hold → apply → dead letters → record),
each of one shape, with one ``BatchContext`` per batch; between batches, the upkeep
(:mod:`cdcflow.pipeline.upkeep`). The plans and their statements are built without Spark
(:mod:`cdcflow.engine`); ``BatchWrites`` (:mod:`cdcflow.pipeline.writes`) runs the statements
that commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdcflow.config import PipelineConfig, SourceConfig
from cdcflow.config_base import parse_duration
from cdcflow.engine.hold import HoldStage
from cdcflow.engine.meta import target_expr
from cdcflow.engine.rules import conditions, marked_sql
from cdcflow.engine.segments import SegmentStage
from cdcflow.errors import CdcflowError
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import BATCHES
from cdcflow.iceberg.tombstones import TombstoneIndex
from cdcflow.iceberg.write import Writer
from cdcflow.pipeline.checkpoint import DIRECT
from cdcflow.pipeline.report import BatchReport, Reports
from cdcflow.pipeline.stages import (
    Apply,
    Batch,
    BatchColumns,
    DeadLetters,
    Decode,
    Hold,
    Record,
    Segments,
    Stage,
)
from cdcflow.pipeline.upkeep import Upkeep
from cdcflow.pipeline.writes import BatchContext, BatchWrites
from cdcflow.spark.kind import is_connect
from cdcflow.spark.sql import views_dropped

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.pipeline.checkpoint import Checkpoint, SourceRecord
    from cdcflow.sources.base import Source

#: The Spark local property naming the streaming query of a ``foreachBatch`` call.
QUERY_ID = "sql.streaming.queryId"
#: The local property naming the query's run (Spark sets the job group to the run id).
RUN_ID = "spark.jobGroup.id"
#: Batches of fewer events run their queries without adaptive execution, which runs each
#: shuffle stage as a Spark job of its own and plans the rest again after it: for a small
#: batch that is half its jobs, for a large one a plan fitted to its data.
SMALL_BATCH = 10_000
ADAPTIVE = "spark.sql.adaptive.enabled"


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
        reader: Source | None = None,
    ) -> None:
        """``reader``: how the source is read (its own, made from ``src``, by default).
        ``replay``: the batches are replayed dead letters (late events by nature): no
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
        self.reader = reader or src.source()
        self.source = record.id
        self.pipeline_id = record.ledger
        self.on_report = on_report
        self.shared = shared
        self.catalog = shared.catalog
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + "__cdcflow"
        self.writer = Writer(self.catalog, self.pipeline_id)
        tombstones = shared.tombstones.setdefault(
            self.internal, TombstoneIndex(self.catalog, self.internal)
        )
        writes = BatchWrites(cfg, self.catalog, self.writer, self.pipeline_id, record.id)
        self.first_batch = True
        #: what the batch in progress cannot read (a Kafka source past lost offsets)
        self.skipped: dict[str, str] = {}
        #: the highest batch id this function has begun to apply
        self.begun: int | None = None
        #: the run of the streaming query that gave the last batch
        self.run: str | None = None
        #: whether the last batch was small (:data:`SMALL_BATCH`)
        self.small = False
        self.reports = Reports()
        self.failure: BaseException | None = None
        target = target_expr(record.replica_name, record.id)
        #: the table rules' marks (SQL), ``None`` where no table has the rule
        rules = {
            rule: marked_sql(conditions(cfg, setting), target)
            for rule, setting in (
                ("deletes", "apply_as_deletes"),
                ("truncates", "apply_as_truncates"),
                ("nulls", "ignore_null_updates"),
            )
        }
        self.columns = BatchColumns(record.id, record.replica_name, rules)
        segments = SegmentStage(
            self.catalog,
            self.internal,
            self.pipeline_id,
            parse_duration(cfg.segment_wait),
            {record.id: src.decoder_options()},
            source=record.id,
        )
        if replay:
            segments.pending = False
        self.upkeep = Upkeep(cfg, self.catalog, self.pipeline_id, segments)
        #: the batch's stages, in order
        self.stages: list[Stage] = [
            Decode(self.pipeline_id, self._empty_files, self._sized),
            Segments(self.catalog, self.internal, self.writer, segments, self.columns),
        ]
        if cfg.consistency != "none" and not replay:
            hold = HoldStage(
                self.catalog, self.internal, self.pipeline_id, cfg.consistency, source=record.id
            )
            self.stages.append(Hold(self.catalog, self.internal, self.writer, writes, hold))
        self.stages += [
            Apply(cfg, self.catalog, writes, tombstones, record.id, src.keys),
            DeadLetters(writes),
            Record(cfg, writes, src.name, lambda: self.skipped),
        ]

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
            self.upkeep.migrate_tombstones(spark)
            if self.catalog.committed_steps(
                spark, self.internal, BATCHES, self.pipeline_id, batch_id
            ):
                self.first_batch = False
                return
        self.skipped = self._skipped(spark, batch_id)
        decoded = self.columns(self._frame(df)).persist()
        ctx = BatchContext(spark, batch_id, check, started)
        batch = Batch(decoded=decoded, events=decoded)
        try:
            for stage in self.stages:
                batch = stage.run(ctx, batch)
        finally:
            for release in reversed(ctx.releases):
                release()
            decoded.unpersist()
        report = batch.report
        assert report is not None
        self.first_batch = False
        actions = self.upkeep.after_batch(spark, batch_id, {o.table for o in report.outcomes})
        if actions:
            report = replace(
                report, maintenance=tuple(a.line() for a in actions), actions=tuple(actions)
            )
        self.reports.add(report)
        self.shared.reports.add(report)
        self.upkeep.expire_when_due(spark)
        if self.on_report:
            self.on_report(report)

    def _adapt(self, spark: SparkSession) -> None:
        """Adaptive execution for the batch's queries: as the session has it, except for a
        small batch (:data:`SMALL_BATCH`)."""
        spark.conf.set(ADAPTIVE, "true" if self.adaptive and not self.small else "false")

    def _sized(self, spark: SparkSession, rows: int) -> None:
        """The batch's queries from here on, and the next batch's until it is sized, fitted
        to its ``rows``."""
        self.small = rows < SMALL_BATCH
        self._adapt(spark)

    # ------------------------------------------------------------------ the source

    def _skipped(self, spark: SparkSession, batch_id: int) -> dict[str, str]:
        """What this batch cannot read (a Kafka source past lost offsets)."""
        if self.checkpoint is None:
            return {}
        return self.reader.skipped(spark, self.checkpoint, batch_id)

    def _empty_files(self, spark: SparkSession, seen: set[str], batch_id: int) -> DataFrame | None:
        """The rows of what the batch read that Spark's scan gave no row (a landing zone's
        zero-byte files: the files of the batch not among the origins its aggregate saw)."""
        if self.checkpoint is None:
            return None
        found = self.reader.empty_files(spark, self.checkpoint, batch_id, seen, self.source)
        return None if found is None else self.columns(found)

    def _follow_run(self, spark: SparkSession) -> None:
        """A query restarted with the same function begins a new run (and calls outside a
        streaming query are a run of their own), whose first batch may be a replay of one
        already committed: it is checked like the first batch of a process."""
        run = _local_property(spark, RUN_ID) if _local_property(spark, QUERY_ID) else None
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
        query = _local_property(spark, QUERY_ID) or DIRECT
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
        return decode_dataframe(df, self.src.dialect, self.src.decoder_options(), self.source)


def _local_property(spark: SparkSession, key: str) -> str | None:
    """A property Spark sets on the thread running a streaming query's batch (``None``
    outside one, and on a Spark Connect session, which runs batches given to it directly)."""
    if is_connect(spark):
        return None
    found: str | None = spark.sparkContext.getLocalProperty(key)
    return found
