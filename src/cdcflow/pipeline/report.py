"""What a micro-batch did: figures for the progress line, the batch history and callers; what
a run did (:class:`RunResult`) and its exit status."""

from __future__ import annotations

import datetime as dt
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdcflow.iceberg.maintain import Action

#: Stages of a batch, in the order they run (``merge`` and ``internal`` overlap: replicas and
#: internal tables are written concurrently).
STAGES: tuple[str, ...] = (
    "decode",
    "segments",
    "hold",
    "plan",
    "validate",
    "merge",
    "internal",
    "outputs",
    "dead_letters",
    "history",
)
#: The operation breakdown's entry for messages (and segments of split messages) that gave no
#: event and were dead-lettered as they came: with it the breakdown sums to ``events``.
UNDECODED = "UNDECODED"


@dataclass(frozen=True)
class TableFiles:
    """A table after the batch's commit to it, as the commit's snapshot summary says."""

    records: int
    data_files: int
    delete_files: int
    position_deletes: int
    equality_deletes: int
    bytes: int
    #: snapshots in the table's metadata
    snapshots: int

    @classmethod
    def of(cls, summary: Mapping[str, str], snapshots: int) -> TableFiles | None:
        """The figures of a snapshot summary (``None`` for a summary without totals)."""
        if "total-records" not in summary:
            return None

        def n(key: str) -> int:
            value = summary.get(key, "0")
            return int(value) if str(value).isdigit() else 0

        return cls(
            n("total-records"),
            n("total-data-files"),
            n("total-delete-files"),
            n("total-position-deletes"),
            n("total-equality-deletes"),
            n("total-files-size"),
            snapshots,
        )

    @property
    def rows(self) -> int:
        """Live rows: records less those deleted by delete files (exact while no delete file
        refers to rows already gone, which a rewrite of the data files restores)."""
        return max(0, self.records - self.position_deletes - self.equality_deletes)


@dataclass(frozen=True)
class TableOutcome:
    """What happened to one target table's events in a batch."""

    table: str
    mode: str
    events: int
    duplicates: int = 0
    conflicts: int = 0
    stale: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    #: the newest source commit time among the table's events of the batch
    newest: dt.datetime | None = None
    #: the table after the batch's commit (``None``: nothing committed, or no summary)
    files: TableFiles | None = None
    #: the table's events dead-lettered by the batch, by error code
    dead_letter_codes: Mapping[str, int] = field(default_factory=dict)

    @property
    def applied(self) -> int:
        """Events that changed the table, or would have were a newer one of the batch not
        deciding their key (see :class:`BatchReport`)."""
        return self.events - self.duplicates - self.conflicts - self.stale - self.dead_lettered


