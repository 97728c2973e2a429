"""``cdcflow run --follow`` as a process of its own, started again when it exits by itself, killed
and stopped on request; and whether its checkpoint has read Kafka partitions to given ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    pass


class Follower:
    """``cdcflow run CONFIG --follow`` in a process group of its own, started again when it
    exits by itself."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was asked for."""
        return self._stop.is_set()

    def start(self) -> None:
        """Start the process, and the watch that starts it again when it exits by itself."""
        with self._lock:
            self._spawn()
        if self._watch is None:
            self._watch = threading.Thread(target=self._guard, name="live-follower", daemon=True)
            self._watch.start()

    def _spawn(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdcflow", "run", str(self.config), "--follow"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _guard(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self.proc is not None and self.proc.poll() is not None:
                    self.runs.append(f"exited by itself with status {self.proc.returncode}")
                    self._spawn()

    def kill(self) -> None:
        """SIGKILL the process group (the driver and its JVM), then start it again."""
        with self._lock:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.runs.append("killed (SIGKILL)")
            self._spawn()

    def stop(self, timeout: float = 120.0) -> None:
        """SIGTERM: the run stops after the batch in progress."""
        self._stop.set()
        if self._watch is not None:
            self._watch.join()
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                return
            self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(timeout)
                self.runs.append(f"stopped (SIGTERM), status {status}")
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.runs.append("did not stop on SIGTERM: killed")


def applied(checkpoint: Path, ends: Mapping[tuple[str, int], int]) -> bool:
    """Whether the ``cdcflow run`` of ``checkpoint`` committed a batch that read every
    Kafka partition of ``ends`` ((topic, partition) → end offset) to its end."""
    folders = list((checkpoint / "sources").glob("*/query"))
    if not folders:
        return False
    query = folders[0]
    commits = [int(p.name) for p in (query / "commits").glob("[0-9]*")]
    if not commits:
        return False
    lines = (query / "offsets" / str(max(commits))).read_text().splitlines()
    try:
        read = orjson.loads(lines[2])
    except (IndexError, orjson.JSONDecodeError):
        return False
    return all(read.get(topic, {}).get(str(p), 0) >= end for (topic, p), end in ends.items() if end)
