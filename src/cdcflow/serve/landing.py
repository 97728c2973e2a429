"""Durable landing of accepted bodies, the rejected area and the replay journal.

A body is acknowledged only after it is on disk under its final name: it is written to a temp
file whose name starts with ``_`` (the pipeline, like Spark's file source, ignores names
starting with ``_`` or ``.``), ``fsync``-ed, renamed into place with :func:`os.replace` and the
folder is ``fsync``-ed. A crash at any moment leaves either the complete file or nothing
visible (at worst a ``_…tmp`` file, removed at the next start).

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
from pathlib import Path
from typing import Any

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
    """Write ``data`` to ``final`` by temp file + fsync + rename + folder fsync.

    ``still_wanted`` is asked after the fsync and before the rename: ``False`` removes the temp
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
            os.fsync(fd)
        finally:
            os.close(fd)
        if still_wanted is not None and not still_wanted():
            tmp.unlink()
            raise Withdrawn("the file was withdrawn before it became visible")
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise DiskFull("the landing zone's disk is full") from None
        raise


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
        """Remember ``key`` durably (after its body landed)."""
        now = time.time()
        line = _line(now, key)
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                self._seen[key] = now
                self._pending.discard(key)
            if len(self._seen) > 1000 and len(self._seen) % 1000 == 0:
                cutoff = now - self.window
                self._seen = {k: v for k, v in self._seen.items() if v >= cutoff}

    def release(self, key: str) -> None:
        """Forget a claim whose body did not land."""
        with self._lock:
            self._pending.discard(key)
