"""Files landed the way a producer lands them: whole, and in the order they were written.

Each file is written aside and renamed into place, so a reader never sees part of one; its
modification time is set one millisecond or more after the previous landed file's. Spark's
file source takes files oldest first, and files written back to back often share a
millisecond (the resolution it reads), which leaves their order to the directory listing: a
test that lands one file per batch would otherwise see a different split of its batches from
one machine, or one run, to the next.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

_lock = threading.Lock()
_last_ms = [0]


def _next_ms() -> int:
    with _lock:
        ms = max(time.time_ns() // 1_000_000, _last_ms[0] + 1)
        _last_ms[0] = ms
        return ms


def land(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, modified after every file landed before it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"_tmp-{path.name}"
    tmp.write_bytes(data)
    ns = _next_ms() * 1_000_000
    os.utime(tmp, ns=(ns, ns))
    os.replace(tmp, path)
    return path


def append(path: Path, data: bytes) -> Path:
    """Add ``data`` to the end of a landed file, keeping its place in the landing order."""
    stat = path.stat()
    with path.open("ab") as f:
        f.write(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return path
