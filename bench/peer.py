"""``python -m bench peer``: cdcflow beside what users pick instead — Flink SQL reading
Debezium's topics (``debezium-json``) into Iceberg with ``write.upsert.enabled`` — on one
topic set filled once by PostgreSQL → Debezium's connector in Kafka Connect → Kafka (the
project's own services), each system into its own namespace of one embedded catalog (Iceberg's
JDBC catalog on SQLite, which Flink's Iceberg connector opens with the same driver), one
system after the other, never both at once. The database is the oracle.

- (i) catch-up: ``BENCH_PEER_CHANGES`` (1,000,000) row changes over 10 tables already in the
  topics: seconds from the start of each system until it has committed the topics' ends, then
  its replicas against the database;
- (ii) steady: a fixed rate of transactions (``BENCH_PEER_RATE``, 30/s) for
  ``BENCH_PEER_MINUTES`` (5) while one system follows: end-to-end lag (a probe row's commit in
  PostgreSQL → the first Iceberg snapshot showing it) median and p95;
- (iii) faults: the same workload for ``BENCH_PEER_FAULT_MINUTES`` (2) with Kafka Connect
  killed and started again (a redelivered range), primary-key changes that move rows to
  another partition, and the consumer killed and started again: rows that differ from the
  database at the end, named;
- (iv) after ``BENCH_PEER_COMMITS`` (200) commits at a 2 s cadence: a full read of the largest
  replica with Spark and pyiceberg, its data and delete files and storage bytes.

The peer (PyFlink, its jars) is a bench-only install in a venv of its own
(:mod:`bench.peer_setup`); where it cannot be installed the part is skipped with one line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.peer_stack import (
    CHANGES,
    COLUMNS,
    COMMITS,
    FAST_INTERVAL,
    FAULT_MINUTES,
    FRESH,
    INTERVAL,
    MINUTES,
    PREFIX,
    RATE,
    SESSIONS,
    TABLES,
    Stack,
    Workload,
    fill_statements,
    load_average,
    log_line,
)
from bench.peer_systems import Cdcflow, Flink, System

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _wait(system: System, ends: Mapping[tuple[str, int], int], timeout: float) -> float:
    """Seconds until ``system`` has committed ``ends`` (polled every second)."""
    t0 = time.monotonic()
    while not system.reached(ends):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{system.name} did not reach the topics' ends in {timeout:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - t0


# --------------------------------------------------------------------------- checks


def _source(cur: Any, table: str) -> dict[Any, tuple[Any, ...]]:
    cur.execute(
        f"SELECT id, name, qty, score, flag, "
        f"to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') FROM {table}"
    )
    return {r[0]: tuple(r) for r in cur.fetchall()}


def _replica(spark: SparkSession, ident: str) -> dict[Any, tuple[Any, ...]]:
    rows = spark.sql(
        f"SELECT id, name, qty, score, flag, "
        f"date_format(updated_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS') FROM {ident}"
    ).collect()
    out: dict[Any, tuple[Any, ...]] = {}
    for r in rows:
        if r[0] in out:  # a key twice: Iceberg does not enforce keys
            out[("duplicate", r[0])] = tuple(r)
        else:
            out[r[0]] = tuple(r)
    return out


def compare(spark: SparkSession, stack: Stack, namespace: str) -> dict[str, Any]:
    """Each replica against its table now: rows, rows that differ, the first ones named."""
    tables: dict[str, Any] = {}
    wrong: list[str] = []
    with stack.cursor() as cur:
        for t in TABLES:
            src = _source(cur, t)
            rep = _replica(spark, f"cdc.{namespace}.{t}")
            keys = set(src) | set(rep)
            bad = sorted((k for k in keys if src.get(k) != rep.get(k)), key=repr)
            tables[t] = {"source_rows": len(src), "replica_rows": len(rep), "differing": len(bad)}
            for k in bad[: max(0, 10 - len(wrong))]:
                wrong.append(f"{t} id={k}: database {src.get(k)}, replica {rep.get(k)}")
    return {
        "equal": all(v["differing"] == 0 for v in tables.values()),
        "rows_differing": sum(v["differing"] for v in tables.values()),
        "tables": tables,
        "wrong_rows": wrong,
    }


def lags(spark: SparkSession, stack: Stack, namespace: str, since: int) -> dict[str, Any]:
    """Seconds from each probe row's commit (probes after ``since``) to the commit of the
    first snapshot of the probe's replica that holds it."""
    ident = f"cdc.{namespace}.probe"
    snaps = spark.sql(
        f"SELECT snapshot_id, unix_millis(committed_at) FROM {ident}.snapshots "
        "ORDER BY committed_at"
    ).collect()
    seen: dict[int, float] = {}
    for sid, ms in snaps:
        for (n,) in spark.sql(
            f"SELECT n FROM {ident} VERSION AS OF {sid} WHERE n > {since}"
        ).collect():
            seen.setdefault(int(n), ms / 1000)
    with stack.cursor() as cur:
        cur.execute("SELECT n, extract(epoch FROM at) FROM probe WHERE n > %s", (since,))
        committed = {int(n): float(at) for n, at in cur.fetchall()}
    values = sorted(seen[n] - at for n, at in committed.items() if n in seen)
    if not values:
        return {"probes": len(committed), "seen": 0}
    return {
        "probes": len(committed),
        "seen": len(values),
        "lag_median": statistics.median(values),
        "lag_p95": values[min(len(values) - 1, int(0.95 * len(values)))],
        "lag_max": values[-1],
    }


