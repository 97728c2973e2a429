"""The Prometheus metrics, readiness and live status of a running pipeline.

:class:`PipelineMetrics` follows a :class:`~cdcflow.pipeline.query.Pipeline`: each batch's
report (its ``on_report``) adds to the counters and histograms, and sets each table's
figures from the batch's own commit (files, rows, snapshots, bytes from the snapshot summary;
the newest source commit time among the batch's events). The lag behind the sources comes
from what the streaming queries already know — a Kafka source's end offsets against the
latest offsets of its last trigger (``lastProgress``), the files of a landing zone its file
log has not taken yet — and the producers' resolved watermarks from the watermark table when
a batch moved them; no Spark job is run for any of it. At start, the figures of tables no
batch has written yet in this run are read from the catalog (pyiceberg, when it can open it).

Metric names follow Prometheus' conventions: ``cdcflow_`` then what is measured, base units
(seconds, bytes), ``_total`` for counters; labels are the pipeline's, sources' and replicas'
names, error codes, stages, actions, topics and partitions — never a connection setting.
"""

from __future__ import annotations

import ast
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdcflow.config_base import parse_duration
from cdcflow.observe.status import (
    WINDOW_SECONDS,
    BatchPoint,
    SourceStatus,
    Status,
    TableStatus,
)

if TYPE_CHECKING:
    from prometheus_client import Metric

    from cdcflow.config import PipelineConfig
    from cdcflow.observe.tables import Results
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.report import BatchReport

_LOG = logging.getLogger("cdcflow")
#: Buckets of the batch and stage histograms (seconds).
SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: A landing zone is listed at most this often (it may hold many files).
LISTING_SECONDS = 10.0
#: The outcomes every event of a batch ends in (see :class:`~cdcflow.pipeline.report.BatchReport`).
OUTCOMES = ("applied", "duplicate", "stale", "conflict", "dead_lettered")


@dataclass
class _Query:
    """What was last seen of one source's streaming query."""

    progress_at: str | None = None
    #: (topic, partition) → offsets not read yet
    kafka_lag: dict[tuple[str, int], int] | None = None
    files_waiting: int | None = None
    listed_at: float = 0.0


