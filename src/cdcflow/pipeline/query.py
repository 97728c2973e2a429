"""The pipeline: one Structured Streaming query per source, from landing zones to Iceberg tables.

Each source is a ``binaryFile`` stream over its landing directory (local path or any Hadoop
filesystem URI) with a checkpoint of its own (:mod:`cdcflow.pipeline.checkpoint`), so sources
can be added, removed and renamed without touching the others' progress. Files are decoded by
the registered dialects inside Spark (``mapInArrow``); each micro-batch goes through a
:class:`~cdcflow.pipeline.batch.BatchRunner`. Batches of different sources never run at the
same time (they share the pipeline's internal tables). ``availableNow`` processes what is there
and stops; ``follow`` keeps going with a processing-time trigger until :meth:`Pipeline.stop`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.config import PipelineConfig, SourceConfig, parse_duration
from cdcflow.errors import CdcflowError, ConfigError
from cdcflow.iceberg.catalog import Catalog
from cdcflow.pipeline.batch import BatchRunner, Shared, source_options
from cdcflow.pipeline.checkpoint import Checkpoint, SourceRecord
from cdcflow.pipeline.report import BatchReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from cdcflow.spark.session import SparkSettings

ADAPTIVE = "spark.sql.adaptive.enabled"
#: Exit statuses of a run, for schedulers.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_DEAD_LETTERS = 3


def spark_settings(cfg: PipelineConfig) -> SparkSettings:
    """Spark settings from a pipeline configuration."""
    from cdcflow.spark.session import settings_from_mapping

    s = cfg.spark
    c = cfg.catalog
    return settings_from_mapping(
        {
            "master": s.master,
            "shuffle_partitions": s.shuffle_partitions,
            "iceberg_jar": s.iceberg_jar,
            "iceberg_packages": s.iceberg_packages,
            "conf": dict(s.conf),
            "catalog_name": c.name,
            "catalog_type": c.type,
            "catalog_uri": c.uri,
            "warehouse": c.warehouse,
            "catalog_options": dict(c.options),
        }
    )


class SourceMissing(ConfigError):
    """A source's landing zone does not exist."""

    code = "SOURCE_PATH_MISSING"


@dataclass
class RunResult:
    """What a run did: the batch reports of every source, and whether it ended on a
    failure (the exception) or was stopped."""

    reports: list[BatchReport] = field(default_factory=list)
    failure: BaseException | None = None
    stopped: bool = False

    @property
    def events(self) -> int:
        return sum(r.events for r in self.reports)

    @property
    def dead_lettered(self) -> int:
        return sum(r.dead_lettered for r in self.reports)

    @property
    def exit_status(self) -> int:
        """0 every message applied; 3 some were dead-lettered; 1 the run failed."""
        if self.failure is not None:
            return EXIT_FAILED
        return EXIT_DEAD_LETTERS if self.dead_lettered else EXIT_OK

    def summary(self) -> str:
        """The final line of a run."""
        head = (
            f"done: {len(self.reports)} batch(es), {self.events:,} events, "
            f"{self.dead_lettered:,} dead-lettered"
        )
        if self.failure is not None:
            return f"failed: {head.removeprefix('done: ')}; {self.failure}"
        if self.dead_lettered:
            head += " (exit status 3: see cdcflow dead-letters)"
        return head + (" · stopped" if self.stopped else "")


