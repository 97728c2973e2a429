"""The pipeline: one Structured Streaming query per source, from raw messages to Iceberg tables.

Each source is a ``binaryFile`` stream over its landing directory (local path or any Hadoop
filesystem URI), or a streaming DataFrame given through the Python API (Kafka-shaped rows,
files, canonical events), with a checkpoint of its own (:mod:`cdcflow.pipeline.checkpoint`), so
sources can be added, removed and renamed without touching the others' progress. Messages are
decoded by the registered dialects inside Spark (``mapInArrow``); each micro-batch goes through
a :class:`~cdcflow.pipeline.batch.BatchRunner`. Batches of different sources never run at the
same time (they share the pipeline's internal tables). ``availableNow`` processes what is there
and stops; ``follow`` keeps going with a processing-time trigger until :meth:`Pipeline.stop`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineConfig, SourceConfig
from cdcflow.config_base import parse_duration
from cdcflow.errors import CdcflowError, ConfigError
from cdcflow.iceberg.catalog import Catalog
from cdcflow.pipeline import results
from cdcflow.pipeline.batch import ADAPTIVE, BatchRunner, Shared
from cdcflow.pipeline.checkpoint import Checkpoint, SourceRecord
from cdcflow.pipeline.report import BatchReport, RunResult
from cdcflow.pipeline.session import open_session
from cdcflow.spark.errors import DEBUG_HINT, first_line
from cdcflow.spark.kind import is_connect
from cdcflow.spark.sql import lit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from cdcflow.decode.spark import Decoded
    from cdcflow.iceberg.maintain import Action
    from cdcflow.pipeline.remote import RemoteReports
    from cdcflow.sources.base import Source


#: Seconds between looks at a Connect run's batch history for the batches its queries did.
REMOTE_LOOK = 1.0


def remote_failure(exc: BaseException, source: str) -> CdcflowError:
    """What ended a query over Spark Connect, from its exception's text: the batch's own
    cdcflow error (its code), Spark's Kafka source finding offsets gone
    (``KAFKA_DATA_LOSS``), else ``PIPELINE_FAILED``."""
    from cdcflow.pipeline.remote import batch_failure

    text = str(exc)
    found = batch_failure(text)
    if found is not None:
        return found
    if "KAFKA_DATA_LOSS" in text:
        return CdcflowError(
            f"source {source!r}: {first_line(exc)}: retention (or a topic deleted and created "
            "again) removed records the source had not read",
            code="KAFKA_DATA_LOSS",
            hint="those records are lost to this source; to go on from the oldest offsets "
            "Kafka still has, run it once on a classic SparkSession with "
            "kafka.fail_on_data_loss: false (not run over Spark Connect); to read the topics "
            "again from the start, rebuild the source (docs/kafka.md)",
        )
    return CdcflowError(first_line(exc), code="PIPELINE_FAILED", hint=DEBUG_HINT)


def _trace(exc: BaseException) -> str:
    """The JVM stack trace a Spark Connect exception carries as text (its message when it
    carries none)."""
    trace = getattr(exc, "getStackTrace", None)
    found = trace() if callable(trace) else None
    return found if isinstance(found, str) else str(exc)


def _java_exception(query: StreamingQuery) -> Any | None:
    """The Java exception a streaming query ended with (PySpark's own conversion keeps only
    the text of a cause that is not one of Spark's)."""
    found = query._jsq.exception()
    return found.get() if found.isDefined() else None


class Pipeline:
    """A configured pipeline bound to a SparkSession: what ``cdcflow run`` runs, and the
    Python API's way in.

    :meth:`foreach_batch` gives the function that applies one source's micro-batches inside
    one's own ``foreachBatch``; :meth:`start` starts one streaming query per source (over its
    landing zone, or over a DataFrame given for it) and :meth:`wait` waits for them;
    :meth:`run` does both. The pipeline holds its run lock from the first of those calls until
    :meth:`close` (or the end of :meth:`wait`/:meth:`run`). :meth:`tables`, :meth:`table`,
    :meth:`dead_letters` and :meth:`history` read the results.
    """

    def __init__(self, cfg: PipelineConfig, spark: SparkSession | None = None) -> None:
        """``spark``: the session to run on; without one, the configuration's session is built
        when first needed (after the checks that need no Spark: paths, the run lock)."""
        self.cfg = cfg
        self._spark = spark
        self.runners: list[BatchRunner] = []
        self.queries: list[StreamingQuery] = []
        self.checkpoint: Checkpoint | None = None
        self.shared: Shared | None = None
        self._sources: dict[str, tuple[SourceConfig, SourceRecord]] = {}
        #: how each source is read, by name (:meth:`_reader`), and those checked already
        self._readers: dict[str, Source] = {}
        self._checked: set[str] = set()
        self._launchers: list[Callable[[], StreamingQuery]] = []
        self._restarts: dict[int, int] = {}
        #: over Spark Connect: the batch reports read back from the history, and whom to tell
        self._remote: RemoteReports | None = None
        self._on_report: Callable[[BatchReport], None] | None = None
        self._follower: threading.Thread | None = None
        self._closing = threading.Event()
        #: called when the pipeline closes (what watches it stops)
        self.on_close: list[Callable[[], None]] = []

    @property
    def spark(self) -> SparkSession:
        """The pipeline's SparkSession (built from the configuration on first use when none
        was given)."""
        if self._spark is None:
            self._spark = open_session(self.cfg)
        return self._spark

    # ------------------------------------------------------------------ the run lock

    def open(self) -> None:
        """Take the pipeline's run lock and read (or create) its sources' records, then check
        the table conditions with Spark; nothing when it is open already. A checkpoint on a
        local disk is locked before Spark starts."""
        if self.checkpoint is not None:
            return
        from cdcflow.engine.rules import check_conditions

        checkpoint = Checkpoint(self.cfg, lambda: self.spark)
        pid = checkpoint.pipeline_id()
        checkpoint.acquire()
        try:
            self._sources = {src.name: (src, rec) for src, rec in checkpoint.sources(pid)}
            check_conditions(self.spark, self.cfg)
        except BaseException:
            checkpoint.release()
            raise
        self.checkpoint = checkpoint
        self.shared = Shared(Catalog(self.cfg.catalog.name))
        self.runners, self.queries = [], []

    def close(self) -> None:
        """Stop the pipeline's queries and give its run lock back."""
        self._stop_queries()
        if self.checkpoint is not None:
            self.checkpoint.release()
            self.checkpoint = None
        self._closing.set()
        if self._follower is not None:
            self._follower.join()
            self._follower = None
        self._remote = self._on_report = None
        self._close_readers()
        while self.on_close:
            self.on_close.pop()()

    def _close_readers(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers, self._checked = {}, set()

    @property
    def records(self) -> dict[str, SourceRecord]:
        """The sources as the checkpoint records them, by name (once open)."""
        return {name: record for name, (_, record) in self._sources.items()}

    def __enter__(self) -> Pipeline:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _source(self, name: str | None) -> tuple[SourceConfig, SourceRecord]:
        self.open()
        if name is None:
            if len(self.cfg.sources) != 1:
                raise ConfigError(
                    f"pipeline {self.cfg.pipeline!r} has {len(self.cfg.sources)} sources: name "
                    "the one meant",
                    hint="sources: " + ", ".join(s.name for s in self.cfg.sources),
                )
            name = self.cfg.sources[0].name
        if name not in self._sources:
            raise ConfigError(
                f"no source {name!r} in pipeline {self.cfg.pipeline!r}",
                hint="sources: " + ", ".join(s.name for s in self.cfg.sources),
            )
        return self._sources[name]

    # ------------------------------------------------------------------ one's own foreachBatch

    def foreach_batch(
        self,
        source: str | None = None,
        on_report: Callable[[BatchReport], None] | None = None,
        checkpoint: str | None = None,
        checked: bool = False,
    ) -> BatchRunner:
        """The ``foreachBatch`` function that applies one source's micro-batches (the sole
        source unless named): ``fn(df, batch_id)`` with ``df`` holding raw messages, decoded
        rows or canonical events. A batch id already committed changes nothing, so Spark's
        replay of a batch after a crash is safe. ``checkpoint``: the query's checkpoint
        location when it is not :meth:`checkpoint_location` (it names the zero-byte files of
        ``binaryFile`` streams). ``checked``: the function applies the pipeline's own stream
        (:meth:`stream`), whose frames it takes as they are."""
        src, record = self._source(source)
        assert self.shared is not None
        runner = BatchRunner(
            self.cfg,
            record,
            src,
            self.shared,
            reader=self._reader(src.name),
            on_report=on_report,
            adaptive=self._adaptive(),
            checkpoint=checkpoint,
            owner=self.checkpoint,
            checked=checked,
        )
        self.runners.append(runner)
        return runner

    def next_batch(self, source: str | None = None) -> int:
        """The id to give the next batch of a source applied outside a streaming query: one
        above the highest the pipeline's history has for it (0 for the first)."""
        _, record = self._source(source)
        found = (
            self.history().where(f"pipeline = {lit(record.ledger)}").agg({"batch_id": "max"})
        ).first()
        return 0 if found is None or found[0] is None else int(found[0]) + 1

    def checkpoint_location(self, source: str | None = None) -> str:
        """Where the streaming query of a source keeps its checkpoint: inside the pipeline's
        checkpoint folder, so that the two stay together."""
        _, record = self._source(source)
        assert self.checkpoint is not None
        return self.checkpoint.query_path(record)

    def _adaptive(self) -> bool:
        return (self.spark.conf.get(ADAPTIVE, "true") or "true").lower() == "true"

    # ------------------------------------------------------------------ queries

    def _stream_session(self) -> SparkSession:
        """A session for the streaming queries: the pipeline session's settings with adaptive
        execution off, which streaming does not support (Spark would turn it off itself and
        warn). Each batch turns it back on for the batch's own queries. Settings made on the
        running session that Spark does not know (a catalog added at run time,
        ``spark.sql.catalog.<name>``) are carried over too; static ones cannot differ."""
        from pyspark.errors import AnalysisException

        if is_connect(self.spark):
            # a Connect server plans each streaming query with adaptive execution off itself
            return self.spark
        session = self.spark.newSession()
        confs = self.spark._jsparkSession.sessionState().conf().getAllConfs()
        it = confs.iterator()
        while it.hasNext():
            entry = it.next()
            key, value = str(entry._1()), str(entry._2())
            if key == ADAPTIVE or session.conf.get(key, None) == value:
                continue
            try:
                session.conf.set(key, value)
            except AnalysisException:  # a static setting: the new session has the JVM's own
                continue
        session.conf.set(ADAPTIVE, "false")
        return session

    def check_paths(self, given: Iterable[str] = ()) -> None:
        """Refuse, before Spark starts, a source that cannot be read (its checks:
        :meth:`cdcflow.sources.base.Source.check`) unless a DataFrame is ``given`` for it (by
        source name); a source checked already since its reader was made is not asked
        again."""
        skip = set(given) | self._checked
        for src in self.cfg.sources:
            if src.name not in skip:
                self._reader(src.name).check()
                self._checked.add(src.name)

    def _reader(self, name: str) -> Source:
        """How a source is read, made once until the pipeline closes (its secrets are read
        once for the queries of a start)."""
        if name not in self._readers:
            self._readers[name] = next(s for s in self.cfg.sources if s.name == name).source()
        return self._readers[name]

    def stream(
        self, src: SourceConfig, record: SourceRecord, data: DataFrame | Decoded | None
    ) -> DataFrame:
        """The decoded stream of one source: its landing zone's files, its Kafka topics, or the
        DataFrame given for it (raw messages are decoded, canonical events pass as they
        are)."""
        from cdcflow.decode.spark import Decoded, decode_dataframe, decoded_frame, is_decoded

        if isinstance(data, Decoded):
            return data.frame
        if data is not None and is_decoded(data):
            return decoded_frame(data)
        if data is None:
            data = self._reader(src.name).read(self._stream_session())
        return decode_dataframe(data, src.dialect, src.decoder_options(), record.id)

    def start(
        self,
        follow: bool = False,
        on_report: Callable[[BatchReport], None] | None = None,
        inputs: Mapping[str, DataFrame | Decoded] | None = None,
    ) -> list[StreamingQuery]:
        """Take the pipeline's run lock and start one query per source, over the source's
        landing zone or the streaming DataFrame ``inputs`` gives for it (by source name).
        ``follow``: keep following (a processing-time trigger every ``follow_interval``);
        otherwise process what is there and stop (``availableNow``)."""
        given = dict(inputs or {})
        unknown = sorted(set(given) - {s.name for s in self.cfg.sources})
        if unknown:
            raise ConfigError(
                f"inputs for source(s) {', '.join(unknown)} not in pipeline {self.cfg.pipeline!r}",
                hint="sources: " + ", ".join(s.name for s in self.cfg.sources),
            )
        self.check_paths(given)
        self.open()
        assert self.checkpoint is not None
        self._launchers = []
        remote = is_connect(self.spark)
        try:
            if remote:
                self._remote_start(given, on_report)
            for src in self.cfg.sources:
                _, record = self._sources[src.name]
                location = self.checkpoint.query_path(record)
                function: Callable[[DataFrame, int], None]
                if remote:
                    function = self._remote_function(record, location)
                else:
                    function = self.foreach_batch(
                        src.name, on_report, checkpoint=location, checked=True
                    )
                launch = self._launcher(
                    src, record, given.get(src.name), function, location, follow
                )
                self._launchers.append(launch)
                self.queries.append(launch())
                if remote:
                    self._remote_claim(src.name, self.queries[-1])
        except BaseException:
            self.close()
            raise
        return self.queries

    # ------------------------------------------------------------------ over Spark Connect

    def _remote_start(
        self, given: Mapping[str, object], on_report: Callable[[BatchReport], None] | None
    ) -> None:
        """Before a Connect run's queries start: refuse what a Connect server cannot run, and
        note where each source's batch history stands (see
        :class:`~cdcflow.pipeline.remote.RemoteReports`)."""
        from cdcflow.pipeline.remote import RemoteReports

        for src in self.cfg.sources:
            if src.name not in given:
                self._reader(src.name).check_connect()
        self._remote = RemoteReports(
            self.history,
            self.dead_letters,
            [self._sources[s.name][1] for s in self.cfg.sources],
            [s.name for s in self.cfg.sources],
            # batches of earlier runs are not this run's
            [self.next_batch(s.name) - 1 for s in self.cfg.sources],
        )
        self._on_report = on_report
        self._closing.clear()
        self._follower = threading.Thread(
            target=self._follow_reports, name="cdcflow-connect-reports", daemon=True
        )
        self._follower.start()

    def _follow_reports(self) -> None:
        """Read a Connect run's batch reports back as its queries finish batches, every
        :data:`REMOTE_LOOK` seconds until the pipeline closes (so that what watches the
        pipeline — ``on_report``, its metrics — follows it whether or not :meth:`wait`
        runs)."""
        while not self._closing.wait(REMOTE_LOOK):
            try:
                self._remote_reports()
            except Exception:  # a server going away: the last look at the end says the rest
                logging.getLogger("cdcflow").debug("reading batch reports", exc_info=True)

    def _remote_function(self, record: SourceRecord, location: str) -> Callable[..., None]:
        """The ``foreachBatch`` function of a source's query over Spark Connect, after
        checking that the query resumed at ``location`` is the one that applies the source
        (a query with a checkpoint of its own would number its batches anew)."""
        from cdcflow.pipeline.remote import RemoteBatches

        assert self.checkpoint is not None
        resumed = self.checkpoint.query_id(record)
        if record.query is not None and record.query != resumed:
            self.checkpoint.claim_query(record, resumed or "with a new checkpoint")
        return RemoteBatches(self.cfg, record, location, self._adaptive())

    def _remote_claim(self, name: str, query: StreamingQuery) -> None:
        """Record a started query over Spark Connect as its source's (its batches do not say
        which query runs them there)."""
        assert self.checkpoint is not None
        src, record = self._sources[name]
        self._sources[name] = (src, self.checkpoint.claim_query(record, str(query.id)))

    def _remote_reports(self) -> None:
        """Report the batches a Connect run's queries finished since the last look."""
        if self._remote is None or self.shared is None:
            return
        for report in self._remote.poll(self.queries):
            self.shared.reports.add(report)
            if self._on_report is not None:
                self._on_report(report)

    def _launcher(
        self,
        src: SourceConfig,
        record: SourceRecord,
        data: DataFrame | Decoded | None,
        runner: Callable[[DataFrame, int], None],
        location: str,
        follow: bool,
    ) -> Callable[[], StreamingQuery]:
        """What starts (and, after a known failure of Spark's, starts again) one source's
        query."""

        def launch() -> StreamingQuery:
            writer = (
                self.stream(src, record, data)
                .writeStream.foreachBatch(runner)
                .option("checkpointLocation", location)
                .queryName(f"cdcflow_{self.cfg.pipeline}_{record.id}")
            )
            if follow:
                seconds = parse_duration(self.cfg.follow_interval)
                writer = writer.trigger(processingTime=f"{seconds} seconds")
            else:
                writer = writer.trigger(availableNow=True)
            return writer.start()

        return launch

    def _restart_failed(self) -> bool:
        """Start again a Kafka source's query that ended on SPARK-57438 (see
        :func:`cdcflow.spark.errors.kafka_restart_bug`), at most a few times a run; whether
        every failed query was started again."""
        from cdcflow.spark.errors import kafka_restart_bug, kafka_restart_bug_trace

        for i, q in enumerate(self.queries):
            if self._remote is not None:  # a Connect client gets the JVM's trace as text
                exc = q.exception()
                bug = exc is not None and kafka_restart_bug_trace(_trace(exc))
            else:
                exc = _java_exception(q)
                bug = exc is not None and kafka_restart_bug(exc)
            if exc is None:
                continue
            if not bug or self._restarts.get(i, 0) >= 3 or i >= len(self._launchers):
                return False
            self._restarts[i] = self._restarts.get(i, 0) + 1
            logging.getLogger("cdcflow").warning(
                "cdcflow: source %s: Spark's Kafka source failed to report progress after a "
                "batch it ran again (SPARK-57438, PySpark 4.1.0-4.1.2); its query is started "
                "again",
                self.cfg.sources[i].name,
            )
            self.queries[i] = self._launchers[i]()
        return True

    @property
    def query(self) -> StreamingQuery:
        """The streaming query of a pipeline with one source, once started."""
        if len(self.queries) != 1:
            raise CdcflowError(
                f"pipeline {self.cfg.pipeline!r} runs {len(self.queries)} queries",
                hint="use .queries (one per source, in the configuration's order)",
            )
        return self.queries[0]

    def stop(self) -> None:
        """Stop after the batch in progress (none is left half-done: a batch that had not
        started is read again by the next run)."""
        if self.shared is None:
            return
        active = [q for q in self.queries if q.isActive]
        if not active:
            self.shared.stopping.set()
            return
        if self._remote is not None:
            # the batch in progress runs on the server: stopped with its query, it is
            # completed by the next run (its commits carry the ledger)
            self.shared.stopping.set()
            _quietly(self._stop_queries)
            return
        from cdcflow.spark.session import queries_stopping_quietly

        # a batch refused from here on ends its query with an error Spark would print
        with queries_stopping_quietly(self.spark):
            self.shared.stopping.set()
            with self.shared.lock:
                _quietly(self._stop_queries)

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
        inputs: Mapping[str, DataFrame | Decoded] | None = None,
    ) -> RunResult:
        """:meth:`start`, then :meth:`wait`."""
        self.start(follow, on_report, inputs)
        return self.wait(timeout, should_stop, raise_on_failure)

    def wait(
        self,
        timeout: float | None = None,
        should_stop: Callable[[], bool] | None = None,
        raise_on_failure: bool = True,
    ) -> RunResult:
        """Wait for the started queries: until they have processed what was there (without
        ``follow``), or until ``should_stop()`` says so or ``timeout`` seconds pass; then give
        the run lock back. A failure ends the run: it is raised, or with
        ``raise_on_failure=False`` reported in the result."""
        result = RunResult()
        started = time.monotonic()
        try:
            while True:
                if any(q.exception() is not None for q in self.queries):
                    if not self._restart_failed():
                        break
                if not any(q.isActive for q in self.queries):
                    # a query may have failed after the look above: judged before the end
                    if any(q.exception() is not None for q in self.queries):
                        if self._restart_failed():
                            continue
                    break
                if should_stop is not None and should_stop():
                    result.stopped = True
                    self.stop()
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    result.stopped = True
                    self.stop()
                    break
                time.sleep(0.2)
            ended = self._await_queries()
            if self._remote is not None:
                self._remote_reports()
            if not self.stopping:
                result.failure = self._failure(ended)
        finally:
            if self.shared is not None:
                result.reports = self.shared.reports
            if self.stopping:
                # the JVM may be shutting down with this process (a signal to its whole
                # process group): what is left to ask of it may fail, and nothing is lost
                _quietly(self.close)
            else:
                self.close()
        if raise_on_failure and result.failure is not None:
            raise result.failure
        return result

    def stop_session(self) -> None:
        """Stop the pipeline's SparkSession, if it was started (after a stop asked for by a
        signal, the JVM may be gone already)."""
        if self._spark is None:
            return
        if self.stopping:
            _quietly(self._spark.stop)
        else:
            self._spark.stop()

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for (:meth:`stop`)."""
        return self.shared is not None and self.shared.stopping.is_set()

    def _await_queries(self) -> BaseException | None:
        """Wait for every query to end; the first exception one ended with, if any."""
        ended: BaseException | None = None
        for q in self.queries:
            try:
                q.awaitTermination()
            except Exception as e:  # the query's failure, judged by the caller
                ended = ended or e
        return ended

    def _failure(self, ended: BaseException | None) -> BaseException | None:
        """What ended the run: a batch's own failure, else a query's (offsets gone from Kafka
        as ``KAFKA_DATA_LOSS``, naming the source, topic, partition and offsets)."""
        from cdcflow.spark.errors import kafka_data_loss

        for runner in self.runners:
            if runner.failure is not None:
                return kafka_data_loss(runner.failure, runner.src.name) or runner.failure
        for q, src in zip(self.queries, [s.name for s in self.cfg.sources], strict=False):
            exc = q.exception()
            if exc is not None and self._remote is not None:
                return remote_failure(exc, src)
            if exc is not None:
                lost = kafka_data_loss(_java_exception(q) or exc, src)
                return lost or CdcflowError(
                    first_line(exc), code="PIPELINE_FAILED", hint=DEBUG_HINT
                )
        if ended is not None:
            return CdcflowError(first_line(ended), code="PIPELINE_FAILED", hint=DEBUG_HINT)
        return None

    # ------------------------------------------------------------------ maintenance

    def maintain(self, tables: Sequence[str] | None = None) -> list[Action]:
        """Maintain the tables now, under the run lock, whatever the policy's thresholds:
        every replica (or ``tables``) whose files can be rewritten is, snapshots beyond the
        policy's retention expire, orphan files go; without ``tables``, the internal tables
        too (see :mod:`cdcflow.iceberg.maintain`)."""
        self.open()
        names = list(tables) if tables else self.tables()
        known = set(self.tables())
        missing = [t for t in names if t not in known]
        if missing:
            raise ConfigError(
                f"no replica {', '.join(map(repr, missing))} in pipeline {self.cfg.pipeline!r}",
                hint="replicas: " + (", ".join(sorted(known)) or "none yet"),
            )
        runner = self.foreach_batch(self.cfg.sources[0].name)
        assert self.shared is not None
        with self.shared.lock:
            return runner.upkeep.maintain(self.spark, -1, names, forced=True, internal=not tables)

    # ------------------------------------------------------------------ results

    def tables(self) -> list[str]:
        """Names of the pipeline's replica and changelog tables."""
        return results.replica_names(self.cfg, self.spark)

    def table(self, name: str) -> DataFrame:
        """One replica (or changelog) table, with its ``_cdc`` metadata column."""
        return results.replica(self.cfg, self.spark, name)

    def dead_letters(self) -> DataFrame:
        """The pipeline's dead letters (see :func:`cdcflow.pipeline.results.dead_letters`)."""
        return results.dead_letters(self.cfg, self.spark)

    def history(self) -> DataFrame:
        """The pipeline's batches (see :func:`cdcflow.pipeline.results.history`)."""
        return results.history(self.cfg, self.spark)


def _quietly(step: Callable[[], object]) -> None:
    """Run a step of stopping whose failure changes nothing: a JVM that is shutting down
    refuses calls, and every query it ran is stopped anyway."""
    try:
        step()
    except Exception:  # py4j errors of a JVM going away
        logging.getLogger("cdcflow").debug("while stopping", exc_info=True)
