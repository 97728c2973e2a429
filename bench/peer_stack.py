"""The peer bench's world: PostgreSQL → Debezium's connector in Kafka Connect → Kafka (the
project's own services), the tables and their catch-up fill, and the transactions a steady
workload commits at a fixed rate with a probe row whose commit time gives each lag."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def log_line(text: str) -> None:
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
