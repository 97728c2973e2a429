"""cdcflow's side of a case: its pipeline configuration, a follower that runs its streaming
query batch by batch and reads the Spark jobs each batch ran, and best-of timing."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import FORMAT, TYPES

if TYPE_CHECKING:
    pass


def best_of(fn: Any, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def pipeline_cfg(root: Path, name: str, landing: Path) -> Any:
    from cdcflow.config import load_config

    return load_config(
        {
            "pipeline": name,
            "checkpoint": str(root / f"ck_{name}"),
            "namespace": name,
            "catalog": {"name": "cdc", "warehouse": str(root / "warehouse")},
            "sources": [
                {
                    "name": "s",
                    "path": str(landing),
                    "dialect": "savegress",
                    "keys": {"items": ["id"]},
                    "types": TYPES,
                }
            ],
        }
    )


def multi_cfg(
    root: Path,
    name: str,
    landing: Path,
    tables: int,
    follow: str = "1s",
    parallel: int = 2,
    mode: str = "merge",
    kafka: dict[str, Any] | None = None,
) -> Any:
    from cdcflow.config import load_config

    names = [f"t{t:03d}" for t in range(tables)]
    where: dict[str, Any] = {"kafka": kafka} if kafka else {"path": str(landing)}
    return load_config(
        {
            "pipeline": name,
            "tables": {"default": {"mode": mode, "table_properties": {"format-version": FORMAT}}},
            "maintenance": os.environ.get("BENCH_MAINTENANCE", "on"),
            "checkpoint": str(root / f"ck_{name}"),
            "namespace": name,
            "catalog": {"name": "cdc", "warehouse": str(root / "warehouse")},
            "follow_interval": follow,
            "parallel_tables": parallel,
            "sources": [
                {
                    "name": "s",
                    **where,
                    "dialect": "savegress",
                    "keys": {t: ["id"] for t in names},
                    "types": {t: TYPES["items"] for t in names},
                }
            ],
        }
    )


class Follow:
    """A pipeline kept open with ``--follow`` in a thread; each landed batch is timed by the
    streaming query's own trigger duration (listing, planning, the batch, the commit)."""

    def __init__(self, spark: Any, cfg: Any) -> None:
        from cdcflow.pipeline.query import Pipeline

        self.spark = spark
        self.reports: list[Any] = []
        self.work: Any = None  # Spark jobs and SQL executions of the last batch
        self.ready = threading.Event()
        self.pipeline = Pipeline(cfg, spark)
        self.thread = threading.Thread(
            target=self.pipeline.run, kwargs={"follow": True, "on_report": self._report}
        )
        self.thread.daemon = True
        self.thread.start()

    def _report(self, report: Any) -> None:
        self.reports.append(report)
        self.ready.set()

    def _query(self) -> Any:
        for _ in range(600):
            active = [q for q in self.pipeline.queries if q.isActive]
            if active:
                return active[0]
            time.sleep(0.1)
        raise RuntimeError("the follow query did not start")

    def batch(self, land: Callable[[], object]) -> tuple[float, Any]:
        """Land files, wait for their batch; (trigger seconds, report). The batch's Spark jobs
        and SQL executions are left in :attr:`work`."""
        from cdcflow.spark.work import work_so_far

        query = self._query()
        self.ready.clear()
        seen = len(self.reports)
        before = work_so_far(self.spark)
        land()
        while len(self.reports) <= seen:
            if not self.ready.wait(600):
                raise RuntimeError("no batch report within 600 s")
            self.ready.clear()
        report = self.reports[-1]
        for _ in range(600):
            progress = query.lastProgress
            if (
                progress
                and progress.get("batchId") == report.batch_id
                # an idle trigger reports the id of the next batch too, reading nothing
                and progress.get("numInputRows", 0) > 0
            ):
                self.work = work_so_far(self.spark) - before
                return progress["durationMs"]["triggerExecution"] / 1000, report
            time.sleep(0.05)
        raise RuntimeError("no progress for the batch")

    def read_to(
        self, produce: Callable[[], dict[int, tuple[int, int]]], topic: str
    ) -> tuple[float, Any, int]:
        """Produce records to ``topic`` and wait until the query has read them to the ends
        ``produce`` returns (a trigger may fire while they are being produced, and read part of
        them); (the trigger seconds of every batch that read them, the last one's report, how
        many batches)."""
        from cdcflow.spark.work import work_so_far

        query = self._query()
        seen = {p["batchId"] for p in query.recentProgress}
        before = work_so_far(self.spark)
        ends = produce()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            read = [
                p
                for p in query.recentProgress
                if p["batchId"] not in seen and p.get("numInputRows", 0) > 0
            ]
            last = read[-1] if read else None
            if last is not None and read_to(last, topic, ends):
                while not any(r.batch_id == last["batchId"] for r in self.reports):
                    if time.monotonic() > deadline:
                        raise RuntimeError("no batch report within 600 s")
                    time.sleep(0.05)
                self.work = work_so_far(self.spark) - before
                seconds = sum(p["durationMs"]["triggerExecution"] for p in read) / 1000
                report = next(r for r in self.reports if r.batch_id == last["batchId"])
                return seconds, report, len(read)
            time.sleep(0.1)
        raise RuntimeError(f"the query did not read {topic} to its ends within 600 s")

    def stop(self) -> None:
        self.pipeline.stop()
        self.thread.join(timeout=120)


def read_to(progress: dict[str, Any], topic: str, ends: dict[int, tuple[int, int]]) -> bool:
    """Whether a streaming progress' Kafka end offsets reach ``ends`` (partition → (first,
    end)) on ``topic``. PySpark 4 gives the offsets as the text of a dict, 3.5 as JSON."""
    import ast

    for source in progress.get("sources", []):
        offsets = source.get("endOffset")
        if isinstance(offsets, str):
            try:
                offsets = json.loads(offsets)
            except ValueError:
                offsets = ast.literal_eval(offsets)
        if isinstance(offsets, dict) and topic in offsets:
            got = {int(k): int(v) for k, v in offsets[topic].items()}
            return all(got.get(p, -1) >= end for p, (_, end) in ends.items())
    return False


def copier(src: Path, landing: Path) -> Callable[[], object]:
    return lambda: shutil.copy(src, landing / src.name)