def history(spark: SparkSession, namespace: str, first: int) -> dict[str, Any]:
    """cdcflow's batches from ``first`` on: their count, events, seconds, and the seconds of
    each stage summed (the batch history, ``cdcflow history``)."""
    rows = spark.sql(
        f"SELECT batch_id, events, seconds, stages FROM cdc.{namespace}__cdcflow.batches "
        f"WHERE batch_id >= {first} ORDER BY batch_id"
    ).collect()
    stages: dict[str, float] = {}
    for r in rows:
        for k, v in (r["stages"] or {}).items():
            stages[k] = stages.get(k, 0.0) + float(v)
    return {
        "batches": len(rows),
        "events": sum(int(r["events"] or 0) for r in rows),
        "seconds": sum(float(r["seconds"] or 0) for r in rows),
        "median_batch_seconds": statistics.median([float(r["seconds"]) for r in rows])
        if rows
        else None,
        "stages": dict(sorted(stages.items(), key=lambda kv: -kv[1])),
    }


def reads(spark: SparkSession, warehouse: Path, namespace: str, table: str) -> dict[str, Any]:
    """A full read of one replica with Spark (best of 3) and with pyiceberg, its live data and
    delete files, its snapshots and its bytes on disk."""
    ident = f"cdc.{namespace}.{table}"
    cols = ", ".join(c for c, _ in COLUMNS)
    out: dict[str, Any] = {"table": table}

    def spark_read() -> None:
        spark.sql(f"SELECT count(*), bit_xor(xxhash64({cols})) FROM {ident}").collect()

    spark_read()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        spark_read()
        best = min(best, time.perf_counter() - t)
    out["spark_read_seconds"] = best
    kinds = {0: "data", 1: "position_delete", 2: "equality_delete"}
    files = spark.sql(
        f"SELECT content, count(*), sum(file_size_in_bytes), sum(record_count) "
        f"FROM {ident}.files GROUP BY content"
    ).collect()
    out["files"] = {
        kinds.get(int(c), str(c)): {"files": int(n), "bytes": int(b), "records": int(r)}
        for c, n, b, r in files
    }
    out["snapshots"] = spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0]
    folder = warehouse / namespace / table
    out["storage_bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    try:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog(
            "cdc", uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri()
        )
        t0 = time.perf_counter()
        got = (
            catalog.load_table(f"{namespace}.{table}")
            .scan(selected_fields=tuple(c for c, _ in COLUMNS))
            .to_arrow()
        )
        out["pyiceberg_read_seconds"] = time.perf_counter() - t0
        out["pyiceberg_rows"] = got.num_rows
    except Exception as e:  # a reader that cannot read the table is the finding
        out["pyiceberg_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


# --------------------------------------------------------------------------- the run


@dataclass
class Bench:
    """One run of every workload on both systems."""

    root: Path
    python: Path
    stack: Stack
    systems: list[Any]
    spark: SparkSession | None = None
    keys: int = 0
    next_key: int = FRESH
    results: dict[str, Any] = field(default_factory=dict)

    def session(self) -> SparkSession:
        """The session the checks read replicas with (after the timed runs of (i))."""
        if self.spark is None:
            import cdcflow.api as cdc

            self.spark = cdc.session(str(self.root / "cdcflow.yaml"))
        return self.spark

    def catch_up(self) -> dict[str, Any]:
        stats: dict[str, float] = {"changes": 0, "statements": 0}
        t0 = time.monotonic()
        with self.stack.cursor() as cur:
            for sql, n in fill_statements(CHANGES):
                cur.execute(sql)
                stats["changes"] += n
                stats["statements"] += 1
        self.keys = int(max(50, CHANGES // len(TABLES)) * 0.4)
        ends = self.stack.settle()
        stats["fill_seconds"] = time.monotonic() - t0
        stats["records"] = sum(ends.values())
        log_line(
            f"(i) {stats['changes']:,} changes in the topics ({stats['records']:,} records) "
            f"after {stats['fill_seconds']:.0f}s"
        )
        out: dict[str, Any] = {"workload": stats}
        for s in self.systems:
            load = load_average()
            s.start()
            seconds = _wait(s, ends, timeout=7200)
            time.sleep(_seconds(INTERVAL))  # Flink's sink commits right after the offsets
            s.stop()
            out[s.name] = {"seconds": seconds, "load_before": load, "load_after": load_average()}
            log_line(f"(i) {s.name}: {seconds:.1f}s to the topics' ends (load {load})")
        for s in self.systems:
            out[s.name].update(compare(self.session(), self.stack, s.namespace))
            if s.name == "cdcflow":
                out[s.name]["history"] = history(self.session(), s.namespace, 0)
            equal = out[s.name]["equal"]
            log_line(f"(i) {s.name}: " + ("replicas equal" if equal else "REPLICAS DIFFER"))
        return out

    def live(self, kind: str, minutes: float, seed: int) -> dict[str, Any]:
        """(ii) and (iii): each system follows while the workload runs (with faults for
        ``faults``), then catches up and stops."""
        out: dict[str, Any] = {"rate": RATE, "minutes": minutes, "sessions": SESSIONS}
        for s in self.systems:
            spark = self.session()
            first_batch = s.commits() + 1
            with self.stack.cursor() as cur:
                cur.execute("SELECT coalesce(max(n), 0) FROM probe")
                since = int(cur.fetchone()[0])
            load = load_average()
            s.start()
            _wait(s, self.stack.ends(), timeout=900)
            w = Workload(self.stack.url, RATE, self.keys, seed, self.next_key)
            faults: list[str] = []
            w.start()
            started = time.monotonic()
            if kind == "faults":
                for share, fault in ((0.3, "connect"), (0.45, "moves"), (0.6, "consumer")):
                    while time.monotonic() - started < share * minutes * 60:
                        time.sleep(0.2)
                    faults.append(self._fault(fault, s, w))
            while time.monotonic() - started < minutes * 60:
                time.sleep(0.5)
            w.stop()
            self.next_key = w.next_key + 1
            ends = self.stack.settle()
            behind = _wait(s, ends, timeout=1800)
            time.sleep(_seconds(INTERVAL))
            s.stop()
            found: dict[str, Any] = {
                "transactions": w.stats.transactions,
                "changes": w.stats.changes,
                "rolled_back": w.stats.rolled_back,
                "key_changes": w.stats.moves,
                "faults": faults,
                "caught_up_seconds_after_workload": behind,
                "load_before": load,
                "load_after": load_average(),
            }
            found.update(lags(spark, self.stack, s.namespace, since))
            found.update(compare(spark, self.stack, s.namespace))
            if s.name == "cdcflow":
                found["history"] = history(spark, s.namespace, first_batch)
            out[s.name] = found
            log_line(f"({'ii' if kind == 'steady' else 'iii'}) {s.name}: {_line(found)}")
        return out

    def _fault(self, kind: str, s: System, w: Workload) -> str:
        if kind == "connect":
            assert self.stack.connect is not None
            self.stack.connect.kill()
            self.stack.connect.start()
            return "Kafka Connect SIGKILLed and started again"
        if kind == "moves":
            return f"{w.moves()} rows moved to a new key, the old key inserted again at once"
        s.kill()
        if s.name == "flink":
            s.start()
            return "Flink job SIGKILLed, started again from its latest retained checkpoint"
        return "cdcflow run SIGKILLed, started again"

    def commits(self) -> dict[str, Any]:
        """(iv): each system at a 2 s cadence until it has made ``COMMITS`` commits, then a
        full read of its largest replica."""
        out: dict[str, Any] = {"commits": COMMITS, "interval": FAST_INTERVAL, "rate": RATE}
        for s in self.systems:
            load = load_average()
            first = s.commits()
            s.start(FAST_INTERVAL)
            w = Workload(self.stack.url, RATE, self.keys, 7, self.next_key)
            w.start()
            t0 = time.monotonic()
            while s.commits() - first < COMMITS:
                if time.monotonic() - t0 > 3600:
                    break
                time.sleep(1.0)
            made = s.commits() - first
            w.stop()
            self.next_key = w.next_key + 1
            ends = self.stack.settle()
            _wait(s, ends, timeout=1800)
            time.sleep(_seconds(FAST_INTERVAL) + 1)
            s.stop()
            spark = self.session()
            found: dict[str, Any] = {
                "made": made,
                "seconds": time.monotonic() - t0,
                "load_before": load,
            }
            with self.stack.cursor() as cur:
                counts = {}
                for t in TABLES:
                    cur.execute(f"SELECT count(*) FROM {t}")
                    counts[t] = int(cur.fetchone()[0])
            largest = max(counts, key=lambda k: counts[k])
            found.update(reads(spark, self.stack.root / "warehouse", s.namespace, largest))
            found["load_after"] = load_average()
            found.update(compare(spark, self.stack, s.namespace))
            out[s.name] = found
            log_line(
                f"(iv) {s.name}: {made} commits; full read of {largest}: Spark "
                f"{found['spark_read_seconds']:.2f}s, pyiceberg "
                f"{found.get('pyiceberg_read_seconds', found.get('pyiceberg_error'))}; "
                f"files {found['files']}, {found['storage_bytes']:,} bytes"
            )
        return out


def _seconds(interval: str) -> float:
    return float(interval.rstrip("s"))


def _line(r: Mapping[str, Any]) -> str:
    lag = (
        f"lag median {r['lag_median']:.1f}s, p95 {r['lag_p95']:.1f}s"
        if "lag_median" in r
        else "no lag measured"
    )
    return (
        f"{r['transactions']} transactions, {lag}; "
        + ("replicas equal" if r["equal"] else f"{r['rows_differing']} rows differ")
        + f" (load {r['load_before']})"
    )


def settings(flink: Flink) -> dict[str, Any]:
    """Every setting of both systems, as run."""
    from bench import peer_flink, peer_setup

    spec = flink.spec(INTERVAL)
    ddl, inserts = peer_flink.statements({**spec, "tables": spec["tables"][:1]})
    return {
        "flink": {
            "versions": {
                "flink": peer_setup.FLINK,
                "iceberg_flink_runtime": peer_setup.ICEBERG,
                "kafka_connector": peer_setup.KAFKA_CONNECTOR,
            },
            "job": {
                **peer_flink.job_settings(spec),
                "execution.state-recovery.path": "the latest retained checkpoint, on every "
                "start after the first",
            },
            "catalog": peer_flink.catalog_options(spec),
            "source": peer_flink.source_options(spec, f"{PREFIX}.public.t0"),
            "sink_table_properties": peer_flink.SINK_PROPERTIES,
            "sql": ";\n".join(
                [*ddl[2:], *inserts]  # the catalog's statements are the options above
            ),
        },
        "cdcflow": {
            "config": "kafka: source with pattern, everything else default "
            f"(follow_interval {INTERVAL}, maintenance on, Spark local[*])",
        },
        "source": "PostgreSQL, REPLICA IDENTITY FULL; Debezium's PostgreSQL connector "
        "(pgoutput, JSON with schemas, 3 partitions per topic), every type setting default",
        "checks": "each replica against SELECT * of its table after each workload",
    }


def run() -> dict[str, Any]:
    """The whole comparison; its figures (or why it was skipped)."""
    from bench.peer_setup import PeerUnavailable, install

    try:
        python = install()
    except PeerUnavailable as e:
        print(f"peer: skipped: Flink could not be installed here ({e})", flush=True)
        return {"skipped": str(e)}
    root = Path(tempfile.mkdtemp(prefix="cdcflow-peer-"))
    stack = Stack(root)
    flink: Flink | None = None
    bench: Bench | None = None
    try:
        print(f"peer: Flink SQL vs cdcflow, one after the other, in {root}", flush=True)
        stack.start()
        warehouse = root / "warehouse"
        flink = Flink(python, root, stack.kafka.bootstrap, warehouse)
        cdcflow = Cdcflow(root, stack.kafka.bootstrap, warehouse)
        cdcflow.config()
        bench = Bench(root, python, stack, [flink, cdcflow])
        out: dict[str, Any] = {
            "machine": {"cores": os.cpu_count(), "load_at_start": load_average()},
            "settings": settings(flink),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        out["catch_up"] = bench.catch_up()
        out["steady"] = bench.live("steady", MINUTES, seed=11)
        out["faults"] = bench.live("faults", FAULT_MINUTES, seed=12)
        out["after_commits"] = bench.commits()
        return out
    finally:
        for s in bench.systems if bench else ([flink] if flink else []):
            s.stop()
        if bench is not None and bench.spark is not None:
            bench.spark.stop()
        stack.stop()
        if os.environ.get("BENCH_PEER_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.peer``: the comparison alone, its figures printed as JSON."""
    del argv
    print(json.dumps(run(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
