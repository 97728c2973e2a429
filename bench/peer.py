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
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.testing.services.connect import KafkaConnect
    from cdcflow.testing.services.kafka import KafkaBroker
    from cdcflow.testing.services.postgres import Postgres

CHANGES = int(float(os.environ.get("BENCH_PEER_CHANGES", "1000000")))
RATE = float(os.environ.get("BENCH_PEER_RATE", "30"))
MINUTES = float(os.environ.get("BENCH_PEER_MINUTES", "5"))
FAULT_MINUTES = float(os.environ.get("BENCH_PEER_FAULT_MINUTES", "2"))
COMMITS = int(os.environ.get("BENCH_PEER_COMMITS", "200"))
#: cdcflow's default ``follow_interval``; Flink checkpoints (and so commits) at the same
#: cadence: neither the Flink nor the Iceberg documentation names a value for CDC.
INTERVAL = "10s"
#: The cadence of (iv), both systems, so that 200 commits take minutes, not half an hour.
FAST_INTERVAL = "2s"
PREFIX = "peer"
TABLES = tuple(f"t{i}" for i in range(10))
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("name", "text"),
    ("qty", "bigint"),
    ("score", "double precision"),
    ("flag", "boolean"),
    ("updated_at", "timestamptz"),
)
PROBE_COLUMNS: tuple[tuple[str, str], ...] = (("n", "bigint"), ("at", "timestamptz"))
SESSIONS = 3
#: Where the workload's new keys start (the fill's keys are below).
FRESH = 100_000_000


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _log(text: str) -> None:
    print(f"  {text}", flush=True)


# --------------------------------------------------------------------------- the source


def setup_sql() -> str:
    """The table set: ten tables of the types both systems read under Debezium's defaults,
    and the probe table of the lag; ``REPLICA IDENTITY FULL`` as Flink's Debezium format
    documentation asks for PostgreSQL (cdcflow does not need it)."""
    cols = ", ".join(f"{c} {t}" for c, t in COLUMNS[1:])
    parts = [f"CREATE TABLE {t} (id bigint PRIMARY KEY, {cols})" for t in TABLES]
    parts.append("CREATE TABLE probe (n bigint PRIMARY KEY, at timestamptz NOT NULL)")
    parts += [f"ALTER TABLE {t} REPLICA IDENTITY FULL" for t in (*TABLES, "probe")]
    return ";\n".join(parts) + ";"


