"""``make bench``: throughput and scaling as ratios against baselines run in the same process.

(a) decode: savegress JSON lines → canonical events (binaryFile + mapInArrow) vs
    ``spark.read.text`` + ``from_json`` with an explicit schema, same files, both hashing
    every decoded field.
(b) end to end: events/s into an Iceberg replica vs a hand-written minimal pipeline
    (``from_json`` + ``row_number`` dedup + one ``MERGE INTO``, no guards), same workload.
(c) growth: time of one fixed batch of changes against a replica of S rows and of 100×S rows.
(d) receiver: acknowledged requests/s and p50/p99 latency of ``cdcflow serve`` (signed unified
    endpoint, decode + durable landing: temp file, flush, rename, folder flush, the flushes of
    concurrent requests shared, and its replay journal) vs a minimal ``http.server`` receiver
    that makes the same durable write for each request on its own (temp file, fsync, rename,
    folder fsync) and nothing else, both in this process under the same N concurrent
    keep-alive clients and the same signed bodies; and
    durable events/s of its gRPC endpoint (streams of ``CDCEvent`` messages, bearer token) vs
    a minimal grpcio server that only writes each stream to a file, same clients and calls.
(e) many tables: one batch of 20,000 events over 100 existing tables, in a running ``--follow``
    pipeline (steady state: the median of three batches) and as the batch of a
    new run, vs the hand-written per-table pipeline (parse once, then per table ``row_number``
    + one ``MERGE``, sequential, warm, the median of the same three batches); the steady
    batch's Spark jobs and SQL executions. Both sides are warmed by two batches first.
(f) small continuous batches: the same for one table.
(g) parallel_tables: the steady batch of (e) with 1, 2 and 4 tables written at a time.
(h) history: the steady batch of (f) into an scd2 table vs a hand-written SCD2 MERGE.
(k) Kafka, one table: the steady batch of 200,000 events read from a topic of a broker started
    here, vs the hand-written job reading the same offsets with Spark's Kafka source.
(k') Kafka, 100 tables: the shape of (e) read from a topic.
(m) soak: 100 batches (``BENCH_SOAK_BATCHES``) of 1,000 events over 10 tables in one
    ``--follow`` run: the median batch time of the last tenth (at most 100 batches) over the
    first after a warm-up; every tenth, one replica's files, snapshots, metadata and storage
    bytes and a full read of it; at the end the replicas against the oracle. Its figures go to
    ``soak`` in bench.json, or ``soak_off`` with ``BENCH_MAINTENANCE=off``.
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
``BENCH_FORMAT=3`` makes every table format 3 (deletion vectors), cdcflow's and the
hand-written jobs' alike; ``BENCH_MAINTENANCE=off`` turns cdcflow's maintenance off.

Results: ``bench/results/bench.json`` and ``bench/results/bench.png``. Sizes scale with the
environment variable ``BENCH_SCALE`` (default 1.0). ``python -m bench PART...`` runs some cases
(decode, e2e, growth, receiver, many, small, parallel, history, kafka, soak, freshness,
months, peer); the others' figures in bench.json are kept.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import grpc

RESULTS = Path(__file__).parent / "results"
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
#: The tables' Iceberg format version, cdcflow's and the hand-written jobs' alike
#: (``BENCH_FORMAT=3``: deletion vectors).
FORMAT = os.environ.get("BENCH_FORMAT", "2")
#: Steady batches timed per shape (the median counts), after a first load and
#: :data:`WARM_BATCHES` batches: both sides get faster over their first few batches as the JVM
#: compiles (cdcflow, 20,000 events into one table: 4.7, 4.1, 3.2 s over its 2nd to 4th batch).
STEADY_BATCHES = int(os.environ.get("BENCH_STEADY_BATCHES", "3"))
WARM_BATCHES = 2


def _lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def write_events(
    folder: Path,
    n: int,
    keys: int,
    files: int,
    seed: int = 1,
    first_lsn: int = 1,
    inserts_only: bool = False,
) -> None:
    """Savegress events over one table ``items`` (id, name, qty, price, updated_at)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_file = max(1, n // files)
    lsn = first_lsn
    alive: set[int] = set()
    out: list[bytes] = []
    file_no = 0
    for i in range(n):
        if inserts_only:
            k = keys + i
            op = "INSERT"
        else:
            k = rng.randrange(keys)
            op = "UPDATE" if k in alive else "INSERT"
            if k in alive and rng.random() < 0.1:
                op = "DELETE"
        row = {
            "id": k,
            "name": f"item-{k}-{i}",
            "qty": rng.randrange(1000),
            "price": f"{rng.randrange(100000) / 100:.2f}",
            "updated_at": "2025-01-15T10:30:00.123456Z",
        }
        doc: dict[str, Any] = {
            "id": f"e{lsn}",
            "operation": op,
            "table": "items",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": _lsn(lsn), "sequence": 0},
        }
        if op == "DELETE":
            doc["before"] = row
            alive.discard(k)
        else:
            doc["after"] = row
            alive.add(k)
        lsn += 1
        out.append(orjson.dumps(doc))
        if len(out) >= per_file:
            (folder / f"{file_no:05d}.jsonl").write_bytes(b"\n".join(out) + b"\n")
            file_no += 1
            out = []
    if out:
        (folder / f"{file_no:05d}.jsonl").write_bytes(b"\n".join(out) + b"\n")


BASELINE_SCHEMA = (
    "id string, operation string, `table` string, source string, `timestamp` string, "
    "position struct<lsn:string, sequence:bigint>, "
    "before struct<id:bigint, name:string, qty:bigint, price:string, updated_at:string>, "
    "after struct<id:bigint, name:string, qty:bigint, price:string, updated_at:string>"
)
TYPES = {"items": {"price": "numeric(10,2)", "updated_at": "timestamptz"}}


def bench_decode(spark: Any, root: Path, n: int) -> dict[str, float]:
    """Decoded events/s against ``from_json``'s parsed rows/s on the same files. Both sides
    hash every parsed field; our row images are maps, which Spark hashes as their entries
    (``map_entries``). ``ratio_to_json`` is the same run hashing ``to_json`` of the maps
    instead, the consumer of earlier versions (it adds JSON writing to our side only)."""
    from cdcflow.decode.spark import decode_dataframe, read_raw
    from cdcflow.dialects.base import DialectOptions

    folder = root / "decode"
    write_events(folder, n, keys=n // 4, files=8)

    def baseline() -> None:
        df = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
        df.selectExpr("bit_xor(xxhash64(e.*)) AS h").collect()

    def ours(image: str) -> None:
        opts = DialectOptions(table_keys={"items": ("id",)}, column_types=TYPES)
        df = decode_dataframe(read_raw(spark, str(folder), streaming=False), "savegress", opts)
        df.selectExpr(
            f"bit_xor(xxhash64(id, sequence, operation, {image}(after), {image}(before), "
            "timestamp)) AS h"
        ).collect()

    baseline()  # warm up every path once
    ours("map_entries")
    t_base = _best(baseline)
    t_ours = _best(lambda: ours("map_entries"))
    t_json = _best(lambda: ours("to_json"))
    return {
        "events": n,
        "baseline_events_per_s": n / t_base,
        "ours_events_per_s": n / t_ours,
        "ratio": t_base / t_ours,
        "ours_to_json_events_per_s": n / t_json,
        "ratio_to_json": t_base / t_json,
    }


def _best(fn: Any, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _pipeline_cfg(root: Path, name: str, landing: Path) -> Any:
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


#: A PostgreSQL LSN (``16/B374D848``) as the number it stands for: as text ``0/FFFF`` sorts
#: after ``0/10000``
LSN_NUMBER = (
    "CAST(conv(split(e.position.lsn, '/')[0], 16, 10) AS bigint) * 4294967296 + "
    "CAST(conv(split(e.position.lsn, '/')[1], 16, 10) AS bigint)"
)


def handwritten(spark: Any, folder: Path, table: str) -> None:
    """The minimal pipeline people write by hand: dedup by row_number, one MERGE, no guards.
    Its events are ordered by the LSN's number (the (b) files span LSNs of several hex
    widths, where ordering by the text would keep older events)."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} (id bigint, name string, qty bigint, "
        "price decimal(10,2), updated_at timestamp) USING iceberg "
        f"TBLPROPERTIES ('format-version'='{FORMAT}', 'write.merge.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
    )
    src = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
    src.createOrReplaceTempView("bench_raw")
    spark.sql(f"""
        SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op, e.after.name AS name,
               e.after.qty AS qty, CAST(e.after.price AS decimal(10,2)) AS price,
               CAST(e.after.updated_at AS timestamp) AS updated_at,
               row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                  ORDER BY {LSN_NUMBER} DESC) AS rn
        FROM bench_raw
    """).where("rn = 1").createOrReplaceTempView("bench_latest")
    spark.sql(f"""
        MERGE INTO {table} t USING bench_latest s ON t.id = s.id
        WHEN MATCHED AND s.op = 'DELETE' THEN DELETE
        WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, price = s.price,
             updated_at = s.updated_at
        WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT (id, name, qty, price, updated_at)
             VALUES (s.id, s.name, s.qty, s.price, s.updated_at)
    """)


def bench_end_to_end(spark: Any, root: Path, n: int) -> dict[str, float]:
    from cdcflow.pipeline.query import Pipeline

    folder = root / "e2e"
    write_events(folder, n, keys=max(1, n // 5), files=8)
    t = time.perf_counter()
    handwritten(spark, folder, "cdc.bench_hand.items")
    t_base = time.perf_counter() - t
    cfg = _pipeline_cfg(root, "bench_e2e", folder)
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
        cfg = _pipeline_cfg(root, f"bench_growth_{label}", landing)
        Pipeline(cfg, spark).run()
        # the fixed batch: updates of random existing keys and new inserts
        write_events(landing / "batch", batch, keys=rows, files=2, seed=9, first_lsn=rows + 10)
        t = time.perf_counter()
        Pipeline(cfg, spark).run()
        out[f"{label}_rows"] = rows
        out[f"{label}_seconds"] = time.perf_counter() - t
    out["cost_ratio_100x"] = out["large_seconds"] / out["small_seconds"]
    return out


MULTI_COLUMNS = "id bigint, name string, qty bigint, price decimal(10,2), updated_at timestamp"


def write_tables(
    path: Path,
    n: int,
    tables: int,
    keys: int,
    seed: int,
    first_lsn: int,
    inserts_only: bool = False,
) -> int:
    """One JSON-lines file of ``n`` savegress events over tables ``t000``.. (10 % deletes of
    live keys); returns the next LSN."""
    rng = random.Random(seed)
    alive: set[tuple[int, int]] = set()
    if not inserts_only:
        alive = {(t, k) for t in range(tables) for k in range(keys)}
    out: list[bytes] = []
    lsn = first_lsn
    for i in range(n):
        if inserts_only:
            t, k = i % tables, i // tables
            op = "INSERT"
        else:
            t, k = rng.randrange(tables), rng.randrange(keys * 2)
            op = "UPDATE" if (t, k) in alive else "INSERT"
            if (t, k) in alive and rng.random() < 0.1:
                op = "DELETE"
        row = {
            "id": k,
            "name": f"item-{k}-{i}",
            "qty": rng.randrange(1000),
            "price": f"{rng.randrange(100000) / 100:.2f}",
            "updated_at": "2025-01-15T10:30:00.123456Z",
        }
        doc: dict[str, Any] = {
            "id": f"m{lsn}",
            "operation": op,
            "table": f"t{t:03d}",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": _lsn(lsn), "sequence": 0},
        }
        if op == "DELETE":
            doc["before"] = row
            alive.discard((t, k))
        else:
            doc["after"] = row
            alive.add((t, k))
        lsn += 1
        out.append(orjson.dumps(doc))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("_" + path.name)
    tmp.write_bytes(b"\n".join(out) + b"\n")
    tmp.rename(path)
    return lsn


def _multi_cfg(
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


def _hand_start(
    spark: Any, files: list[Path] | Any, namespace: str, tables: int, columns: str, view: str
) -> Any:
    """The hand-written jobs' start: their tables, and the batch parsed once (cached) as
    ``view``. ``files``: JSON-lines files, or a DataFrame of the lines (a string ``value``)."""
    for t in range(tables):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS cdc.{namespace}.t{t:03d} ({columns}) USING iceberg "
            f"TBLPROPERTIES ('format-version'='{FORMAT}', 'write.merge.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
        )
    lines = spark.read.text([str(f) for f in files]) if isinstance(files, list) else files
    src = lines.selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e").cache()
    src.createOrReplaceTempView(view)
    return src


def handwritten_tables(spark: Any, files: list[Path] | Any, namespace: str, tables: int) -> None:
    """What people write by hand for many tables: parse the batch once, then per table a
    row_number dedup and one MERGE, one table after another."""
    src = _hand_start(spark, files, namespace, tables, MULTI_COLUMNS, "bench_multi_raw")
    try:
        for t in range(tables):
            name = f"t{t:03d}"
            spark.sql(f"""
                SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op,
                       e.after.name AS name, e.after.qty AS qty,
                       CAST(e.after.price AS decimal(10,2)) AS price,
                       CAST(e.after.updated_at AS timestamp) AS updated_at,
                       row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                          ORDER BY e.position.lsn DESC) AS rn
                FROM bench_multi_raw WHERE e.`table` = '{name}'
            """).where("rn = 1").createOrReplaceTempView("bench_multi_latest")
            spark.sql(f"""
                MERGE INTO cdc.{namespace}.{name} t USING bench_multi_latest s ON t.id = s.id
                WHEN MATCHED AND s.op = 'DELETE' THEN DELETE
                WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, price = s.price,
                     updated_at = s.updated_at
                WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT *
            """)
    finally:
        src.unpersist()


HISTORY_COLUMNS = f"{MULTI_COLUMNS}, __START_AT string, __END_AT string, __CURRENT boolean"


def handwritten_history(spark: Any, files: list[Path], namespace: str, tables: int) -> None:
    """The SCD type 2 job people write by hand: the newest event per key of the batch, then one
    MERGE of a staged union that closes the current version and inserts the new one (a key's
    earlier events in the same batch, and events arriving late, are not kept as versions)."""
    src = _hand_start(spark, files, namespace, tables, HISTORY_COLUMNS, "bench_hist_raw")
    changed = "(t.name <=> s.name AND t.qty <=> s.qty AND t.price <=> s.price) = false"
    try:
        for t in range(tables):
            name = f"t{t:03d}"
            spark.sql(f"""
                SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op,
                       e.after.name AS name, e.after.qty AS qty,
                       CAST(e.after.price AS decimal(10,2)) AS price,
                       CAST(e.after.updated_at AS timestamp) AS updated_at,
                       e.position.lsn AS lsn,
                       row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                          ORDER BY e.position.lsn DESC) AS rn
                FROM bench_hist_raw WHERE e.`table` = '{name}'
            """).where("rn = 1").createOrReplaceTempView("bench_hist_latest")
            spark.sql(f"""
                MERGE INTO cdc.{namespace}.{name} t
                USING (
                    SELECT s.id AS merge_key, s.* FROM bench_hist_latest s
                    UNION ALL
                    SELECT NULL AS merge_key, s.* FROM bench_hist_latest s
                    JOIN cdc.{namespace}.{name} t ON t.id = s.id AND t.__CURRENT
                    WHERE s.op <> 'DELETE' AND {changed}
                ) s
                ON t.id = s.merge_key AND t.__CURRENT
                WHEN MATCHED AND (s.op = 'DELETE' OR {changed}) THEN
                    UPDATE SET __END_AT = s.lsn, __CURRENT = false
                WHEN NOT MATCHED AND s.op <> 'DELETE' THEN
                    INSERT (id, name, qty, price, updated_at, __START_AT, __END_AT, __CURRENT)
                    VALUES (s.id, s.name, s.qty, s.price, s.updated_at, s.lsn, NULL, true)
            """)
    finally:
        src.unpersist()


class _Follow:
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
            if last is not None and _read_to(last, topic, ends):
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


def _read_to(progress: dict[str, Any], topic: str, ends: dict[int, tuple[int, int]]) -> bool:
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
        return _copier(src, landing)

    landing.mkdir(parents=True)
    cfg = _multi_cfg(root, f"bench_{label}", landing, tables, mode=mode)
    follow = _Follow(spark, cfg)
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


def _copier(src: Path, landing: Path) -> Callable[[], object]:
    return lambda: shutil.copy(src, landing / src.name)


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
        cfg = _multi_cfg(root, f"bench_par{p}", landing, tables, parallel=p)
        follow = _Follow(spark, cfg)
        try:
            for src in (files / "0.jsonl", batches[0]):
                follow.batch(_copier(src, landing))
            steady_s, _ = follow.batch(_copier(batches[1], landing))
        finally:
            follow.stop()
        out["steady_seconds"][str(p)] = steady_s
        print(f"    parallel_tables={p}: {steady_s:.1f}s", flush=True)
    return out


def _produce_file(bootstrap: str, topic: str, path: Path) -> dict[int, tuple[int, int]]:
    """Each line of ``path`` produced to ``topic`` (key: table and id, as the unified format's
    Kafka form keys by table and primary key); the offsets written per partition
    (first, last + 1)."""
    from cdcflow.testing.kafka import KafkaRecord, produce

    records = []
    for line in path.read_bytes().splitlines():
        doc = orjson.loads(line)
        key = (doc.get("after") or doc.get("before"))["id"]
        records.append(KafkaRecord(topic, f"{doc['table']}:{key}".encode(), line))
    spans: dict[int, tuple[int, int]] = {}
    for _, partition, offset in produce(bootstrap, records):
        first, end = spans.get(partition, (offset, offset + 1))
        spans[partition] = (min(first, offset), max(end, offset + 1))
    return spans


def _kafka_lines(spark: Any, bootstrap: str, topic: str, spans: dict[int, tuple[int, int]]) -> Any:
    """What a hand-written job reads from Kafka for one batch: the offset range, as lines."""
    start = json.dumps({topic: {str(p): a for p, (a, _) in spans.items()}})
    end = json.dumps({topic: {str(p): b for p, (_, b) in spans.items()}})
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", start)
        .option("endingOffsets", end)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
    )


def bench_kafka_shape(
    spark: Any, root: Path, bootstrap: str, label: str, tables: int, events: int, keys: int
) -> dict[str, Any]:
    """(k)/(k'): the steady batch of ``events`` events over ``tables`` existing tables read
    from a topic of a local broker (three partitions), in a running ``--follow`` pipeline,
    against the hand-written job reading the same offsets with Spark's Kafka source +
    ``from_json`` + ``row_number`` + one ``MERGE`` per table."""
    files = root / f"{label}_files"
    topic = f"bench.{label}"
    n_load = max(events, tables * keys)
    lsn = write_tables(files / "0.jsonl", n_load, tables, keys, 1, 1, inserts_only=True)
    paths = [files / "0.jsonl"]
    for b in range(1, 3):
        paths.append(files / f"{b}.jsonl")
        lsn = write_tables(paths[-1], events, tables, keys, seed=b + 30, first_lsn=lsn)
    spans: list[dict[int, tuple[int, int]]] = []

    def send(path: Path) -> Callable[[], dict[int, tuple[int, int]]]:
        def produce() -> dict[int, tuple[int, int]]:
            spans.append(_produce_file(bootstrap, topic, path))
            return spans[-1]

        return produce

    kafka = {
        "bootstrap_servers": bootstrap,
        "topics": [topic],
        "starting_offsets": "earliest",
        "max_offsets_per_trigger": 10 * n_load,
    }
    from cdcflow.testing.kafka import create_topics

    create_topics(bootstrap, [topic], 3)
    cfg = _multi_cfg(root, f"bench_{label}", root / "unused", tables, kafka=kafka)
    follow = _Follow(spark, cfg)
    try:
        load_s, _, _ = follow.read_to(send(paths[0]), topic)
        warm_s, _, _ = follow.read_to(send(paths[1]), topic)
        steady_s, report, triggers = follow.read_to(send(paths[2]), topic)
    finally:
        follow.stop()
    hand_ns = f"bench_{label}_hand"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS cdc.{hand_ns}")
    for span in spans[:2]:  # the load, then a warm batch
        handwritten_tables(spark, _kafka_lines(spark, bootstrap, topic, span), hand_ns, tables)
    t = time.perf_counter()
    handwritten_tables(spark, _kafka_lines(spark, bootstrap, topic, spans[2]), hand_ns, tables)
    hand_s = time.perf_counter() - t
    differing = sum(
        spark.sql(
            f"SELECT count(*) AS n FROM (SELECT id, name, qty, price, updated_at FROM "
            f"cdc.bench_{label}.t{t:03d} EXCEPT SELECT * FROM cdc.{hand_ns}.t{t:03d})"
        ).collect()[0]["n"]
        for t in range(min(tables, 3))
    )
    stages = dict(getattr(report, "stages", {}) or {})
    return {
        "tables": tables,
        "events": events,
        "hand_written_seconds": hand_s,
        "ours_steady_seconds": steady_s,
        "ours_warmup_batch_seconds": warm_s,
        "ours_first_load_seconds": load_s,
        "ratio_steady": steady_s / hand_s,
        "steady_triggers": triggers,
        # the last trigger's stages (the one that read the topic to its end)
        "decode_share": stages.get("decode", 0.0) / report.seconds if report.seconds else 0.0,
        "steady_stages": stages,
        "rows_differing_from_hand_written_first_3_tables": int(differing),
    }


def bench_kafka(spark: Any, root: Path) -> dict[str, Any]:
    """(k) and (k') against a broker started here (cdcflow.testing.services)."""
    from cdcflow.testing.services.kafka import KafkaBroker

    with KafkaBroker(root / "kafka") as broker:
        one = bench_kafka_shape(
            spark, root, broker.bootstrap, "kone", 1, int(200_000 * SCALE), int(40_000 * SCALE)
        )
        print(_kafka_line("k", one), flush=True)
        many = bench_kafka_shape(
            spark, root, broker.bootstrap, "kmany", 100, int(20_000 * SCALE), 50
        )
        print(_kafka_line("k'", many), flush=True)
    return {"one_table": one, "many_tables": many}


def _soak_state(spark: Any, root: Path, batch: int) -> dict[str, Any]:
    """One replica of the soak (``t000``) and the warehouse after ``batch`` batches: data and
    delete files, snapshots, its metadata and storage bytes, and a full read of it (timed)."""
    ident = "cdc.bench_soak.t000"
    counts = spark.sql(
        f"SELECT content, count(*) AS n FROM {ident}.files GROUP BY content"
    ).collect()
    by_content = {int(r["content"]): int(r["n"]) for r in counts}
    snapshots = spark.sql(f"SELECT count(*) AS n FROM {ident}.snapshots").collect()[0]["n"]
    t = time.perf_counter()
    read = spark.sql(f"SELECT * FROM {ident}").toPandas()
    read_s = time.perf_counter() - t

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    table = root / "warehouse" / "bench_soak" / "t000"
    return {
        "batch": batch,
        "table_rows": len(read),
        "data_files": by_content.get(0, 0),
        "delete_files": by_content.get(1, 0) + by_content.get(2, 0),
        "snapshots": int(snapshots),
        "metadata_bytes": size(table / "metadata"),
        "table_bytes": size(table),
        "warehouse_bytes": size(root / "warehouse"),
        "read_seconds": read_s,
    }


def _soak_state_line(s: dict[str, Any], seconds: list[float]) -> str:
    recent = statistics.median(seconds[-10:]) if seconds else 0.0
    return (
        f"    soak at batch {s['batch']}: median of the last 10 batches {recent:.1f}s; t000 "
        f"{s['table_rows']:,} rows in {s['data_files']} data + {s['delete_files']} delete "
        f"files, {s['snapshots']} snapshots, metadata {s['metadata_bytes'] / 1e6:.1f} MB, "
        f"table {s['table_bytes'] / 1e6:.1f} MB, full read {s['read_seconds']:.2f}s; "
        f"warehouse {s['warehouse_bytes'] / 1e6:.0f} MB"
    )


def _maintenance_seconds(report: Any) -> dict[str, float]:
    """Seconds of each kind of maintenance action after a batch, from its progress lines
    (``rewrite_data_files t000 (41 → 1 files, 0.9s)``)."""
    out: dict[str, float] = {}
    for line in getattr(report, "maintenance", ()) or ():
        action = line.split(" ", 1)[0]
        took = line.rsplit(", ", 1)[-1].rstrip(")s")
        out[action] = out.get(action, 0.0) + float(took)
    return out


def _soak_differing(spark: Any, files: list[Path], tables: int) -> int:
    """Rows in which the replicas and the oracle differ, both ways, over all tables. The
    oracle: every soak file at once, the newest event per key by its LSN read as a number
    (the files hold each key's events in LSN order), deletes dropped."""
    lsn = LSN_NUMBER
    spark.read.text([str(f) for f in files]).selectExpr(
        f"from_json(value, '{BASELINE_SCHEMA}') AS e"
    ).selectExpr(
        "e.`table` AS tbl",
        "coalesce(e.after.id, e.before.id) AS id",
        "e.operation AS op",
        "e.after.name AS name",
        "e.after.qty AS qty",
        "CAST(e.after.price AS decimal(10,2)) AS price",
        "CAST(e.after.updated_at AS timestamp) AS updated_at",
        f"row_number() OVER (PARTITION BY e.`table`, coalesce(e.after.id, e.before.id) "
        f"ORDER BY {lsn} DESC) AS rn",
    ).where("rn = 1 AND op <> 'DELETE'").createOrReplaceTempView("bench_soak_oracle")
    columns = "id, name, qty, price, updated_at"
    differing = 0
    for t in range(tables):
        ours = f"SELECT {columns} FROM cdc.bench_soak.t{t:03d}"
        oracle = f"SELECT {columns} FROM bench_soak_oracle WHERE tbl = 't{t:03d}'"
        for one, other in ((ours, oracle), (oracle, ours)):
            query = f"SELECT count(*) AS n FROM ({one} EXCEPT ALL {other})"
            differing += spark.sql(query).collect()[0]["n"]
    return int(differing)


def bench_soak(spark: Any, root: Path, batches: int, tables: int, events: int) -> dict[str, Any]:
    """(m) months in miniature: ``batches`` batches of ``events`` events over ``tables`` tables
    in one ``--follow`` run. Batch times (each batch's trigger, maintenance included); every
    tenth of the run (at most every 100 batches) what one replica and the warehouse are (see
    :func:`_soak_state`); at the end the median of the last ``window`` batches over the first
    ``window`` after a warm-up of 10 (``window`` = 100, or a tenth of a shorter run), and the
    replicas against the oracle."""
    files = root / "soak_files"
    landing = root / "soak_landing"
    landing.mkdir(parents=True)
    keys = 200
    lsn = write_tables(files / "0000.jsonl", tables * keys, tables, keys, 1, 1, inserts_only=True)
    paths = [files / "0000.jsonl"]
    cfg = _multi_cfg(root, "bench_soak", landing, tables)
    every = max(1, min(100, batches // 10))
    warmup = min(10, batches // 10)
    follow = _Follow(spark, cfg)
    seconds: list[float] = []
    rounds: list[dict[str, float]] = []  # per batch: seconds of each maintenance action
    states: list[dict[str, Any]] = []
    try:
        follow.batch(_copier(paths[0], landing))
        for b in range(1, batches + 1):
            paths.append(files / f"{b:04d}.jsonl")
            lsn = write_tables(paths[-1], events, tables, keys, seed=100 + b, first_lsn=lsn)
            took, report = follow.batch(_copier(paths[-1], landing))
            seconds.append(took)
            rounds.append(_maintenance_seconds(report))
            if b % every == 0 or b == batches:
                states.append(_soak_state(spark, root, b))
                recent = [r for r in rounds[-every:] if r]
                print(_soak_state_line(states[-1], seconds), flush=True)
                if recent:
                    print(f"      maintenance rounds since the last line: {recent}", flush=True)
    finally:
        follow.stop()
    window = every
    first = statistics.median(seconds[warmup : warmup + window])
    last = statistics.median(seconds[-window:])
    medians = [statistics.median(seconds[i : i + every]) for i in range(0, len(seconds), every)]
    return {
        "batches": batches,
        "tables": tables,
        "events_per_batch": events,
        "maintenance": os.environ.get("BENCH_MAINTENANCE", "on"),
        "window": window,
        "first_window_median_seconds": first,
        "last_window_median_seconds": last,
        "growth": last / first if first else None,
        "first_window_mean_seconds": statistics.mean(seconds[warmup : warmup + window]),
        "last_window_mean_seconds": statistics.mean(seconds[-window:]),
        "median_seconds_per_window": medians,
        "states": states,
        "total_seconds": sum(seconds),
        "maintenance_rounds": [{"batch": b + 1, **r} for b, r in enumerate(rounds) if r],
        "rows_differing_from_oracle": _soak_differing(spark, paths, tables),
    }


def _soak_line(r: dict[str, Any]) -> str:
    windows = ", ".join(f"{m:.1f}" for m in r["median_seconds_per_window"])
    start, end = r["states"][0], r["states"][-1]
    return (
        f"(m) soak, {r['batches']} batches of {r['events_per_batch']:,} events over "
        f"{r['tables']} tables, maintenance {r['maintenance']}: median s/batch of the last "
        f"{r['window']} over the first {r['window']} {r['last_window_median_seconds']:.1f}/"
        f"{r['first_window_median_seconds']:.1f}s = {r['growth']:.2f}× (means "
        f"{r['last_window_mean_seconds']:.1f}/{r['first_window_mean_seconds']:.1f}s; medians per "
        f"{r['window']}: "
        f"[{windows}]); t000 at batch {start['batch']} → {end['batch']}: files "
        f"{start['data_files']}+{start['delete_files']} → {end['data_files']}+"
        f"{end['delete_files']}, snapshots {start['snapshots']} → {end['snapshots']}, metadata "
        f"{start['metadata_bytes'] / 1e6:.1f} → {end['metadata_bytes'] / 1e6:.1f} MB, full read "
        f"{start['read_seconds']:.2f} → {end['read_seconds']:.2f}s; warehouse "
        f"{start['warehouse_bytes'] / 1e6:.0f} → {end['warehouse_bytes'] / 1e6:.0f} MB; rows "
        f"differing from the oracle: {r['rows_differing_from_oracle']}"
    )


def _kafka_line(tag: str, r: dict[str, Any]) -> str:
    return (
        f"({tag}) Kafka, {r['events']:,} events over {r['tables']} existing table(s): cdcflow "
        f"{r['ours_steady_seconds']:.1f}s steady (--follow, {r.get('steady_triggers', 1)} "
        f"trigger(s); decode share of the last {r['decode_share']:.0%}), hand-written "
        f"{r['hand_written_seconds']:.1f}s; time ratio {r['ratio_steady']:.2f}×; rows differing "
        f"from the hand-written replicas: {r['rows_differing_from_hand_written_first_3_tables']}"
    )


def _shape_line(tag: str, r: dict[str, Any]) -> str:
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


RECEIVER_SECRET = "bench-receiver-secret"


def _signed_requests(
    clients: int, per_client: int, events: int, prefix: str
) -> list[list[tuple[bytes, dict[str, str]]]]:
    """Per client, ``per_client`` signed unified batches of ``events`` events each, with
    distinct batch ids (the receiver deduplicates on them)."""
    from cdcflow.signing import signature_headers

    out: list[list[tuple[bytes, dict[str, str]]]] = []
    lsn = 1
    for c in range(clients):
        reqs: list[tuple[bytes, dict[str, str]]] = []
        for r in range(per_client):
            docs = []
            for _ in range(events):
                docs.append(
                    {
                        "id": f"{prefix}-e{lsn}",
                        "operation": "INSERT",
                        "table": "items",
                        "source": "postgres",
                        "timestamp": "2025-01-15T10:30:00Z",
                        "position": {"lsn": _lsn(lsn), "sequence": 0},
                        "after": {"id": lsn, "name": f"item-{lsn}", "qty": lsn % 1000},
                    }
                )
                lsn += 1
            batch_id = f"{prefix}-{c}-{r}"
            body = orjson.dumps(
                {
                    "batch_id": batch_id,
                    "batch_size": len(docs),
                    "batch_timestamp": "2025-01-15T10:30:00Z",
                    "events": docs,
                }
            )
            headers = {"Content-Type": "application/json"}
            headers.update(signature_headers(body, RECEIVER_SECRET, batch_id))
            reqs.append((body, headers))
        out.append(reqs)
    return out


def _drive(port: int, path: str, work: list[list[tuple[bytes, dict[str, str]]]]) -> dict[str, Any]:
    """Send every client's requests from its own thread over one keep-alive connection
    (reopened if the server closes it); acknowledged = answered 200."""
    latencies: list[list[float]] = [[] for _ in work]
    errors = [0] * len(work)
    barrier = threading.Barrier(len(work) + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        barrier.wait()
        for body, headers in work[i]:
            t = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
                if resp.will_close:
                    conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
            if ok:
                latencies[i].append(time.perf_counter() - t)
            else:
                errors[i] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    barrier.wait()
    started = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    lat = sorted(x for xs in latencies for x in xs)
    cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
    return {
        "acknowledged": len(lat),
        "errors": sum(errors),
        "seconds": elapsed,
        "requests_per_s": len(lat) / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
    }


def _durable_write(final: Path, data: bytes) -> None:
    """The durable write of one body, alone: a temp file, fsync, rename, folder fsync."""
    tmp = final.with_name(f"_{final.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median requests/s, with the errors and the rounds' rates of all."""
    ranked = sorted(rounds, key=lambda r: r["requests_per_s"])
    found = dict(ranked[len(ranked) // 2])
    found["errors"] = sum(r["errors"] for r in rounds)
    found["rounds_requests_per_s"] = [round(r["requests_per_s"], 1) for r in rounds]
    return found


def _minimal_receiver(folder: Path) -> ThreadingHTTPServer:
    """The baseline: read the body, write it durably to a new file (:func:`_durable_write`),
    answer 200; a thread per connection."""
    folder.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out as two writes: without TCP_NODELAY the second waits for
        # the client's delayed ACK (~40 ms on Linux) on a keep-alive connection
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                n = next(counter)
            _durable_write(folder / f"{n:08d}.json", body)
            payload = b'{"status":"accepted"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _serving(server: Any) -> Callable[[], None]:
    """Serve in a daemon thread; returns the function that stops it."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop


RECEIVER_TOKEN = "bench-receiver-token"


def _grpc_calls(clients: int, per_client: int, events: int, prefix: str) -> list[list[list[bytes]]]:
    """Per client, ``per_client`` calls of ``events`` serialized ``CDCEvent`` messages."""
    from cdcflow.dialects.savegress_proto import event_to_proto

    out: list[list[list[bytes]]] = []
    lsn = 1
    for _ in range(clients):
        calls: list[list[bytes]] = []
        for _ in range(per_client):
            call = []
            for _ in range(events):
                doc = {
                    "id": f"{prefix}-e{lsn}",
                    "operation": "INSERT",
                    "table": "items",
                    "source": "postgres",
                    "timestamp": "2025-01-15T10:30:00Z",
                    "position": {"lsn": _lsn(lsn), "sequence": 0},
                    "after": {"id": lsn, "name": f"item-{lsn}", "qty": lsn % 1000},
                }
                call.append(event_to_proto(doc))
                lsn += 1
            calls.append(call)
        out.append(calls)
    return out


def _drive_grpc(port: int, work: list[list[list[bytes]]]) -> dict[str, Any]:
    """Each client streams its calls from its own thread over its own channel; acknowledged =
    answered OK."""
    import grpc

    metadata = (("authorization", f"Bearer {RECEIVER_TOKEN}"),)
    latencies: list[list[float]] = [[] for _ in work]
    errors = [0] * len(work)
    barrier = threading.Barrier(len(work) + 1)

    def client(i: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = channel.stream_unary("/cdcflow.receiver.v1.Receiver/Stream")
            barrier.wait()
            for call in work[i]:
                t = time.perf_counter()
                try:
                    stream(iter(call), metadata=metadata, timeout=30)
                except grpc.RpcError:
                    errors[i] += 1
                    continue
                latencies[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    barrier.wait()
    started = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    lat = sorted(x for xs in latencies for x in xs)
    cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
    per_call = len(work[0][0]) if work and work[0] else 0
    return {
        "acknowledged": len(lat),
        "errors": sum(errors),
        "seconds": elapsed,
        "calls_per_s": len(lat) / elapsed,
        "events_per_s": len(lat) * per_call / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
    }


def _minimal_grpc(folder: Path) -> tuple[grpc.Server, int]:
    """The baseline: a grpcio server whose ``Stream`` writes the call's messages to a new file
    (length-delimited, no fsync) and answers an empty ``Ack``."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from cdcflow.transports.protobuf import write_delimited

    folder.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    lock = threading.Lock()

    def stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        data = write_delimited(list(requests))
        with lock:
            n = next(counter)
        (folder / f"{n:08d}.pb").write_bytes(data)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "cdcflow.receiver.v1.Receiver", {"Stream": grpc.stream_unary_rpc_method_handler(stream)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=72), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    return server, port


def bench_receiver(
    root: Path, clients: int = 8, per_client: int = 200, events: int = 10
) -> dict[str, Any]:
    from cdcflow.serve.config import load_serve_config
    from cdcflow.serve.grpc_server import make_grpc_server
    from cdcflow.serve.server import make_server

    (root / "receiver_secret").write_text(RECEIVER_SECRET)
    (root / "receiver_token").write_text(RECEIVER_TOKEN)
    settings = load_serve_config(
        {
            "listen": {"host": "127.0.0.1", "port": 0},
            "landing": str(root / "receiver_landing"),
            "endpoints": [
                {
                    "path": "/events",
                    "dialect": "savegress",
                    "landing": "savegress",
                    "auth": {
                        "signature": {
                            "secret_file": str(root / "receiver_secret"),
                            "timestamp_tolerance": "1h",
                        }
                    },
                }
            ],
            "grpc": {
                "listen": {"host": "127.0.0.1", "port": 0},
                "endpoints": [
                    {
                        "name": "events",
                        "landing": "grpc",
                        "auth": {"bearer": {"token_file": str(root / "receiver_token")}},
                    }
                ],
            },
        },
        "(bench)",
        root,
    )
    ours = make_server(settings)
    base = _minimal_receiver(root / "receiver_minimal")
    stops = [_serving(ours), _serving(base)]
    ours_grpc = make_grpc_server(ours.receiver)
    assert ours_grpc is not None
    base_grpc, base_grpc_port = _minimal_grpc(root / "receiver_minimal_grpc")
    ours_grpc.start()
    base_grpc.start()
    try:
        warm = max(1, per_client // 10)
        for name, port in (
            ("warm-ours", ours.server_address[1]),
            ("warm-min", base.server_address[1]),
        ):
            _drive(port, "/events", _signed_requests(clients, warm, events, name))
        # side by side: rounds taken in turn, so that the load of a shared machine falls on
        # both alike; each side's figures are those of its median round
        rounds = 5
        size = max(1, per_client // rounds)
        mine: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for i in range(rounds):
            mine.append(
                _drive(
                    ours.server_address[1],
                    "/events",
                    _signed_requests(clients, size, events, f"o{i}"),
                )
            )
            theirs.append(
                _drive(
                    base.server_address[1],
                    "/events",
                    _signed_requests(clients, size, events, f"m{i}"),
                )
            )
        r_ours = _median_round(mine)
        r_base = _median_round(theirs)
        for name, port in (("warm-ours", ours_grpc.port), ("warm-min", base_grpc_port)):
            _drive_grpc(port, _grpc_calls(clients, warm, events, name))
        g_ours = _drive_grpc(ours_grpc.port, _grpc_calls(clients, per_client, events, "go"))
        g_base = _drive_grpc(base_grpc_port, _grpc_calls(clients, per_client, events, "gm"))
        # longer streams: the same events in a tenth of the calls
        long = max(1, per_client // 10)
        g_ours_long = _drive_grpc(ours_grpc.port, _grpc_calls(clients, long, events * 10, "gol"))
        g_base_long = _drive_grpc(base_grpc_port, _grpc_calls(clients, long, events * 10, "gml"))
    finally:
        for stop in stops:
            stop()
        ours_grpc.stop(5).wait(10)
        base_grpc.stop(5).wait(10)
    landed = sorted((root / "receiver_landing" / "savegress").glob("*"))
    landed_grpc = sorted((root / "receiver_landing" / "grpc").glob("*.pb"))
    r_ours["events_per_s"] = r_ours["requests_per_s"] * events
    r_base["events_per_s"] = r_base["requests_per_s"] * events
    return {
        "clients": clients,
        "requests_per_client": per_client,
        "events_per_request": events,
        "ours": r_ours,
        "baseline": r_base,
        # every acknowledged request (warm-up included) is one landed file
        "landed_files": len([p for p in landed if p.is_file()]),
        "ratio": r_ours["requests_per_s"] / r_base["requests_per_s"],
        "grpc": {
            "ours": g_ours,
            "baseline": g_base,
            # every acknowledged call (warm-up included) is one landed file
            "landed_files": len(landed_grpc),
            "ratio": g_ours["events_per_s"] / g_base["events_per_s"],
            "long_streams": {
                "events_per_call": events * 10,
                "ours": g_ours_long,
                "baseline": g_base_long,
                "ratio": g_ours_long["events_per_s"] / g_base_long["events_per_s"],
            },
        },
    }


def _receiver_line(r: dict[str, Any]) -> str:
    o, b = r["ours"], r["baseline"]
    return (
        f"(d) receiver: cdcflow {o['requests_per_s']:,.0f} req/s (p50 {o['p50_ms']:.1f} ms, "
        f"p99 {o['p99_ms']:.1f} ms), minimal {b['requests_per_s']:,.0f} req/s "
        f"(p50 {b['p50_ms']:.1f} ms, p99 {b['p99_ms']:.1f} ms), ratio {r['ratio']:.2f}× "
        f"({r['clients']} clients, errors {o['errors']}/{b['errors']})"
        + (
            f"\n(d) receiver, events/s durable: webhook {o['events_per_s']:,.0f} "
            f"(minimal {b['events_per_s']:,.0f}); gRPC {g['ours']['events_per_s']:,.0f} "
            f"(p50 {g['ours']['p50_ms']:.1f} ms, p99 {g['ours']['p99_ms']:.1f} ms), minimal "
            f"gRPC server {g['baseline']['events_per_s']:,.0f}, ratio {g['ratio']:.2f}× "
            f"({r['events_per_request']} events a call, errors "
            f"{g['ours']['errors']}/{g['baseline']['errors']}); "
            f"{g['long_streams']['events_per_call']} events a call: gRPC "
            f"{g['long_streams']['ours']['events_per_s']:,.0f}, minimal "
            f"{g['long_streams']['baseline']['events_per_s']:,.0f}, ratio "
            f"{g['long_streams']['ratio']:.2f}×"
            if (g := r.get("grpc")) and "long_streams" in g
            else ""
        )
    )


def chart(results: dict[str, Any], path: Path) -> None:
    """One panel per case present in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[list[str], list[float], str]] = []
    if "decode" in results:
        d = results["decode"]
        panels.append(
            (
                ["from_json", "cdcflow"],
                [d["baseline_events_per_s"], d["ours_events_per_s"]],
                f"(a) decode events/s (×{d['ratio']:.2f})",
            )
        )
    if "end_to_end" in results:
        e = results["end_to_end"]
        panels.append(
            (
                ["hand-written", "cdcflow"],
                [e["baseline_events_per_s"], e["ours_events_per_s"]],
                f"(b) end-to-end events/s (×{e['ratio']:.2f})",
            )
        )
    if "growth" in results:
        g = results["growth"]
        panels.append(
            (
                [f"{g['small_rows']:,} rows", f"{g['large_rows']:,} rows"],
                [g["small_seconds"], g["large_seconds"]],
                f"(c) fixed batch seconds (×{g['cost_ratio_100x']:.2f})",
            )
        )
    if "receiver" in results:
        r = results["receiver"]
        panels.append(
            (
                ["minimal", "cdcflow serve"],
                [r["baseline"]["requests_per_s"], r["ours"]["requests_per_s"]],
                f"(d) receiver acked req/s (×{r['ratio']:.2f})",
            )
        )
        if "grpc" in r:
            g = r["grpc"]
            panels.append(
                (
                    ["minimal grpcio", "cdcflow serve"],
                    [g["baseline"]["events_per_s"], g["ours"]["events_per_s"]],
                    f"(d) gRPC durable events/s (×{g['ratio']:.2f})",
                )
            )
    for key, tag in (("many_tables", "e"), ("small_batches", "f")):
        if key in results:
            m = results[key]
            panels.append(
                (
                    ["hand-written", "steady", "new run"],
                    [
                        m["hand_written_seconds"],
                        m["ours_steady_seconds"],
                        m["ours_new_run_seconds"],
                    ],
                    f"({tag}) {m['tables']} table(s) batch seconds (×{m['ratio_steady']:.2f})",
                )
            )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (labels, values, title) in zip(axes[0], panels, strict=True):
        ax.bar(labels, values)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def receiver_only() -> dict[str, Any]:
    """(d) alone, no Spark."""
    root = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    try:
        r = bench_receiver(root, per_client=max(10, int(200 * SCALE)))
        print(_receiver_line(r), flush=True)
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
)


def _decode_line(d: dict[str, Any]) -> str:
    return (
        f"(a) decode: cdcflow {d['ours_events_per_s']:,.0f} events/s, "
        f"from_json {d['baseline_events_per_s']:,.0f} events/s, ratio {d['ratio']:.2f}× "
        f"(hashing to_json of the maps: {d['ours_to_json_events_per_s']:,.0f} events/s, "
        f"{d['ratio_to_json']:.2f}×)"
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
        print(_decode_line(results["decode"]), flush=True)
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
        print(_receiver_line(results["receiver"]), flush=True)
    if "many" in chosen:
        m = results["many_tables"] = bench_shape(
            spark, root, "many", tables=100, events=int(20_000 * SCALE), keys=50
        )
        print(_shape_line("e", m), flush=True)
    if "small" in chosen:
        f = results["small_batches"] = bench_shape(
            spark, root, "small", tables=1, events=int(20_000 * SCALE), keys=5_000
        )
        print(_shape_line("f", f), flush=True)
    if "history" in chosen:
        h = results["history"] = bench_shape(
            spark, root, "history", tables=1, events=int(20_000 * SCALE), keys=5_000, mode="scd2"
        )
        print(_shape_line("h", h), flush=True)
    if "kafka" in chosen:
        results["kafka"] = bench_kafka(spark, root)
    if "soak" in chosen:
        batches = int(os.environ.get("BENCH_SOAK_BATCHES", "100"))
        key = "soak" if os.environ.get("BENCH_MAINTENANCE", "on") == "on" else "soak_off"
        m = results[key] = bench_soak(spark, root, batches, 10, int(1_000 * SCALE))
        print(_soak_line(m), flush=True)
    if "months" in chosen:
        from bench.months import bench_months, line

        # the bench's pipeline configuration and follower, given (bench.months imports
        # nothing of this module)
        results["months"] = bench_months(spark, root, _multi_cfg, _Follow)
        print(line(results["months"]), flush=True)
    if "parallel" in chosen:
        print("(g) the steady batch of (e) by parallel_tables:", flush=True)
        results["parallel_tables"] = bench_parallel(
            spark, root, tables=100, events=int(20_000 * SCALE), keys=50, choices=CHOICES
        )


if __name__ == "__main__":
    sys.exit(main())