@dataclass(frozen=True)
class BatchReport:
    """Progress figures of one micro-batch. Each of its ``events`` — every event, and every
    message or segment of a split message that could not be decoded — is counted once as
    applied, a duplicate, stale, a conflict or dead-lettered:

    ``events = applied + duplicates + stale + conflicts + dead_lettered``

    ``operations`` breaks ``events`` down by operation (messages that gave no event under
    :data:`UNDECODED`), so it sums to ``events`` too.

    ``undelivered``: events applied whose delivery to an output failed (dead letters too,
    ``DELIVERY_FAILED``, not part of the identity)."""

    batch_id: int
    events: int
    operations: dict[str, int]
    duplicates: int
    conflicts: int
    stale: int
    dead_lettered: int
    tables: dict[str, int]
    seconds: float
    applied: int = 0
    undelivered: int = 0
    #: the configured source's name
    source: str = ""
    outcomes: tuple[TableOutcome, ...] = field(default_factory=tuple)
    #: segments of split messages received, and messages reassembled from segments
    segments: int = 0
    reassembled: int = 0
    #: consistency mode: events held back at the end of the batch, and released from earlier
    held: int = 0
    released: int = 0
    #: seconds per stage (see :data:`STAGES`)
    stages: dict[str, float] = field(default_factory=dict)
    #: a Kafka source with ``fail_on_data_loss: false``: offsets no longer in Kafka when the
    #: batch read, ``<topic>-<partition>`` → ``<from>-<to>`` (``to`` excluded)
    skipped: dict[str, str] = field(default_factory=dict)
    #: messages that carry no change, skipped on purpose (outside ``events``), by reason:
    #: ``tombstone`` (a Kafka record with a null value), ``heartbeat``, ``key``, …
    skipped_messages: dict[str, int] = field(default_factory=dict)
    #: maintenance run after the batch, an action a line (see :mod:`cdcflow.iceberg.maintain`)
    maintenance: tuple[str, ...] = ()
    #: the same actions as data
    actions: tuple[Action, ...] = ()
    #: dead letters of the batch by error code (``undelivered`` events as ``DELIVERY_FAILED``)
    dead_letter_codes: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_history(cls, row: Mapping[str, object], source: str = "") -> BatchReport:
        """The report of a batch as its row of the batch history holds it (counts, tables,
        stages, skips: the figures without a column there — segments, held events, each
        table's outcome, maintenance — are left empty)."""

        def count(key: str) -> int:
            value = row.get(key)
            return int(value) if isinstance(value, int) else 0

        def mapping(key: str) -> dict[str, object]:
            value = row.get(key)
            return dict(value) if isinstance(value, Mapping) else {}

        seconds = row.get("seconds")
        return cls(
            batch_id=count("batch_id"),
            events=count("events"),
            operations={k: int(str(v)) for k, v in mapping("operations").items()},
            duplicates=count("duplicates"),
            conflicts=count("conflicts"),
            stale=count("stale"),
            dead_lettered=count("dead_lettered"),
            tables={k: int(str(v)) for k, v in mapping("tables").items()},
            seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
            applied=count("applied"),
            undelivered=count("undelivered"),
            source=source or str(row.get("source") or ""),
            stages={k: float(str(v)) for k, v in mapping("stages").items()},
            skipped={k: str(v) for k, v in mapping("skipped").items()},
            skipped_messages={k: int(str(v)) for k, v in mapping("skipped_messages").items()},
        )

    @property
    def rate(self) -> float:
        """Events per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def slowest_stage(self) -> tuple[str, float] | None:
        """The stage that took longest, with its seconds."""
        if not self.stages:
            return None
        name = max(self.stages, key=lambda k: self.stages[k])
        return name, self.stages[name]


#: Batch reports a run keeps in memory: the most recent (a ``--follow`` run lasts months, a
#: batch every few seconds; every batch is in the batch history table, ``cdcflow history``).
RECENT_REPORTS = 1_000


class Reports:
    """The reports of batches in the order they finished: totals over all of them, and the
    most recent :data:`RECENT_REPORTS` themselves (iterating, indexing and ``len`` see
    those)."""

    def __init__(self, keep: int = RECENT_REPORTS) -> None:
        self.recent: deque[BatchReport] = deque(maxlen=keep)
        #: batches reported, events in them, dead letters written (undelivered events too)
        self.batches = 0
        self.events = 0
        self.dead_lettered = 0

    def add(self, report: BatchReport) -> None:
        self.recent.append(report)
        self.batches += 1
        self.events += report.events
        self.dead_lettered += report.dead_lettered + report.undelivered

    def __iter__(self) -> Iterator[BatchReport]:
        return iter(self.recent)

    def __len__(self) -> int:
        return len(self.recent)

    def __getitem__(self, i: int) -> BatchReport:
        return self.recent[i]


class StageClock:
    """Seconds per stage of one batch."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a block as (part of) a stage."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        """Add seconds to a stage."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


def rate_text(events: int, seconds: float) -> str:
    """Events per second as a progress line shows them (one decimal below 10)."""
    per_second = events / seconds if seconds > 0 else 0.0
    if events and per_second < 10:
        return f"{per_second:.1f}"
    return f"{per_second:,.0f}"


def format_report(report: BatchReport, source: bool = False) -> str:
    """One progress line for a batch report (``source``: led by the source's name, for
    pipelines with several)."""
    ops = " ".join(f"{k}={v:,}" for k, v in sorted(report.operations.items()))
    tables = ", ".join(f"{k}={v:,}" for k, v in sorted(report.tables.items())) or "-"
    if len(report.tables) > 6:
        tables = f"{len(report.tables)} tables"
    extra = ""
    if report.held or report.released:
        extra += f" · {report.held:,} held, {report.released:,} released"
    if report.segments or report.reassembled:
        extra += (
            f" · {report.segments:,} segments, {report.reassembled:,} split messages reassembled"
        )
    slowest = report.slowest_stage
    if slowest is not None:
        extra += f" · slowest stage {slowest[0]} {slowest[1]:.1f}s"
    undelivered = f" · {report.undelivered:,} undelivered" if report.undelivered else ""
    if report.skipped_messages:
        n = sum(report.skipped_messages.values())
        why = " ".join(f"{k}={v:,}" for k, v in sorted(report.skipped_messages.items()))
        extra += f" · {n:,} message(s) without a change skipped ({why})"
    if report.skipped:
        lost = ", ".join(f"{tp} {span}" for tp, span in sorted(report.skipped.items()))
        extra += f" · offsets no longer in Kafka, skipped: {lost}"
    if report.maintenance:
        extra += f" · maintenance: {'; '.join(report.maintenance)}"
    head = f"{report.source} batch" if source and report.source else "batch"
    return (
        f"{head} {report.batch_id}: {report.events:,} events ({ops or 'none'}) · "
        f"{report.applied:,} applied · {report.duplicates:,} duplicates · "
        f"{report.stale:,} stale · {report.conflicts:,} conflicts · "
        f"{report.dead_lettered:,} dead-lettered{undelivered} · tables {tables} · "
        f"{rate_text(report.events, report.seconds)} events/s in {report.seconds:.1f}s{extra}"
    )


#: Exit statuses of a run, for schedulers.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_DEAD_LETTERS = 3


@dataclass(repr=False)
class RunResult:
    """What a run did: the batch reports of every source (totals over all, the most recent
    reports themselves), and whether it ended on a failure (the exception) or was stopped."""

    reports: Reports = field(default_factory=Reports)
    failure: BaseException | None = None
    stopped: bool = False

    def __repr__(self) -> str:
        failure = f", failure={str(self.failure)!r}" if self.failure is not None else ""
        return (
            f"RunResult(batches={self.reports.batches}, events={self.events}, "
            f"dead_lettered={self.dead_lettered}, "
            f"exit_status={self.exit_status}{failure}{', stopped' if self.stopped else ''})"
        )

    @property
    def events(self) -> int:
        return self.reports.events

    @property
    def dead_lettered(self) -> int:
        """Dead letters the run wrote (undelivered events included)."""
        return self.reports.dead_lettered

    @property
    def exit_status(self) -> int:
        """0 every message applied; 3 some were dead-lettered; 1 the run failed."""
        if self.failure is not None:
            return EXIT_FAILED
        return EXIT_DEAD_LETTERS if self.dead_lettered else EXIT_OK

    def summary(self) -> str:
        """The final line of a run."""
        head = (
            f"done: {self.reports.batches} batch(es), {self.events:,} events, "
            f"{self.dead_lettered:,} dead-lettered"
        )
        if self.failure is not None:
            return f"failed: {head.removeprefix('done: ')}; {self.failure}"
        if self.dead_lettered:
            head += " (exit status 3: see cdcflow dead-letters)"
        return head + (" · stopped" if self.stopped else "")
