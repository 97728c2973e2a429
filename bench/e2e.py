"""(b) end to end against the hand-written job, and (c) a fixed batch's cost as the replica
grows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.baselines import handwritten
from bench.common import write_events
from bench.runner import pipeline_cfg

if TYPE_CHECKING:
    pass


def bench_end_to_end(spark: Any, root: Path, n: int) -> dict[str, float]:
    from cdcflow.pipeline.query import Pipeline

    folder = root / "e2e"
    write_events(folder, n, keys=max(1, n // 5), files=8)
    t = time.perf_counter()
    handwritten(spark, folder, "cdc.bench_hand.items")
    t_base = time.perf_counter() - t
    cfg = pipeline_cfg(root, "bench_e2e", folder)
    t = time.perf_counter()
    Pipeline(cfg, spark).run()
    t_ours = time.perf_counter() - t
    ours = "SELECT id, name, qty, price, updated_at FROM cdc.bench_e2e.items"
    hand = "SELECT id, name, qty, price, updated_at FROM cdc.bench_hand.items"
    same = spark.sql(
        f"SELECT count(*) AS n FROM (({ours} EXCEPT {hand}) UNION ALL ({hand} EXCEPT {ours}))"
    ).collect()[0]["n"]
    return {
        "events": n,
        "baseline_events_per_s": n / t_base,
        "ours_events_per_s": n / t_ours,
        "ratio": t_base / t_ours,
        "rows_differing_from_baseline": int(same),
    }


def bench_growth(spark: Any, root: Path, base_rows: int, batch: int) -> dict[str, float]:
    from cdcflow.pipeline.query import Pipeline

    out: dict[str, float] = {}
    for label, rows in (("small", base_rows), ("large", base_rows * 100)):
        landing = root / f"growth_{label}"
        write_events(landing / "load", rows, keys=0, files=16, inserts_only=True)
        cfg = pipeline_cfg(root, f"bench_growth_{label}", landing)
        Pipeline(cfg, spark).run()
        # the fixed batch: updates of random existing keys and new inserts
        write_events(landing / "batch", batch, keys=rows, files=2, seed=9, first_lsn=rows + 10)
        t = time.perf_counter()
        Pipeline(cfg, spark).run()
        out[f"{label}_rows"] = rows
        out[f"{label}_seconds"] = time.perf_counter() - t
    out["cost_ratio_100x"] = out["large_seconds"] / out["small_seconds"]
    return out
