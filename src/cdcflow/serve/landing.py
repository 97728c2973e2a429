"""Durable landing of accepted bodies, the rejected area and the replay journal.

A body is acknowledged only after it is on disk under its final name: it is written to a temp
file whose name starts with ``_`` (the pipeline, like Spark's file source, ignores names
starting with ``_`` or ``.``), flushed, renamed into place with :func:`os.replace` and the
folder is flushed. A crash at any moment leaves either the complete file or nothing visible
(at worst a ``_…tmp`` file, removed at the next start).

Concurrent requests share their flushes (:class:`GroupCommit`): each writer flushes its own
temp file (concurrent ``fsync`` calls share the filesystem's journal commits), then the first
waiting writer renames every file flushed meanwhile into place and flushes each of their
folders once — one flush for many files; the replay journal's lines of concurrent requests are
appended and flushed together the same way. Each writer returns only once its own file (or
line) is durable.

Final names sort in landing order and are unique: UTC time to the microsecond (never going
backwards within a process), a counter and random hex:
``20250115T103000123456Z-0000000042-9f2c01ab.json``.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from cdcflow.errors import CdcflowError

REJECTED = "_rejected"
STATE = "_serve"
TMP_SUFFIX = ".tmp"


class DiskFull(CdcflowError):
    """The landing zone's disk is full (ENOSPC/EDQUOT): answer 503, retry later."""

    code = "DISK_FULL"


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(path: Path) -> None:
    if path.is_dir():
        return
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    for d in reversed(missing):
        fsync_dir(d.parent)


class Withdrawn(CdcflowError):
    """The writer withdrew a file after it was written and before it became visible."""

    code = "WITHDRAWN"