class Pipeline:
    """A configured pipeline bound to a SparkSession."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession | None = None) -> None:
        self.cfg = cfg
        if spark is None:
            from cdcflow.spark.session import build_session

            spark = build_session(spark_settings(cfg))
        self.spark = spark
        self.runners: list[BatchRunner] = []
        self.queries: list[StreamingQuery] = []
        self.checkpoint: Checkpoint | None = None
        self.shared: Shared | None = None

    # ------------------------------------------------------------------ queries

    def _stream_session(self) -> SparkSession:
        """A session for the streaming queries: the pipeline session's settings with adaptive
        execution off, which streaming does not support (Spark would turn it off itself and
        warn). Each batch turns it back on for the batch's own queries."""
        session = self.spark.newSession()
        confs = self.spark._jsparkSession.sessionState().conf().getAllConfs()
        it = confs.iterator()
        while it.hasNext():
            entry = it.next()
            key, value = str(entry._1()), str(entry._2())
            if key != ADAPTIVE and session.conf.isModifiable(key):
                session.conf.set(key, value)
        session.conf.set(ADAPTIVE, "false")
        return session

    def _check_path(self, src: SourceConfig) -> None:
        if "://" in src.path:
            return
        path = Path(src.path)
        if path.is_dir():
            return
        if src.create_path and not path.exists():
            path.mkdir(parents=True, exist_ok=True)
            return
        raise SourceMissing(
            f"source {src.name!r}: landing zone {src.path} "
            + ("is not a folder" if path.exists() else "does not exist"),
            hint="check the path, or set create_path: true on the source to create it",
        )

    def events(self, src: SourceConfig, record: SourceRecord, session: SparkSession) -> DataFrame:
        """The decoded-events stream of one source."""
        from cdcflow.decode.spark import decode_dataframe, read_raw

        raw = read_raw(
            session, src.path, streaming=True, max_files_per_trigger=src.max_files_per_batch
        )
        return decode_dataframe(raw, src.dialect, source_options(src), record.id)

    def start(
        self, follow: bool = False, on_report: Callable[[BatchReport], None] | None = None
    ) -> list[StreamingQuery]:
        """Take the pipeline's run lock and start one query per source."""
        self.runners, self.queries = [], []
        for src in self.cfg.sources:
            self._check_path(src)
        checkpoint = Checkpoint(self.spark, self.cfg)
        pid = checkpoint.pipeline_id()
        checkpoint.acquire()
        self.checkpoint = checkpoint
        try:
            adaptive = (self.spark.conf.get(ADAPTIVE, "true") or "true").lower() == "true"
            self.shared = Shared(Catalog(self.cfg.catalog.name))
            session = self._stream_session()
            for src, record in checkpoint.sources(pid):
                runner = BatchRunner(
                    self.cfg,
                    record,
                    src,
                    self.shared,
                    on_report=on_report,
                    adaptive=adaptive,
                    checkpoint=checkpoint.query_path(record),
                )
                writer = (
                    self.events(src, record, session)
                    .writeStream.foreachBatch(runner)
                    .option("checkpointLocation", checkpoint.query_path(record))
                    .queryName(f"cdcflow_{self.cfg.pipeline}_{record.id}")
                )
                if follow:
                    seconds = parse_duration(self.cfg.follow_interval)
                    writer = writer.trigger(processingTime=f"{seconds} seconds")
                else:
                    writer = writer.trigger(availableNow=True)
                self.runners.append(runner)
                self.queries.append(writer.start())
        except BaseException:
            self._stop_queries()
            checkpoint.release()
            raise
        return self.queries

    def stop(self) -> None:
        """Stop after the batch in progress (none is left half-done: a batch that had not
        started is read again by the next run)."""
        if self.shared is None:
            return
        self.shared.stopping.set()
        with self.shared.lock:
            self._stop_queries()

    def _stop_queries(self) -> None:
        for q in self.queries:
            if q.isActive:
                q.stop()

    # ------------------------------------------------------------------ a run

    def run(
        self,
        follow: bool = False,
        on_report: Callable[[BatchReport], None] | None = None,
        timeout: float | None = None,
        should_stop: Callable[[], bool] | None = None,
        raise_on_failure: bool = True,
    ) -> RunResult:
        """Run until the landing zones are drained (default) or, with ``follow``, until
        ``should_stop()`` says so or ``timeout`` seconds pass. A failure ends the run: it is
        raised, or with ``raise_on_failure=False`` reported in the result."""
        result = RunResult()
        self.start(follow, on_report)
        started = time.monotonic()
        try:
            while any(q.isActive for q in self.queries):
                if should_stop is not None and should_stop():
                    result.stopped = True
                    self.stop()
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    result.stopped = True
                    self.stop()
                    break
                if any(q.exception() is not None for q in self.queries):
                    break
                time.sleep(0.2)
            for q in self.queries:
                q.awaitTermination()
            stopping = self.shared is not None and self.shared.stopping.is_set()
            if not stopping:
                failures = [r.failure for r in self.runners if r.failure is not None]
                if failures:
                    result.failure = failures[0]
                else:
                    for q in self.queries:
                        exc = q.exception()
                        if exc is not None:
                            result.failure = CdcflowError(
                                _first_line(exc), code="PIPELINE_FAILED", hint=_DEBUG_HINT
                            )
                            break
        finally:
            self._stop_queries()
            if self.shared is not None:
                result.reports.extend(self.shared.reports)
            if result.failure is None and result.reports and self.runners:
                self.runners[0].expire(self.spark)
            if self.checkpoint is not None:
                self.checkpoint.release()
        if raise_on_failure and result.failure is not None:
            raise result.failure
        return result


_DEBUG_HINT = "run with --debug for the whole trace"


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)[:500]
