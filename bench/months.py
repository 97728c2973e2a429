"""``python -m bench months``: a landing zone after months of files. A steady ``--follow`` batch
(one new file of :data:`EVENTS` events) beside :data:`FEW` processed files, beside
:data:`MANY` (a month at one file every 13 s) with the files left where they landed, and
beside the same :data:`MANY` once the source archives its processed files (``archive:``)."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from bench.runner import Follow, multi_cfg
from cdcflow.simulation.landing import land

#: Processed files of the small and of the large landing zone.
FEW = 1_000
MANY = int(os.environ.get("BENCH_MONTHS_FILES", "200000"))
#: Events of each steady batch's file, and steady batches timed (after two warm ones).
EVENTS = 1_000
STEADY = 5


def _event(i: int) -> bytes:
    return orjson.dumps(
        {
            "id": f"f{i}",
            "operation": "UPSERT",
            "table": "t000",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": f"{i >> 32:X}/{i & 0xFFFFFFFF:X}", "sequence": 0},
            "after": {
                "id": i % 5_000,
                "name": f"item-{i}",
                "qty": i % 1000,
                "price": "1.00",
                "updated_at": "2025-01-15T10:30:00.123456Z",
            },
        }
    )


def _fill(landing: Path, files: int) -> int:
    """``files`` one-event files in sub-folders of a thousand (as producers date them);
    returns the next event number."""
    for i in range(files):
        folder = landing / f"d{i // 1000:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:07d}.jsonl").write_bytes(_event(i + 1) + b"\n")
    return files + 1


def _steady(spark: Any, cfg: Any, landing: Path, first: int) -> tuple[list[float], int]:
    """Trigger seconds of :data:`STEADY` batches of one new file each, after two warm ones."""
    follow = Follow(spark, cfg)
    out: list[float] = []
    n = first
    try:
        for b in range(2 + STEADY):
            data = b"\n".join(_event(n + i) for i in range(EVENTS)) + b"\n"
            name = landing / f"new{b:04d}-{n}.jsonl"
            n += EVENTS
            seconds, _ = follow.batch(partial(land, name, data))
            if b >= 2:
                out.append(seconds)
            if cfg.sources[0].archive:
                # the archiving of the batch before runs beside the next one: let it end
                _drained(landing)
    finally:
        follow.stop()
    return out, n


def _drained(landing: Path, timeout: float = 1800.0) -> None:
    """Wait until the landing zone holds at most the newest file (the rest archived)."""
    deadline = time.monotonic() + timeout
    while sum(1 for p in landing.rglob("*.jsonl")) > 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the processed files were not archived")
        time.sleep(1.0)


def bench_months(spark: Any, root: Path) -> dict[str, Any]:
    """The steady batch beside few and many processed files, archived or not."""
    from cdcflow.pipeline.query import Pipeline

    out: dict[str, Any] = {"few_files": FEW, "many_files": MANY, "events_per_batch": EVENTS}
    # Spark archives the files of the batches committed with ``archive:`` on, so the archived
    # landing zone has it from its first batch (files read before stay where they are)
    for label, files in (("few", FEW), ("many", MANY), ("many_archived", MANY)):
        landing = root / f"months_{label}"
        cfg = multi_cfg(root, f"bench_months_{label}", landing, 1)
        if label == "many_archived":
            src = cfg.sources[0].model_copy(update={"archive": str(root / "months_archive")})
            cfg = cfg.model_copy(update={"sources": [src]})
        n = _fill(landing, files)
        t = time.perf_counter()
        Pipeline(cfg, spark).run()
        out[f"{label}_load_seconds"] = time.perf_counter() - t
        seconds, n = _steady(spark, cfg, landing, n)
        out[f"{label}_steady_seconds"] = statistics.median(seconds)
        out[f"{label}_steady_batches_seconds"] = seconds
        shutil.rmtree(landing, ignore_errors=True)
    out["ratio_many_to_few"] = out["many_steady_seconds"] / out["few_steady_seconds"]
    out["ratio_many_archived_to_few"] = (
        out["many_archived_steady_seconds"] / out["few_steady_seconds"]
    )
    return out


def line(m: dict[str, Any]) -> str:
    """The case's figures as a line."""
    return (
        f"(n) months of files: a steady batch of {m['events_per_batch']:,} events beside "
        f"{m['few_files']:,} processed files {m['few_steady_seconds']:.2f}s, beside "
        f"{m['many_files']:,} {m['many_steady_seconds']:.2f}s "
        f"({m['ratio_many_to_few']:.2f}×), the same archived "
        f"{m['many_archived_steady_seconds']:.2f}s ({m['ratio_many_archived_to_few']:.2f}×)"
    )