def fill_statements(changes: int, tables: Sequence[str] = TABLES) -> Iterator[tuple[str, int]]:
    """(statement, row changes it makes) adding up to about ``changes`` over ``tables``: per
    table 40 % inserts, then updates in slices, deletes and primary-key changes (2 %)."""
    per = max(50, changes // len(tables))
    rows = int(per * 0.4)
    updates, deletes, moves = int(per * 0.5), int(per * 0.08), int(per * 0.02)
    slices = 20
    for t in tables:
        yield (
            f"INSERT INTO {t} SELECT g, 'name-' || g, g % 1000, g * 0.5, g % 2 = 0, "
            f"clock_timestamp() FROM generate_series(1, {rows}) g",
            rows,
        )
    for t in tables:
        done, r = 0, 0
        while done < updates:
            n = min(rows // slices, updates - done)
            yield (
                f"UPDATE {t} SET qty = qty + 1, name = name || '+', score = score * 1.5, "
                f"flag = NOT flag, updated_at = clock_timestamp() "
                f"WHERE id IN (SELECT id FROM {t} WHERE id % {slices} = {r % slices} "
                f"ORDER BY id LIMIT {n})",
                n,
            )
            done, r = done + n, r + 1
        yield f"DELETE FROM {t} WHERE id % 5 = 0 AND id <= {deletes * 5}", deletes
        yield (
            f"UPDATE {t} SET id = id + {FRESH // 2}, updated_at = clock_timestamp() "
            f"WHERE id % 5 = 1 AND id <= {moves * 5}",
            moves,
        )


class Stack:
    """The broker, PostgreSQL and Kafka Connect with Debezium's PostgreSQL connector."""

    def __init__(self, root: Path) -> None:
        from cdcflow.testing.services.kafka import KafkaBroker
        from cdcflow.testing.services.postgres import Postgres

        self.root = root
        self.kafka: KafkaBroker = KafkaBroker(root / "kafka")
        self.postgres: Postgres = Postgres(root / "postgres" / "data")
        self.connect: KafkaConnect | None = None

    @property
    def url(self) -> str:
        """The database's libpq URL."""
        return self.postgres.url

    def start(self) -> None:
        """Start the servers, make the table set, start the connector on it."""
        from cdcflow.testing.live.schema import TableSpec, connector_config
        from cdcflow.testing.services.connect import KafkaConnect

        self.kafka.start()
        self.postgres.start()
        self.execute(setup_sql())
        self.connect = KafkaConnect(self.root / "connect", self.kafka.bootstrap)
        self.connect.start()
        p = self.postgres
        specs = tuple(TableSpec(t, ("id",), "") for t in (*TABLES, "probe"))
        self.connect.add(
            PREFIX,
            connector_config(
                port=p.port,
                database=p.database,
                user=p.user,
                password=p.password,
                prefix=PREFIX,
                tables=specs,
            ),
        )
        with self.cursor() as cur:  # a row in each table makes its topic
            for t in TABLES:
                cur.execute(f"INSERT INTO {t} VALUES (0, 'seed', 0, 0, false, now())")
            cur.execute("INSERT INTO probe VALUES (0, now())")
        deadline = time.monotonic() + 120
        while len(self.ends()) < 3 * (len(TABLES) + 1):
            if time.monotonic() > deadline:
                raise TimeoutError("the connector made no topics in 120 s")
            time.sleep(1.0)

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A cursor of an autocommit connection."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn, conn.cursor() as cur:
            yield cur

    def execute(self, sql: str) -> None:
        """Run statements, each its own transaction."""
        with self.cursor() as cur:
            cur.execute(sql)

    def ends(self) -> dict[tuple[str, int], int]:
        """The end offset of every partition of the tables' topics."""
        from cdcflow.testing.kafka import end_offsets

        found = end_offsets(self.kafka.bootstrap, PREFIX)
        return {k: v for k, v in found.items() if k[0].startswith(f"{PREFIX}.public.")}

    def _lsn(self, sql: str) -> int:
        from cdcflow.positions import pg_lsn

        with self.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
        return int(pg_lsn(str(row[0])))

    def connector_lsn(self) -> int:
        """The WAL position of the connector's last flushed offset (0 while it restarts)."""
        assert self.connect is not None
        try:
            offsets = self.connect.offsets(PREFIX)
        except Exception:  # the worker is being restarted
            return 0
        for o in offsets:
            found = (o.get("offset") or {}).get("lsn")
            if isinstance(found, int):
                return found
        return 0

    def settle(self, timeout: float = 900.0) -> dict[tuple[str, int], int]:
        """Wait until the connector has produced everything committed so far (a fence
        transaction after it moves the connector past it); the topics' ends then."""
        end = self._lsn("SELECT pg_current_wal_lsn()::text")
        self.execute("UPDATE probe SET at = at WHERE n = 0")
        deadline = time.monotonic() + timeout
        while self.connector_lsn() < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the connector did not reach the WAL's end in {timeout} s")
            time.sleep(0.5)
        return self.ends()

    def stop(self) -> None:
        """Stop every server."""
        if self.connect is not None:
            self.connect.stop()
        self.kafka.stop()
        self.postgres.stop()


# --------------------------------------------------------------------------- the workload


@dataclass
class WorkStats:
    """What the workload's sessions did."""

    transactions: int = 0
    changes: int = 0
    rolled_back: int = 0
    moves: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, changes: int, ok: bool, moves: int = 0) -> None:
        with self.lock:
            if ok:
                self.transactions += 1
                self.changes += changes
                self.moves += moves
            else:
                self.rolled_back += 1


class Workload:
    """``SESSIONS`` sessions writing transactions of 1–3 changes (updates, inserts, deletes,
    primary-key changes) at a fixed total rate, and a probe row inserted every second."""

    def __init__(self, url: str, rate: float, keys: int, seed: int, first_key: int) -> None:
        self.url = url
        self.rate = rate
        self.keys = keys
        self.seed = seed
        self.next_key = first_key
        self.stats = WorkStats()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def fresh(self) -> int:
        with self._lock:
            self.next_key += 1
            return self.next_key

    def start(self) -> None:
        for s in range(SESSIONS):
            t = threading.Thread(target=self._session, args=(s,), daemon=True)
            self._threads.append(t)
            t.start()
        probe = threading.Thread(target=self._probe, daemon=True)
        self._threads.append(probe)
        probe.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads = []
        self._stop.clear()

    def _session(self, s: int) -> None:
        import psycopg

        rng = random.Random(self.seed * 100 + s)
        every = SESSIONS / self.rate
        started = time.monotonic()
        i = 0
        with psycopg.connect(self.url) as conn:
            while not self._stop.is_set():
                i += 1
                wait = started + i * every - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                n, moves = 0, 0
                try:
                    with conn.transaction(), conn.cursor() as cur:
                        for _ in range(rng.randint(1, 3)):
                            moved = self._change(cur, rng)
                            n += 1
                            moves += moved
                    self.stats.add(n, True, moves)
                except psycopg.errors.Error:
                    self.stats.add(n, False)

    def _change(self, cur: Any, rng: random.Random) -> int:
        t = rng.choice(TABLES)
        key = rng.randint(1, self.keys) if rng.random() < 0.7 else rng.randint(FRESH, self.next_key)
        r = rng.random()
        if r < 0.6:
            cur.execute(
                f"UPDATE {t} SET qty = qty + 1, score = %s, flag = NOT flag, "
                "updated_at = clock_timestamp() WHERE id = %s",
                (rng.random() * 1000, key),
            )
        elif r < 0.8:
            new = self.fresh()
            cur.execute(
                f"INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, clock_timestamp())",
                (new, f"new-{new}", rng.randint(0, 999), rng.random(), rng.random() < 0.5),
            )
        elif r < 0.9:
            cur.execute(f"DELETE FROM {t} WHERE id = %s", (key,))
        else:
            cur.execute(
                f"UPDATE {t} SET id = %s, updated_at = clock_timestamp() WHERE id = %s",
                (self.fresh(), key),
            )
            return 1
        return 0

    def _probe(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            n = conn.execute("SELECT coalesce(max(n), 0) FROM probe").fetchone()[0]  # type: ignore[index]
            while not self._stop.wait(1.0):
                n += 1
                conn.execute("INSERT INTO probe VALUES (%s, clock_timestamp())", (n,))

    def moves(self, count: int = 20) -> int:
        """The primary-key fault: ``count`` rows each moved to a new key (most to another
        partition: 3 per topic), the old key inserted again at once and the moved row
        updated; the number of moves made."""
        import psycopg

        rng = random.Random(self.seed)
        made = 0
        with psycopg.connect(self.url, autocommit=True) as conn:
            for _ in range(count):
                t = rng.choice(TABLES)
                row = conn.execute(
                    f"SELECT id FROM {t} WHERE id BETWEEN 1 AND %s ORDER BY random() LIMIT 1",
                    (self.keys,),
                ).fetchone()
                if row is None:
                    continue
                old, new = int(row[0]), self.fresh()
                conn.execute(f"UPDATE {t} SET id = %s WHERE id = %s", (new, old))
                conn.execute(
                    f"INSERT INTO {t} VALUES (%s, 'back', 1, 1.5, true, clock_timestamp())", (old,)
                )
                conn.execute(f"UPDATE {t} SET qty = qty + 7 WHERE id = %s", (new,))
                made += 1
        return made


# --------------------------------------------------------------------------- the two systems


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
        from cdcflow.testing.live.scenario import Follower

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
        from cdcflow.testing.live.scenario import applied

        return applied(self.checkpoint, ends)

    def commits(self) -> int:
        """The newest committed batch's number."""
        found = [int(p.name) for p in self.checkpoint.glob("sources/*/query/commits/[0-9]*")]
        return max(found, default=0)


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
        _log(
            f"(i) {stats['changes']:,} changes in the topics ({stats['records']:,} records) "
            f"after {stats['fill_seconds']:.0f}s"
        )
        out: dict[str, Any] = {"workload": stats}
        for s in self.systems:
            load = _load()
            s.start()
            seconds = _wait(s, ends, timeout=7200)
            time.sleep(_seconds(INTERVAL))  # Flink's sink commits right after the offsets
            s.stop()
            out[s.name] = {"seconds": seconds, "load_before": load, "load_after": _load()}
            _log(f"(i) {s.name}: {seconds:.1f}s to the topics' ends (load {load})")
        for s in self.systems:
            out[s.name].update(compare(self.session(), self.stack, s.namespace))
            if s.name == "cdcflow":
                out[s.name]["history"] = history(self.session(), s.namespace, 0)
            equal = out[s.name]["equal"]
            _log(f"(i) {s.name}: " + ("replicas equal" if equal else "REPLICAS DIFFER"))
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
            load = _load()
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
                "load_after": _load(),
            }
            found.update(lags(spark, self.stack, s.namespace, since))
            found.update(compare(spark, self.stack, s.namespace))
            if s.name == "cdcflow":
                found["history"] = history(spark, s.namespace, first_batch)
            out[s.name] = found
            _log(f"({'ii' if kind == 'steady' else 'iii'}) {s.name}: {_line(found)}")
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
            load = _load()
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
            found["load_after"] = _load()
            found.update(compare(spark, self.stack, s.namespace))
            out[s.name] = found
            _log(
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
    spec["restore"] = "<latest retained checkpoint, on every start after the first>"
    ddl, inserts = peer_flink.statements({**spec, "tables": spec["tables"][:1]})
    return {
        "flink": {
            "versions": {
                "flink": peer_setup.FLINK,
                "iceberg_flink_runtime": peer_setup.ICEBERG,
                "kafka_connector": peer_setup.KAFKA_CONNECTOR,
            },
            "job": peer_flink.job_settings(spec),
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
            "machine": {"cores": os.cpu_count(), "load_at_start": _load()},
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