class PipelineMetrics(Collector):
    """Metrics and status of one running pipeline (see the module's text)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        pipeline: Pipeline | None = None,
        ready_intervals: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.clock = clock
        self.interval = float(parse_duration(cfg.follow_interval))
        self.ready_intervals = ready_intervals
        self.started = clock()
        #: when a batch last succeeded, or a trigger last ended without data
        self.healthy_at = self.started
        self.lock = threading.RLock()
        #: how each source is read, for what waits in it
        self.readers = {s.name: s.source() for s in cfg.sources}
        self.sources = {n: SourceStatus(n, r.describe()) for n, r in self.readers.items()}
        self.tables: dict[str, TableStatus] = {}
        self.open_dead = 0
        self.recent: deque[BatchPoint] = deque()
        self.queries: dict[str, _Query] = {s.name: _Query() for s in cfg.sources}
        self.resolved: dict[tuple[str, str], float] = {}
        self.results: Results | None = None
        self._resolved_due = False
        self._polling = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=True)
        self._define()
        self.registry.register(self)

    # ------------------------------------------------------------------ definitions

    def _define(self) -> None:
        reg, p = self.registry, ["pipeline"]
        self.batches = Counter("cdcflow_batches", "Batches applied.", [*p, "source"], registry=reg)
        self.events_read = Counter(
            "cdcflow_events_read",
            "Events read: every event of a batch, and every message or segment of a split "
            "message that gave none and was dead-lettered.",
            [*p, "source"],
            registry=reg,
        )
        self.events = Counter(
            "cdcflow_events",
            "Events by what became of them (applied, duplicate, stale, conflict, "
            "dead_lettered); table is empty for markers and messages that named none.",
            [*p, "source", "table", "outcome"],
            registry=reg,
        )
        self.operations = Counter(
            "cdcflow_operations",
            "Events read by operation.",
            [*p, "source", "operation"],
            registry=reg,
        )
        self.dead_letters = Counter(
            "cdcflow_dead_letters",
            "Dead letters written, by error code.",
            [*p, "source", "code"],
            registry=reg,
        )
        self.batch_seconds = Histogram(
            "cdcflow_batch_seconds",
            "Seconds a batch took.",
            [*p, "source"],
            buckets=SECONDS_BUCKETS,
            registry=reg,
        )
        self.stage_seconds = Histogram(
            "cdcflow_stage_seconds",
            "Seconds each stage of a batch took.",
            [*p, "source", "stage"],
            buckets=SECONDS_BUCKETS,
            registry=reg,
        )
        self.last_batch = Gauge(
            "cdcflow_last_batch_timestamp_seconds",
            "When the source's last batch finished (Unix time).",
            [*p, "source"],
            registry=reg,
        )
        self.maintenance = Counter(
            "cdcflow_maintenance_actions",
            "Maintenance actions run between batches.",
            [*p, "table", "action"],
            registry=reg,
        )
        self.maintenance_seconds = Counter(
            "cdcflow_maintenance_seconds",
            "Seconds spent in maintenance actions.",
            [*p, "action"],
            registry=reg,
        )

    def collect(self) -> Iterator[Metric]:
        """The figures that are read when scraped: freshness, lag, the tables' files, ready."""
        with self.lock:
            status = self.status()
        name = self.cfg.pipeline

        def family(metric: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(metric, doc, labels=["pipeline", *labels])

        source_time = family(
            "cdcflow_table_source_timestamp_seconds",
            "The source commit time of the newest change the replica holds (Unix time).",
            ["table"],
        )
        fresh = family(
            "cdcflow_table_freshness_seconds",
            "Now minus the source commit time of the newest change the replica holds.",
            ["table"],
        )
        per_table = {
            "rows": family(
                "cdcflow_table_rows", "Rows of the replica after its last commit.", ["table"]
            ),
            "data_files": family(
                "cdcflow_table_data_files", "Data files of the replica.", ["table"]
            ),
            "delete_files": family(
                "cdcflow_table_delete_files", "Delete files of the replica.", ["table"]
            ),
            "snapshots": family(
                "cdcflow_table_snapshots", "Snapshots in the replica's metadata.", ["table"]
            ),
            "bytes": family(
                "cdcflow_table_bytes", "Bytes of the replica's data and delete files.", ["table"]
            ),
        }
        last_write = family(
            "cdcflow_table_last_batch_timestamp_seconds",
            "When the last batch that wrote the replica finished (Unix time).",
            ["table"],
        )
        for t in status.tables:
            if t.source_time is not None:
                source_time.add_metric([name, t.table], t.source_time)
                fresh.add_metric([name, t.table], t.freshness(status.at) or 0.0)
            if t.last_batch is not None:
                last_write.add_metric([name, t.table], t.last_batch)
            for attr, metric in per_table.items():
                value = getattr(t, attr)
                if value is not None:
                    metric.add_metric([name, t.table], float(value))
        kafka = family(
            "cdcflow_kafka_lag_offsets",
            "Offsets of a Kafka partition not applied yet: the partition's end offset less "
            "the offset the source's query has read up to.",
            ["source", "topic", "partition"],
        )
        waiting = family(
            "cdcflow_landing_files_waiting",
            "Files of a landing zone its streaming query has not read yet.",
            ["source"],
        )
        resolved = family(
            "cdcflow_resolved_lag_seconds",
            "Now minus the producer's resolved watermark (the oldest partition's) per scope.",
            ["source", "scope"],
        )
        for src, q in self.queries.items():
            for (topic, partition), behind in sorted((q.kafka_lag or {}).items()):
                kafka.add_metric([name, src, topic, str(partition)], float(behind))
            if q.files_waiting is not None:
                waiting.add_metric([name, src], float(q.files_waiting))
        for (src, scope), at in sorted(self.resolved.items()):
            resolved.add_metric([name, src, scope], max(0.0, status.at - at))
        ready = family("cdcflow_ready", "1 while /readyz answers ready.", [])
        ready.add_metric([name], 1.0 if status.ready else 0.0)
        open_dead = family(
            "cdcflow_dead_letters_open",
            "Dead letters not replayed yet, per table (empty: messages that named none).",
            ["table"],
        )
        for t in status.tables:
            open_dead.add_metric([name, t.table], float(t.dead_letters))
        yield from [
            source_time,
            fresh,
            last_write,
            *per_table.values(),
            kafka,
            waiting,
            resolved,
            ready,
            open_dead,
        ]

    def describe(self) -> Iterator[Metric]:
        """Nothing: the families :meth:`collect` gives depend on what the pipeline holds."""
        return iter(())

    # ------------------------------------------------------------------ batches

    def report(self, r: BatchReport) -> None:
        """Take a batch's report (a pipeline's ``on_report``)."""
        now = self.clock()
        src = r.source or (self.cfg.sources[0].name if len(self.cfg.sources) == 1 else "")
        p = self.cfg.pipeline
        with self.lock:
            self.healthy_at = now
            self.batches.labels(p, src).inc()
            self.events_read.labels(p, src).inc(r.events)
            for op, n in r.operations.items():
                self.operations.labels(p, src, op).inc(n)
            seen = {k: 0 for k in OUTCOMES}
            for o in r.outcomes:
                counts = dict(
                    zip(
                        OUTCOMES,
                        (o.applied, o.duplicates, o.stale, o.conflicts, o.dead_lettered),
                        strict=True,
                    )
                )
                for outcome, n in counts.items():
                    self.events.labels(p, src, o.table, outcome).inc(n)
                    seen[outcome] += n
                self._table(src, o, now)
            # markers and messages that named no table
            rest = dict(
                zip(
                    OUTCOMES,
                    (r.applied, r.duplicates, r.stale, r.conflicts, r.dead_lettered),
                    strict=True,
                )
            )
            for outcome, n in rest.items():
                left = n - seen[outcome]
                if left > 0:
                    self.events.labels(p, src, "", outcome).inc(left)
            for code, n in r.dead_letter_codes.items():
                self.dead_letters.labels(p, src, code).inc(n)
            self.open_dead += r.dead_lettered + r.undelivered
            self.batch_seconds.labels(p, src).observe(r.seconds)
            for stage, seconds in r.stages.items():
                self.stage_seconds.labels(p, src, stage).observe(seconds)
            self.last_batch.labels(p, src).set(now)
            for a in r.actions:
                self.maintenance.labels(p, f"{a.namespace}.{a.table}", a.action).inc()
                self.maintenance_seconds.labels(p, a.action).inc(a.seconds)
            known = self.sources.get(src) or SourceStatus(src, "")
            self.sources[src] = replace(
                known, last_batch=now, batches=known.batches + 1, events=known.events + r.events
            )
            self.recent.append(BatchPoint(src, r.batch_id, now, r.seconds, r.events))
            while self.recent and self.recent[0].at < now - WINDOW_SECONDS:
                self.recent.popleft()
            if r.operations.get("RESOLVED"):
                self._resolved_due = True

    def _table(self, src: str, o: Any, now: float) -> None:
        known = self.tables.get(o.table) or TableStatus(o.table)
        newest = o.newest.timestamp() if o.newest is not None else None
        if known.source_time is not None and (newest is None or newest < known.source_time):
            newest = known.source_time
        files = o.files
        dead = sum(o.dead_letter_codes.values())
        self.tables[o.table] = replace(
            known,
            source=src,
            source_time=newest,
            last_batch=now,
            dead_letters=known.dead_letters + dead,
            rows=files.rows if files else known.rows,
            data_files=files.data_files if files else known.data_files,
            delete_files=files.delete_files if files else known.delete_files,
            snapshots=files.snapshots if files else known.snapshots,
            bytes=files.bytes if files else known.bytes,
        )

    # ------------------------------------------------------------------ from the catalog

    def seed(self, results: Results) -> None:
        """Start from what the catalog says: the replicas' figures, the newest source times,
        the open dead letters, the sources' batches so far and the last hour's batches (what a
        batch of this run reported already keeps its own figures)."""
        from cdcflow.observe.survey import status_of

        found = status_of(self.cfg, results, self.clock())
        with self.lock:
            self.results = results
            for t in found.tables:
                self.tables.setdefault(t.table, t)
            self.open_dead = max(self.open_dead, found.dead_letters)
            for s in found.sources:
                known = self.sources.get(s.source)
                if known is not None and not known.batches:
                    self.sources[s.source] = replace(
                        known, last_batch=s.last_batch, batches=s.batches, events=s.events
                    )
            mine = {(b.source, b.batch_id) for b in self.recent}
            earlier = [b for b in found.recent if (b.source, b.batch_id) not in mine]
            self.recent = deque(sorted([*earlier, *self.recent], key=lambda b: b.at))
        self._resolved_due = True

    def _read_resolved(self) -> None:
        """The producers' resolved watermarks, from the watermark table."""
        if self.results is None:
            return
        ids = self._source_ids()
        found: dict[tuple[str, str], float] = {}
        for w in self.results.watermarks() or []:
            if w.resolved_to is not None:
                found[(ids.get(w.source, w.source), w.scope)] = w.resolved_to.timestamp()
        with self.lock:
            self.resolved = found

    def _source_ids(self) -> dict[str, str]:
        pipeline = self.pipeline
        if pipeline is None:
            return {}
        return {r.id: name for name, r in pipeline.records.items()}

    # ------------------------------------------------------------------ the queries

    def poll(self, light: bool = False) -> None:
        """Look at the streaming queries: whether one waits for its next trigger (ready), and
        unless ``light`` the Kafka offsets not read yet, the landing zones' files not read
        yet, and the resolved watermarks when a batch moved them (nothing when a look is
        under way already)."""
        if not self._polling.acquire(blocking=False):
            return
        try:
            self._poll(light)
        finally:
            self._polling.release()

    def close(self) -> None:
        """Let go of what looking needed (the Kafka consumers in the driver's JVM)."""
        with self._polling:
            for reader in self.readers.values():
                try:
                    reader.close()
                except Exception:  # a JVM going away
                    _LOG.debug("closing a Kafka consumer", exc_info=True)

    def _poll(self, light: bool) -> None:
        pipeline = self.pipeline
        if not light and self._resolved_due:
            self._resolved_due = False
            try:
                self._read_resolved()
            except Exception:  # a catalog busy or going away: the next batch tries again
                _LOG.debug("reading the resolved watermarks", exc_info=True)
        if pipeline is None:
            return
        now = self.clock()
        for src, query in zip(self.cfg.sources, list(pipeline.queries), strict=False):
            seen = self.queries[src.name]
            try:
                state = query.status
                progress = query.lastProgress
            except Exception:  # a JVM going away: nothing more to see
                return
            at = _get(progress, "timestamp") if progress else None
            with self.lock:
                if not state.get("isTriggerActive", True) or (at and at != seen.progress_at):
                    self.healthy_at = now
                seen.progress_at = at
            if light:
                continue
            reader = self.readers[src.name]
            if progress:
                lag = reader.lag(pipeline.spark, read_offsets(progress))
                if lag is not None:
                    with self.lock:
                        seen.kafka_lag = lag
            if now - seen.listed_at >= LISTING_SECONDS:
                seen.listed_at = now
                checkpoint = pipeline.checkpoint
                records = pipeline.records
                if checkpoint is not None and src.name in records:
                    path = checkpoint.query_path(records[src.name])
                    try:
                        seen.files_waiting = reader.files_waiting(path)
                    except OSError:
                        _LOG.debug("listing %s", reader.location, exc_info=True)

    def ready(self) -> tuple[bool, str]:
        """Whether a batch succeeded (or a trigger found nothing to do) within
        ``ready_intervals`` follow intervals, and why not."""
        bound = self.ready_intervals * self.interval
        pipeline = self.pipeline
        if (
            pipeline is not None
            and pipeline.queries
            and not all(_active(q) for q in pipeline.queries)
        ):
            return False, "a streaming query of the pipeline has ended"
        idle = self.clock() - self.healthy_at
        if idle > bound:
            return False, (
                f"no batch succeeded and no trigger ended for {idle:.0f}s "
                f"({self.ready_intervals} × follow_interval {self.cfg.follow_interval})"
            )
        return True, "ready"

    def status(self) -> Status:
        """The pipeline now, as the running pipeline sees it."""
        now = self.clock()
        with self.lock:
            sources = []
            for name, s in self.sources.items():
                q = self.queries.get(name) or _Query()
                lags = [now - at for (src, _), at in self.resolved.items() if src == name]
                sources.append(
                    replace(
                        s,
                        offsets_behind=sum(q.kafka_lag.values())
                        if q.kafka_lag is not None
                        else None,
                        files_waiting=q.files_waiting,
                        resolved_lag=max(lags) if lags else None,
                    )
                )
            return Status(
                pipeline=self.cfg.pipeline,
                namespace=self.cfg.namespace,
                at=now,
                live=True,
                ready=self.ready()[0],
                sources=tuple(sources),
                tables=tuple(self.tables[n] for n in sorted(self.tables)),
                recent=tuple(b for b in self.recent if b.at >= now - WINDOW_SECONDS),
                dead_letters=self.open_dead,
            )


def _get(progress: Any, key: str) -> Any:
    """A field of a query's progress (a dict in PySpark 3.5, an object that also reads as
    one in PySpark 4)."""
    try:
        return progress[key]
    except (KeyError, TypeError, IndexError):
        return getattr(progress, key, None)


def _offsets(value: Any) -> dict[tuple[str, int], int]:
    """Kafka offsets of a progress (``{"topic": {"0": 42}}``, parsed, as JSON text, or as
    the text of a Python dict: what PySpark 4 makes of the JSON it was given)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return {}
    out: dict[tuple[str, int], int] = {}
    if isinstance(value, Mapping):
        for topic, parts in value.items():
            if isinstance(parts, Mapping):
                for partition, offset in parts.items():
                    if isinstance(offset, int) and str(partition).lstrip("-").isdigit():
                        out[(str(topic), int(partition))] = offset
    return out


def read_offsets(progress: Any) -> dict[tuple[str, int], int]:
    """Per topic-partition, the offset a query has read up to (its last progress's end
    offsets)."""
    out: dict[tuple[str, int], int] = {}
    for s in _get(progress, "sources") or []:
        out.update(_offsets(_get(s, "endOffset")))
    return out


def _active(query: Any) -> bool:
    try:
        return bool(query.isActive)
    except Exception:  # a JVM going away
        return False
