"""The two systems the peer bench runs one after the other on the same topics: Flink SQL's
Debezium → Iceberg upsert job (PyFlink, in a venv of its own) and ``cdcflow run --follow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from bench.peer_stack import COLUMNS, INTERVAL, PREFIX, PROBE_COLUMNS, TABLES

if TYPE_CHECKING:
    pass


class System(Protocol):
    """One of the two systems as the bench drives it."""

    name: str
    namespace: str

    def start(self, interval: str = INTERVAL) -> None: ...
    def kill(self) -> None: ...
    def stop(self) -> None: ...
    def reached(self, ends: Mapping[tuple[str, int], int]) -> bool: ...
    def commits(self) -> int: ...


class Flink:
    """The Flink job as a child process of the peer's interpreter; a start after the first
    resumes from the latest retained checkpoint, as Flink's documentation says a job is
    resumed."""

    name = "flink"
    namespace = "peer_flink"

    def __init__(self, python: Path, root: Path, bootstrap: str, warehouse: Path) -> None:
        self.python = python
        self.root = root
        self.bootstrap = bootstrap
        self.warehouse = warehouse
        self.checkpoints = root / "flink-checkpoints"
        self.proc: subprocess.Popen[bytes] | None = None
        self.group = "peer-flink"

    def spec(self, interval: str) -> dict[str, Any]:
        """What :mod:`bench.peer_flink` runs."""
        latest = self.latest()
        return {
            "bootstrap": self.bootstrap,
            "group": self.group,
            "catalog": {
                "name": "cdc",
                "uri": f"jdbc:sqlite:{self.warehouse / 'catalog.db'}",
                "warehouse": str(self.warehouse),
            },
            "namespace": self.namespace,
            "tables": [
                {"name": t, "topic": f"{PREFIX}.public.{t}", "columns": list(cols), "key": [key]}
                for t, cols, key in (
                    *((t, COLUMNS, "id") for t in TABLES),
                    ("probe", PROBE_COLUMNS, "n"),
                )
            ],
            "parallelism": 2,
            "checkpoint_interval": interval,
            "checkpoints": str(self.checkpoints),
            "restore": str(latest) if latest else None,
        }

    def latest(self) -> Path | None:
        """The newest complete retained checkpoint."""
        found = [p.parent for p in self.checkpoints.glob("*/chk-*/_metadata")]
        return max(found, key=lambda p: int(p.name.split("-")[1])) if found else None

    def start(self, interval: str = INTERVAL) -> None:
        self.warehouse.mkdir(parents=True, exist_ok=True)
        spec = self.root / "flink-spec.json"
        spec.write_text(json.dumps(self.spec(interval), indent=1))
        with open(self.root / "flink.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.python), str(Path(__file__).with_name("peer_flink.py")), str(spec)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.root,
            )

    def kill(self) -> None:
        """SIGKILL the job's process group (the interpreter and its JVM)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def reached(self, ends: Mapping[tuple[str, int], int]) -> bool:
        """Whether the group's committed offsets (committed at each completed checkpoint,
        when the Iceberg sink commits) reached ``ends``."""
        from confluent_kafka import Consumer, TopicPartition

        if not self.alive():
            raise RuntimeError(f"the Flink job exited: see {self.root / 'flink.log'}")
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            parts = [TopicPartition(t, p) for (t, p), end in ends.items() if end]
            done = c.committed(parts, timeout=10)
        finally:
            c.close()
        return all(tp.offset >= ends[(tp.topic, tp.partition)] for tp in done)

    def commits(self) -> int:
        """The newest completed checkpoint's number (each one commits to Iceberg)."""
        latest = self.latest()
        return int(latest.name.split("-")[1]) if latest else 0


class Cdcflow:
    """``cdcflow run CONFIG --follow`` with a ``kafka:`` source, every other setting left at
    its default."""

    name = "cdcflow"
    namespace = "peer_cdcflow"

    def __init__(self, root: Path, bootstrap: str, warehouse: Path) -> None:
        self.root = root
        self.bootstrap = bootstrap
        self.warehouse = warehouse
        self.checkpoint = root / "cdcflow-checkpoint"
        self.follower: Any = None

    def config(self, interval: str = INTERVAL) -> Path:
        """The pipeline's configuration file."""
        cfg: dict[str, Any] = {
            "pipeline": self.namespace,
            "checkpoint": str(self.checkpoint),
            "namespace": self.namespace,
            "catalog": {"name": "cdc", "warehouse": str(self.warehouse)},
            "sources": [
                {
                    "name": "pg",
                    "dialect": "debezium",
                    "kafka": {
                        "bootstrap_servers": self.bootstrap,
                        "pattern": f"{PREFIX}\\.public\\..*",
                    },
                }
            ],
        }
        if interval != INTERVAL:
            cfg["follow_interval"] = interval
        path = self.root / "cdcflow.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def start(self, interval: str = INTERVAL) -> None:
        from cdcflow.testing.live.follower import Follower

        self.follower = Follower(self.config(interval), self.root / "cdcflow.log")
        self.follower.start()

    def kill(self) -> None:
        """SIGKILL the run's process group; the follower starts it again."""
        self.follower.kill()

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def reached(self, ends: Mapping[tuple[str, int], int]) -> bool:
        from cdcflow.testing.live.follower import applied

        return applied(self.checkpoint, ends)

    def commits(self) -> int:
        """The newest committed batch's number."""
        found = [int(p.name) for p in self.checkpoint.glob("sources/*/query/commits/[0-9]*")]
        return max(found, default=0)
