"""``python -m bench freshness``: the live stack — PostgreSQL → Debezium's connector in Kafka
Connect → Kafka → ``cdcflow run --follow`` (:mod:`cdcflow.testing.live`) — without faults, at
several rates: the end-to-end lag (a commit in PostgreSQL → visible in the replica) and what a
steady batch costs, stage by stage and in Spark jobs. Each rate runs in a process of its own
(its services, its pipeline, a session for the checks), one after the other."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Transactions per second of each of the workload's 3 sessions, one run per rate.
RATES: tuple[float, ...] = tuple(
    float(r) for r in os.environ.get("BENCH_FRESHNESS_RATES", "12,50,200").split(",")
)
#: Minutes of workload per rate.
MINUTES = float(os.environ.get("BENCH_FRESHNESS_MINUTES", "2"))
#: Batches at the start of a run that read the connector's snapshot, left out of "steady".
FIRST_BATCHES = 2
#: The lag a rate must keep (p95 once running, seconds) to count as sustained.
SUSTAINED_P95 = 10.0


def run_rates(rates: Sequence[float] = RATES, minutes: float = MINUTES) -> dict[str, Any]:
    """Each rate in a child process; the figures of all of them."""
    out: dict[str, Any] = {"minutes": minutes, "sessions": 3, "rates": []}
    for rate in rates:
        folder = Path(tempfile.mkdtemp(prefix="cdcflow-fresh-"))
        result = folder / "result.json"
        try:
            cmd = [sys.executable, "-m", "bench.freshness", "--rate", str(rate)]
            cmd += ["--minutes", str(minutes), "--root", str(folder), "--out", str(result)]
            done = subprocess.run(cmd, cwd=Path(__file__).parent.parent, check=False)
            if done.returncode != 0 or not result.exists():
                out["rates"].append({"tx_per_second": 3 * rate, "failed": done.returncode})
                print(f"  freshness at 3 × {rate:g} tx/s failed ({done.returncode})", flush=True)
                continue
            found = json.loads(result.read_text())
            out["rates"].append(found)
            print(line(found), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    kept = [
        r for r in out["rates"] if r.get("equal") and r.get("steady_lag_p95", 1e9) <= SUSTAINED_P95
    ]
    out["highest_sustained_tx_per_second"] = max((r["tx_per_second"] for r in kept), default=None)
    return out


def line(r: Mapping[str, Any]) -> str:
    """One rate's figures as a line."""
    steady = r["steady"]
    stages = ", ".join(f"{k} {v:.2f}" for k, v in steady["stages"].items() if v >= 0.005)
    return (
        f"  {r['tx_per_second']:g} tx/s: lag median {r['lag_median']:.1f}s, p95 "
        f"{r['lag_p95']:.1f}s, max {r['lag_max']:.1f}s over {r['transactions']} transactions "
        f"(once running: median {r['steady_lag_median']:.1f}s, p95 {r['steady_lag_p95']:.1f}s "
        f"over {r['steady_transactions']}); "
        f"steady batch {steady['seconds']:.2f}s ({steady['events']:.0f} events, "
        f"{steady['jobs']:.0f} Spark jobs: {stages}); "
        + ("every replica equal" if r["equal"] else "REPLICAS DIFFER")
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """A quantile of sorted values, as the live run's report takes it."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _jobs_per_batch(events: Path) -> dict[int, int]:
    """Spark jobs of each micro-batch of the pipeline's event log: the jobs submitted while a
    batch's execution ran (those of the batch's writes on other threads carry no batch id)."""
    logs = [p for p in events.rglob("events_*") if p.is_file()]
    batches: list[tuple[int, int]] = []  # the root executions' (start, end)
    jobs: list[int] = []
    starts: dict[int, int] = {}
    for path in logs:
        for text in path.read_text().splitlines():
            e = json.loads(text)
            kind = e["Event"]
            if kind.endswith("SQLExecutionStart"):
                # a micro-batch's own execution: a root one, described as its streaming query
                text = e.get("description") or ""
                if e.get("rootExecutionId") == e["executionId"] and "\nrunId = " in text:
                    starts[e["executionId"]] = e["time"]
            elif kind.endswith("SQLExecutionEnd") and e["executionId"] in starts:
                batches.append((starts[e["executionId"]], e["time"]))
            elif kind == "SparkListenerJobStart":
                jobs.append(e["Submission Time"])
    batches.sort()
    return {i: sum(a <= t <= b for t in jobs) for i, (a, b) in enumerate(batches)}


def measure(rate: float, minutes: float, root: Path) -> dict[str, Any]:
    """One live run without faults at ``rate`` transactions/s per session."""
    from cdcflow.testing.live.report import Plan
    from cdcflow.testing.live.scenario import LiveRun
    from cdcflow.testing.live.workload import Settings

    events = root / "events"
    events.mkdir(parents=True)
    plan = Plan(
        duration=minutes * 60,
        connect_kills=0,
        cdcflow_kills=0,
        broker_restarts=0,
        settings=Settings(tx_per_second=rate),
    )
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": str(events),
    }
    run = LiveRun(root, plan, log=lambda s: print(f"    {s}", flush=True), conf=conf)
    sessions: list[Any] = []

    def spark() -> Any:
        import cdcflow.api as cdc

        sessions.append(cdc.session(str(root / "pipeline.yaml")))
        return sessions[-1]

    started = time.monotonic()
    report = run.run(spark)
    if not report.ok:  # what differs, in the run's own words
        print("\n".join(f"    {line}" for line in report.lines()), flush=True)
    rows = (
        sessions[-1]
        .sql(
            "SELECT batch_id, events, seconds, stages, finished_at FROM "
            f"cdc.{run.namespace}__cdcflow.batches "
            "ORDER BY batch_id"
        )
        .collect()
        if sessions
        else []
    )
    jobs = _jobs_per_batch(events)
    steady = [r for r in rows if r["batch_id"] >= FIRST_BATCHES and r["events"]]
    names = sorted({k for r in steady for k in (r["stages"] or {})})
    # transactions committed once the start's batches were done (the JVM's start and the
    # connector's snapshot left out): what a pipeline that has been running sees
    warm = next((r["finished_at"] for r in rows if r["batch_id"] == FIRST_BATCHES - 1), None)
    steady_lags = sorted(
        lag
        for at, lag in zip(report.lag_commits, report.lags, strict=True)
        if warm is not None and at.astimezone(dt.UTC).replace(tzinfo=None) >= warm
    )
    return {
        "tx_per_second": 3 * rate,
        "transactions": len(report.lags),
        "lag_median": report.lag(0.5),
        "lag_p95": report.lag(0.95),
        "lag_max": max(report.lags) if report.lags else float("nan"),
        "steady_lag_median": _quantile(steady_lags, 0.5),
        "steady_lag_p95": _quantile(steady_lags, 0.95),
        "steady_transactions": len(steady_lags),
        "equal": report.ok,
        "batches": len(rows),
        "steady": {
            "batches": len(steady),
            "seconds": _median([r["seconds"] for r in steady]),
            "events": _median([r["events"] for r in steady]),
            "jobs": _median([jobs[r["batch_id"]] for r in steady if r["batch_id"] in jobs]),
            "stages": {
                n: _median([(r["stages"] or {}).get(n, 0.0) for r in steady]) for n in names
            },
        },
        "connector_catch_up_seconds": report.connector_catch_up,
        "seconds": time.monotonic() - started,
    }


def main(argv: list[str] | None = None) -> int:
    """One rate (the child process of :func:`run_rates`)."""
    parser = argparse.ArgumentParser(prog="python -m bench.freshness")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--minutes", type=float, default=MINUTES)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = measure(args.rate, args.minutes, args.root)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
