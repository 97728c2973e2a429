"""``make bench``: throughput and scaling as ratios against baselines run in the same process.

(a) decode: savegress JSON lines → canonical events (binaryFile + mapInArrow) vs
    ``spark.read.text`` + ``from_json`` with an explicit schema, same files, both hashing
    every decoded field (``bench/decoding.py``).
(b) end to end: events/s into an Iceberg replica vs a hand-written minimal pipeline
    (``from_json`` + ``row_number`` dedup + one ``MERGE INTO``, no guards), same workload.
(c) growth: time of one fixed batch of changes against a replica of S rows and of 100×S rows
    (both ``bench/e2e.py``).
(d) receiver: acknowledged requests/s and p50/p99 latency of ``cdcflow serve`` (signed unified
    endpoint, decode + durable landing: temp file, flush, rename, folder flush, the flushes of
    concurrent requests shared, and its replay journal) vs a minimal ``http.server`` receiver
    that makes the same durable write for each request on its own (temp file, fsync, rename,
    folder fsync) and nothing else, both in this process under the same N concurrent
    keep-alive clients and the same signed bodies; and
    durable events/s of its gRPC endpoint (streams of ``CDCEvent`` messages, bearer token) vs
    a minimal grpcio server that only writes each stream to a file, same clients and calls
    (``bench/receiver.py``).
(e) many tables: one batch of 20,000 events over 100 existing tables, in a running ``--follow``
    pipeline (steady state: the median of three batches) and as the batch of a
    new run, vs the hand-written per-table pipeline (parse once, then per table ``row_number``
    + one ``MERGE``, sequential, warm, the median of the same three batches); the steady
    batch's Spark jobs and SQL executions. Both sides are warmed by two batches first.
(f) small continuous batches: the same for one table.
(g) parallel_tables: the steady batch of (e) with 1, 2 and 4 tables written at a time.
(h) history: the steady batch of (f) into an scd2 table vs a hand-written SCD2 MERGE
    ((e)–(h): ``bench/shapes.py``).
(k) Kafka, one table: the steady batch of 200,000 events read from a topic of a broker started
    here, vs the hand-written job reading the same offsets with Spark's Kafka source.
(k') Kafka, 100 tables: the shape of (e) read from a topic (``bench/kafka_topics.py``).
(m) soak: 100 batches (``BENCH_SOAK_BATCHES``) of 1,000 events over 10 tables in one
    ``--follow`` run: the median batch time of the last tenth (at most 100 batches) over the
    first after a warm-up; every tenth, one replica's files, snapshots, metadata and storage
    bytes and a full read of it; at the end the replicas against the oracle. Its figures go to
    ``soak`` in bench.json, or ``soak_off`` with ``BENCH_MAINTENANCE=off`` (``bench/soak.py``).
(l) freshness: the live stack (PostgreSQL → Debezium → Kafka → ``cdcflow run --follow``,
    :mod:`cdcflow.testing.live`) without faults at 3 × 12, 3 × 50 and 3 × 200 transactions/s
    (``BENCH_FRESHNESS_RATES``, ``BENCH_FRESHNESS_MINUTES``: 2 each): end-to-end lag median,
    p95 and max, and a steady batch's seconds, stages and Spark jobs (``bench/freshness.py``).
(n) months of files: a steady batch of 1,000 events beside 1,000 processed files, beside
    200,000 (``BENCH_MONTHS_FILES``) left where they landed, and beside 200,000 read by a
    source that archives what it processed (``archive:``) (``bench/months.py``).
(p) peer: Flink SQL's Debezium → Iceberg upsert job and ``cdcflow run --follow`` on one set of
    Debezium topics, one after the other: catch-up, steady lag, faults, reads after N commits
    (``bench/peer.py``, ``docs/peer.md``); Flink in a venv of its own, skipped with one line
    where it cannot be installed.
(s) connect: the same batches of change rows applied by ``cdc.apply_changes`` on a classic
    session and over a local Spark Connect server, paired (``bench/connect.py``).
``BENCH_FORMAT=3`` makes every table format 3 (deletion vectors), cdcflow's and the
hand-written jobs' alike; ``BENCH_MAINTENANCE=off`` turns cdcflow's maintenance off.

The workloads every case writes are in ``bench/common.py``, the hand-written jobs in
``bench/baselines.py``, cdcflow's side of a case (configuration, a follower timing each batch
and its Spark jobs) in ``bench/runner.py``.

Results: ``bench/results/bench.json`` and ``bench/results/bench.png`` (``bench/chart.py``).
Sizes scale with the environment variable ``BENCH_SCALE`` (default 1.0). ``python -m bench
PART...`` runs some cases (decode, e2e, growth, receiver, many, small, parallel, history,
kafka, soak, freshness, months, peer, connect); the others' figures in bench.json are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.chart import chart
from bench.common import FORMAT, RESULTS, SCALE
from bench.decoding import bench_decode, decode_line
from bench.e2e import bench_end_to_end, bench_growth
from bench.kafka_topics import bench_kafka
from bench.receiver import bench_receiver, receiver_line, receiver_only
from bench.shapes import bench_parallel, bench_shape, shape_line
from bench.soak import bench_soak, soak_line

if TYPE_CHECKING:
    pass

#: parallel_tables values (g) compares (``BENCH_PARALLEL=4,8`` to try others).
CHOICES = tuple(int(x) for x in os.environ.get("BENCH_PARALLEL", "1,2,4").split(","))

PARTS = (
    "decode",
    "e2e",
    "growth",
    "receiver",
    "many",
    "small",
    "parallel",
    "history",
    "kafka",
    "soak",
    "freshness",
    "months",
    "peer",
    "connect",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "parts",
        nargs="*",
        choices=("all", *PARTS),
        default=["all"],
        help="cases to run (default all); results of other cases in bench.json are kept",
    )
    chosen = set(parser.parse_args(argv).parts)
    if "all" in chosen:
        chosen = set(PARTS)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "bench.json"
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    results.update({"machine": {"cores": os.cpu_count()}, "scale": SCALE})
    if "freshness" in chosen:
        # the live stack, each rate in a process of its own, before this process starts Spark
        from bench.freshness import run_rates

        print("(l) freshness on the live stack, no faults:", flush=True)
        results["freshness"] = run_rates()
        chosen.discard("freshness")
    if "connect" in chosen:  # a classic session and a Spark Connect server of its own
        from bench.connect import run as run_connect

        print("(s) cdc.apply_changes over Spark Connect against a classic session:", flush=True)
        results["connect"] = run_connect()
        chosen.discard("connect")
    if "peer" in chosen:  # services, Flink and cdcflow as processes of their own
        from bench.peer import run as run_peer

        results["peer"] = run_peer()
        chosen.discard("peer")
    if not chosen:
        pass
    elif chosen == {"receiver"}:
        results["receiver"] = receiver_only()
    else:
        import pyspark

        from cdcflow.spark.jars import ICEBERG_VERSION, iceberg_runtime
        from cdcflow.spark.session import SparkSettings, build_session

        # BENCH_ICEBERG=1.11.0: that Iceberg release's Spark runtime instead of cdcflow's
        iceberg = os.environ.get("BENCH_ICEBERG")
        packages = None
        if iceberg:
            packages = iceberg_runtime(pyspark.__version__).rsplit(":", 1)[0] + f":{iceberg}"
        results["versions"] = {
            "spark": pyspark.__version__,
            "iceberg": iceberg or ICEBERG_VERSION,
            "format": FORMAT,
        }
        print(f"Spark {pyspark.__version__}, Iceberg {iceberg or ICEBERG_VERSION}", flush=True)
        root = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
        try:
            spark = build_session(
                SparkSettings(
                    warehouse=str(root / "warehouse"),
                    shuffle_partitions=4,
                    iceberg_packages=packages,
                )
            )
            _run_spark_parts(spark, root, chosen, results)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    out.write_text(json.dumps(results, indent=2))
    chart(results, RESULTS / "bench.png")
    print(f"results: {out}, {RESULTS / 'bench.png'}")
    return 0


def _run_spark_parts(spark: Any, root: Path, chosen: set[str], results: dict[str, Any]) -> None:
    if "decode" in chosen:
        results["decode"] = bench_decode(spark, root, int(400_000 * SCALE))
        print(decode_line(results["decode"]), flush=True)
    if "e2e" in chosen:
        e = results["end_to_end"] = bench_end_to_end(spark, root, int(200_000 * SCALE))
        print(
            f"(b) end to end: cdcflow {e['ours_events_per_s']:,.0f} events/s, hand-written "
            f"{e['baseline_events_per_s']:,.0f} events/s, ratio {e['ratio']:.2f}× "
            f"(rows differing: {e['rows_differing_from_baseline']})",
            flush=True,
        )
    if "growth" in chosen:
        g = results["growth"] = bench_growth(spark, root, int(10_000 * SCALE), int(10_000 * SCALE))
        print(
            f"(c) growth: fixed batch {g['small_seconds']:.1f}s at {g['small_rows']:,} rows, "
            f"{g['large_seconds']:.1f}s at {g['large_rows']:,} rows, "
            f"ratio {g['cost_ratio_100x']:.2f}×",
            flush=True,
        )
    if "receiver" in chosen:
        results["receiver"] = bench_receiver(root, per_client=max(10, int(200 * SCALE)))
        print(receiver_line(results["receiver"]), flush=True)
    if "many" in chosen:
        m = results["many_tables"] = bench_shape(
            spark, root, "many", tables=100, events=int(20_000 * SCALE), keys=50
        )
        print(shape_line("e", m), flush=True)
    if "small" in chosen:
        f = results["small_batches"] = bench_shape(
            spark, root, "small", tables=1, events=int(20_000 * SCALE), keys=5_000
        )
        print(shape_line("f", f), flush=True)
    if "history" in chosen:
        h = results["history"] = bench_shape(
            spark, root, "history", tables=1, events=int(20_000 * SCALE), keys=5_000, mode="scd2"
        )
        print(shape_line("h", h), flush=True)
    if "kafka" in chosen:
        results["kafka"] = bench_kafka(spark, root)
    if "soak" in chosen:
        batches = int(os.environ.get("BENCH_SOAK_BATCHES", "100"))
        key = "soak" if os.environ.get("BENCH_MAINTENANCE", "on") == "on" else "soak_off"
        m = results[key] = bench_soak(spark, root, batches, 10, int(1_000 * SCALE))
        print(soak_line(m), flush=True)
    if "months" in chosen:
        from bench.months import bench_months, line

        results["months"] = bench_months(spark, root)
        print(line(results["months"]), flush=True)
    if "parallel" in chosen:
        print("(g) the steady batch of (e) by parallel_tables:", flush=True)
        results["parallel_tables"] = bench_parallel(
            spark, root, tables=100, events=int(20_000 * SCALE), keys=50, choices=CHOICES
        )


if __name__ == "__main__":
    sys.exit(main())
