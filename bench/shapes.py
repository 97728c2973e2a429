"""The shapes users have, cdcflow against the hand-written job batch by batch: (e) many tables
in one batch, (f) small batches into one table, (h) an scd2 table, (g) (e) by
``parallel_tables``."""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.baselines import handwritten_history, handwritten_tables
from bench.common import STEADY_BATCHES, WARM_BATCHES, write_tables
from bench.runner import Follow, copier, multi_cfg

if TYPE_CHECKING:
    pass


def bench_shape(
    spark: Any,
    root: Path,
    label: str,
    tables: int,
    events: int,
    keys: int,
    mode: str = "merge",
) -> dict[str, Any]:
    """One batch of ``events`` events over ``tables`` existing tables: inside a running
    ``--follow`` pipeline (steady state: the median of :data:`STEADY_BATCHES` batches after
    :data:`WARM_BATCHES`), as the batch of a new run (scheduled use), and the hand-written per-table
    pipeline over the same files (warm, tables existing, the median of the same batches).
    ``mode``:
    the tables' mode (``scd2``: history tables, against the hand-written SCD2 MERGE)."""
    from cdcflow.pipeline.query import Pipeline

    landing = root / f"{label}_landing"
    files = root / f"{label}_files"
    n_load = max(events, tables * keys)
    lsn = write_tables(files / "0.jsonl", n_load, tables, keys, 1, 1, inserts_only=True)
    batches = []
    for b in range(1, 2 + WARM_BATCHES + STEADY_BATCHES):
        path = files / f"{b}.jsonl"
        lsn = write_tables(path, events, tables, keys, seed=b + 10, first_lsn=lsn)
        batches.append(path)

    def land(src: Path) -> Callable[[], object]:
        return copier(src, landing)

    landing.mkdir(parents=True)
    cfg = multi_cfg(root, f"bench_{label}", landing, tables, mode=mode)
    follow = Follow(spark, cfg)
    warm, steady = batches[:WARM_BATCHES], batches[WARM_BATCHES:-1]
    try:
        load_s, _ = follow.batch(land(files / "0.jsonl"))
        warm_s = [follow.batch(land(path))[0] for path in warm][-1]
        timed = [follow.batch(land(path)) for path in steady]
        steady_work = follow.work
    finally:
        follow.stop()
    steady_s = statistics.median(s for s, _ in timed)
    report = timed[-1][1]
    shutil.copy(batches[-1], landing / batches[-1].name)
    t = time.perf_counter()
    new_reports = Pipeline(cfg, spark).run().reports
    new_run_s = time.perf_counter() - t

    hand_ns = f"bench_{label}_hand"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS cdc.{hand_ns}")
    hand = handwritten_history if mode == "scd2" else handwritten_tables
    hand(spark, [files / "0.jsonl"], hand_ns, tables)
    for path in warm:
        hand(spark, [path], hand_ns, tables)
    hand_times = []
    for path in steady:
        t = time.perf_counter()
        hand(spark, [path], hand_ns, tables)
        hand_times.append(time.perf_counter() - t)
    hand_s = statistics.median(hand_times)
    return {
        "mode": mode,
        "tables": tables,
        "events": events,
        "hand_written_seconds": hand_s,
        "ours_steady_seconds": steady_s,
        "ours_steady_batches_seconds": [s for s, _ in timed],
        "hand_written_batches_seconds": hand_times,
        "ours_new_run_seconds": new_run_s,
        "ours_warmup_batch_seconds": warm_s,
        "ours_first_load_seconds": load_s,
        "ratio_steady": steady_s / hand_s,
        "ratio_new_run": new_run_s / hand_s,
        "slowest_stage": getattr(report, "slowest_stage", None),
        "steady_stages": dict(getattr(report, "stages", {}) or {}),
        "steady_spark_jobs": steady_work.jobs,
        "steady_sql_executions": steady_work.sql,
        "new_run_stages": dict(new_reports[-1].stages) if new_reports else {},
        "new_run_batches": len(new_reports),
    }


def bench_parallel(
    spark: Any, root: Path, tables: int, events: int, keys: int, choices: tuple[int, ...]
) -> dict[str, Any]:
    """(g) the steady-state batch of (e) with ``parallel_tables`` set to each of ``choices``
    (how the default was chosen)."""
    files = root / "par_files"
    lsn = write_tables(files / "0.jsonl", max(events, tables * keys), tables, keys, 1, 1, True)
    batches = []
    for b in range(1, 3):
        path = files / f"{b}.jsonl"
        lsn = write_tables(path, events, tables, keys, seed=b + 20, first_lsn=lsn)
        batches.append(path)
    out: dict[str, Any] = {"tables": tables, "events": events, "steady_seconds": {}}
    for p in choices:
        landing = root / f"par_landing_{p}"
        landing.mkdir(parents=True)
        cfg = multi_cfg(root, f"bench_par{p}", landing, tables, parallel=p)
        follow = Follow(spark, cfg)
        try:
            for src in (files / "0.jsonl", batches[0]):
                follow.batch(copier(src, landing))
            steady_s, _ = follow.batch(copier(batches[1], landing))
        finally:
            follow.stop()
        out["steady_seconds"][str(p)] = steady_s
        print(f"    parallel_tables={p}: {steady_s:.1f}s", flush=True)
    return out


def shape_line(tag: str, r: dict[str, Any]) -> str:
    return (
        f"({tag}) {r['events']:,} events over {r['tables']} existing "
        f"{'history table(s) (scd2)' if r.get('mode') == 'scd2' else 'table(s)'}: cdcflow "
        f"{r['ours_steady_seconds']:.1f}s steady (--follow), {r['ours_new_run_seconds']:.1f}s as "
        f"a new run; hand-written {r['hand_written_seconds']:.1f}s; time ratio "
        f"{r['ratio_steady']:.2f}× steady, {r['ratio_new_run']:.2f}× new run"
        + (
            f"; a steady batch ran {r['steady_spark_jobs']} Spark jobs in "
            f"{r['steady_sql_executions']} SQL executions"
            if "steady_spark_jobs" in r
            else ""
        )
    )
