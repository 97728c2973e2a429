"""What a pipeline looks like now: its sources (last batch, lag behind what they read) and
its tables (freshness, rows, last batch, dead letters, files), and its recent batches.

:class:`Status` is what the status page shows, what ``/status.json`` serves and what
``cdcflow status`` prints. A running pipeline builds it from its own batches
(:mod:`cdcflow.observe.metrics`); ``cdcflow status`` asks a running pipeline for it, and
otherwise builds it from the catalog and the checkpoint (:mod:`cdcflow.observe.survey`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

#: How far back the status page plots batches.
WINDOW_SECONDS = 3600.0


@dataclass(frozen=True)
class BatchPoint:
    """One batch as the plots show it."""

    source: str
    batch_id: int
    #: when it finished (Unix seconds)
    at: float
    seconds: float
    events: int


@dataclass(frozen=True)
class SourceStatus:
    """One source: what it reads, its last batch and how far behind it is."""

    source: str
    reads: str
    #: when its last batch finished (Unix seconds)
    last_batch: float | None = None
    batches: int = 0
    events: int = 0
    #: Kafka: offsets not read yet, over all partitions (``None``: not known)
    offsets_behind: int | None = None
    #: a landing zone: files not read yet
    files_waiting: int | None = None
    #: the producer's resolved watermark: seconds behind now (``None``: none sent)
    resolved_lag: float | None = None


@dataclass(frozen=True)
class TableStatus:
    """One replica: how fresh, how big, what failed."""

    table: str
    source: str = ""
    #: rows, from the current snapshot's summary (records less deleted ones)
    rows: int | None = None
    #: the newest source commit time the replica holds (Unix seconds)
    source_time: float | None = None
    #: when the last batch that wrote it finished (Unix seconds)
    last_batch: float | None = None
    dead_letters: int = 0
    data_files: int | None = None
    delete_files: int | None = None
    snapshots: int | None = None
    bytes: int | None = None

    def freshness(self, now: float) -> float | None:
        """Seconds from the newest source commit the replica holds to ``now``."""
        return None if self.source_time is None else max(0.0, now - self.source_time)


@dataclass(frozen=True)
class Status:
    """A pipeline now (see the module's text)."""

    pipeline: str
    namespace: str
    #: when it was taken (Unix seconds)
    at: float
    #: taken by the running pipeline (``True``), or read from the catalog
    live: bool = False
    #: the running pipeline's readiness (``None``: not running)
    ready: bool | None = None
    sources: tuple[SourceStatus, ...] = ()
    tables: tuple[TableStatus, ...] = ()
    #: batches of the last :data:`WINDOW_SECONDS`, oldest first
    recent: tuple[BatchPoint, ...] = ()
    dead_letters: int = 0

    def to_json(self) -> dict[str, Any]:
        """The status as a JSON document (times as Unix seconds, freshness per table)."""
        doc = asdict(self)
        for t, table in zip(doc["tables"], self.tables, strict=True):
            t["freshness"] = table.freshness(self.at)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Status:
        """A status from :meth:`to_json`."""

        def build(kind: type[Any], value: Mapping[str, Any]) -> Any:
            names = {f.name for f in fields(kind)}
            return kind(**{k: v for k, v in value.items() if k in names})

        return cls(
            **{
                **{k: v for k, v in doc.items() if k in {f.name for f in fields(cls)}},
                "sources": tuple(build(SourceStatus, s) for s in doc.get("sources", ())),
                "tables": tuple(build(TableStatus, t) for t in doc.get("tables", ())),
                "recent": tuple(build(BatchPoint, b) for b in doc.get("recent", ())),
            }
        )

    def dumps(self) -> str:
        """:meth:`to_json` as compact text."""
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)


def unix(value: dt.datetime | None) -> float | None:
    """A ``timestamp`` as Unix seconds (a naive one, as PySpark gives it, is local time)."""
    return None if value is None else value.timestamp()


@dataclass(frozen=True)
class TableWritten:
    """What the batch history says of one table."""

    source: str
    last_batch: float | None
    source_time: float | None


@dataclass
class History:
    """The batch history as status needs it: every batch (as a point), and per table who
    wrote it last, when, and the newest source time it holds."""

    batches: list[BatchPoint] = field(default_factory=list)
    tables: dict[str, TableWritten] = field(default_factory=dict)

    def add(
        self,
        source: str,
        batch_id: int,
        finished: float | None,
        seconds: float,
        events: int,
        tables: Iterable[str],
        times: Mapping[str, float | None],
    ) -> None:
        """One batch of the history (``tables``: those it wrote; ``times``: per table its
        newest source commit time)."""
        if finished is not None:
            self.batches.append(BatchPoint(source, batch_id, finished, seconds, events))
        for name in tables:
            known = self.tables.get(name)
            newest = times.get(name)
            if known is not None:
                if newest is None or (known.source_time or 0) > newest:
                    newest = known.source_time
                if (known.last_batch or 0) > (finished or 0):
                    self.tables[name] = TableWritten(known.source, known.last_batch, newest)
                    continue
            self.tables[name] = TableWritten(source, finished, newest)


def text_rows(
    status: Status,
) -> tuple[list[str], list[tuple[Any, ...]], list[str], list[tuple[Any, ...]]]:
    """The status as two tables: sources (columns, rows), then replicas."""

    def ago(at: float | None) -> float | None:
        return None if at is None else max(0.0, status.at - at)

    by_source = {s.source: s for s in status.sources}
    source_cols = ["source", "reads", "last batch", "batches", "events", "lag"]
    source_rows = [
        (s.source, s.reads, ago(s.last_batch), s.batches, s.events, lag_text(s))
        for s in status.sources
    ]
    table_cols = [
        "table",
        "rows",
        "freshness",
        "last batch",
        "lag",
        "dead letters",
        "data files",
        "delete files",
        "snapshots",
        "bytes",
    ]
    table_rows = [
        (
            t.table,
            t.rows,
            t.freshness(status.at),
            ago(t.last_batch),
            lag_text(by_source[t.source]) if t.source in by_source else "",
            t.dead_letters,
            t.data_files,
            t.delete_files,
            t.snapshots,
            t.bytes,
        )
        for t in status.tables
    ]
    return source_cols, source_rows, table_cols, table_rows


def lag_text(s: SourceStatus) -> str:
    """A source's lag in words: offsets or files not read yet, the resolved watermark."""
    parts = []
    if s.offsets_behind is not None:
        parts.append(f"{s.offsets_behind:,} offsets")
    if s.files_waiting is not None:
        parts.append(f"{s.files_waiting:,} files")
    if s.resolved_lag is not None:
        parts.append(f"resolved {duration(s.resolved_lag)} ago")
    return ", ".join(parts)


def duration(seconds: float | None) -> str:
    """``2d 03:04:05``, ``04:05``... for a number of seconds (empty: not known)."""
    if seconds is None:
        return ""
    sign = "-" if seconds < 0 else ""
    total = round(abs(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{days}d {clock}" if days else f"{sign}{clock}"