def write_durably(final: Path, data: bytes, still_wanted: Callable[[], bool] | None = None) -> None:
    """Write ``data`` to ``final`` by temp file + fsync + rename + folder fsync (the folder's
    shared with concurrent writers, see :data:`FILES`).

    ``still_wanted`` is asked after the flush and before the rename: ``False`` removes the temp
    file and raises :class:`Withdrawn` (nothing became visible). Raises :class:`DiskFull` when
    the disk is full; the temp file is removed on any failure.
    """
    _ensure_dir(final.parent)
    tmp = final.with_name(f"_{final.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            # each writer's own: concurrent fsyncs share the filesystem's journal commits
            os.fsync(fd)
        finally:
            os.close(fd)
        FILES.commit(_Landing(tmp, final, still_wanted))
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise DiskFull("the landing zone's disk is full") from None
        raise


T = TypeVar("T")


class GroupCommit(Generic[T]):
    """Flushes shared by concurrent writers: :meth:`commit` hands one item over and returns
    once a flush covered it (raising what that flush raised for it). A writer that finds no
    flush running flushes everything handed over until then, its own item included; the
    others wait for it, or for the next one."""

    def __init__(self, flush: Callable[[list[T]], list[BaseException | None]]) -> None:
        """``flush``: makes items durable; returns, per item, what failed for it."""
        self._flush = flush
        self._cond = threading.Condition()
        self._queue: list[tuple[object, T]] = []
        self._done: dict[object, BaseException | None] = {}
        self._flushing = False

    def commit(self, item: T) -> None:
        """Hand ``item`` over and wait until it is durable."""
        ticket = object()
        with self._cond:
            self._queue.append((ticket, item))
            while ticket not in self._done:
                if self._flushing:
                    self._cond.wait()
                    continue
                batch, self._queue = self._queue, []
                self._flushing = True
                self._cond.release()
                try:
                    outcomes = self._run([i for _, i in batch])
                finally:
                    self._cond.acquire()
                    self._flushing = False
                    self._cond.notify_all()
                for (done, _), outcome in zip(batch, outcomes, strict=True):
                    self._done[done] = outcome
            failure = self._done.pop(ticket)
        if failure is not None:
            raise failure

    def _run(self, batch: list[T]) -> list[BaseException | None]:
        try:
            return self._flush(batch)
        except BaseException as e:  # for every item of the batch: none of them is durable
            return [e] * len(batch)


@dataclass
class _Landing:
    """A temp file whose data is durable, waiting for its rename and its folder's flush."""

    tmp: Path
    final: Path
    still_wanted: Callable[[], bool] | None


def _land_files(batch: list[_Landing]) -> list[BaseException | None]:
    """Rename the wanted temp files into place, then flush each of their folders once."""
    outcomes: list[BaseException | None] = [None] * len(batch)
    folders: set[Path] = set()
    for i, item in enumerate(batch):
        try:
            if item.still_wanted is not None and not item.still_wanted():
                item.tmp.unlink()
                outcomes[i] = Withdrawn("the file was withdrawn before it became visible")
                continue
            os.replace(item.tmp, item.final)
            folders.add(item.final.parent)
        except Exception as e:
            outcomes[i] = e
    for folder in folders:
        fsync_dir(folder)
    return outcomes


#: The shared flushes of landed files.
FILES: GroupCommit[_Landing] = GroupCommit(_land_files)


class Names:
    """Unique file names that sort in the order they are taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_us = 0
        self._counter = 0

    def next(self, suffix: str = ".json") -> str:
        with self._lock:
            now_us = max(time.time_ns() // 1000, self._last_us)
            self._last_us = now_us
            self._counter += 1
            counter = self._counter
        stamp = dt.datetime.fromtimestamp(now_us / 1e6, tz=dt.UTC)
        return (
            f"{stamp:%Y%m%dT%H%M%S}{now_us % 1_000_000:06d}Z-{counter:010d}-"
            f"{secrets.token_hex(4)}{suffix}"
        )


class LandingZone:
    """The landing root: endpoint sub-folders, ``_rejected/`` and ``_serve/`` state."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names = Names()

    def prepare(self, subdirs: list[str]) -> int:
        """Create folders and remove temp files a crash left behind; returns how many."""
        _ensure_dir(self.root)
        removed = 0
        for sub in [*subdirs, REJECTED]:
            d = self.root / sub
            _ensure_dir(d)
            for p in d.rglob(f"_*{TMP_SUFFIX}"):
                try:
                    p.unlink()
                    removed += 1
                except OSError:
                    pass
        _ensure_dir(self.root / STATE)
        return removed

    def land(
        self,
        subdir: str,
        data: bytes,
        suffix: str = ".json",
        still_wanted: Callable[[], bool] | None = None,
    ) -> Path:
        """Land one accepted body durably; returns its final path (``still_wanted``: see
        :func:`write_durably`)."""
        final = self.root / subdir / self.names.next(suffix)
        write_durably(final, data, still_wanted)
        return final

    def reject(self, subdir: str, data: bytes, reason: dict[str, Any]) -> Path:
        """Keep a rejected body and a small JSON reason file under ``_rejected/<subdir>/``."""
        name = self.names.next("")
        folder = self.root / REJECTED / subdir
        body = folder / f"{name}.body"
        write_durably(body, data)
        write_durably(folder / f"{name}.reason.json", orjson.dumps(reason, default=str))
        return body


def _line(stamp: float, key: str) -> bytes:
    return f"{stamp:.3f} ".encode() + orjson.dumps(key) + b"\n"


class ReplayJournal:
    """Event ids seen inside a window, kept durably (``_serve/replay-<name>.log``, one
    ``<unix seconds> <id as JSON text>`` line each) so a restart does not forget them.

    The unified format does not sign its timestamp: only remembering signed ids for longer than
    the sender retries stops replays.
    """

    def __init__(self, path: Path, window: float) -> None:
        self.path = path
        self.window = window
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        self._pending: set[str] = set()
        self._lines: GroupCommit[bytes] = GroupCommit(self._append)
        self._load()

    def _load(self) -> None:
        now = time.time()
        if self.path.exists():
            for line in self.path.read_bytes().splitlines():
                stamp, _, rest = line.partition(b" ")
                try:
                    t = float(stamp)
                    key = orjson.loads(rest)
                except (ValueError, orjson.JSONDecodeError):
                    continue  # a torn last line after a crash
                if not isinstance(key, str):
                    continue
                if key and t >= now - self.window:
                    self._seen[key] = t
        # compact: rewrite only what is inside the window
        write_durably(self.path, b"".join(_line(t, k) for k, t in self._seen.items()))

    def claim(self, key: str) -> str:
        """``new`` (the caller lands it, then :meth:`commit` or :meth:`release`),
        ``duplicate`` (seen inside the window) or ``busy`` (being landed right now)."""
        now = time.time()
        with self._lock:
            t = self._seen.get(key)
            if t is not None and t >= now - self.window:
                return "duplicate"
            if key in self._pending:
                return "busy"
            self._pending.add(key)
            return "new"

    def commit(self, key: str) -> None:
        """Remember ``key`` durably (after its body landed); the lines of concurrent commits
        are appended and flushed together."""
        now = time.time()
        try:
            self._lines.commit(_line(now, key))
        finally:
            with self._lock:
                self._seen[key] = now
                self._pending.discard(key)
                if len(self._seen) > 1000 and len(self._seen) % 1000 == 0:
                    cutoff = now - self.window
                    self._seen = {k: v for k, v in self._seen.items() if v >= cutoff}

    def _append(self, lines: list[bytes]) -> list[BaseException | None]:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = memoryview(b"".join(lines))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        return [None] * len(lines)

    def release(self, key: str) -> None:
        """Forget a claim whose body did not land."""
        with self._lock:
            self._pending.discard(key)
