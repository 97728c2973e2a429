"""One live run: services up, the table set and its rows, the connector started while the
sessions write (its snapshot overlaps the stream), ``cdcflow run --follow`` reading the
connector's topics, faults injected on a schedule, catch-up measured, then the checks:

- every replica equals ``SELECT *`` of its table under the type mapping;
- every Iceberg snapshot of every replica (time travel) equals the table at some transaction
  boundary, boundaries never going back (``consistency: transactions``);
- no dead letters;
- end-to-end lag: for each transaction, from its commit in PostgreSQL to the commit of the
  first replica snapshot showing it (median and p95), and the connector's lag behind the WAL.

Faults: Kafka Connect killed (SIGKILL) and started again (it produces again what it sent
after its last offset flush), ``cdcflow run`` killed (SIGKILL, the process group) and run
again, the broker stopped and started. A ``cdcflow run`` that exits by itself (e.g. while the
broker is away) is started again and reported.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cdcflow.testing.kafka import end_offsets
from cdcflow.testing.live import oracle
from cdcflow.testing.live.follower import Follower, applied
from cdcflow.testing.live.report import Fault, Plan, Report, TableResult
from cdcflow.testing.live.schema import TABLES, connector_config
from cdcflow.testing.live.workload import Workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.testing.services.connect import KafkaConnect
    from cdcflow.testing.services.kafka import KafkaBroker
    from cdcflow.testing.services.postgres import Postgres

#: Columns compared by their SHA-256 in snapshot checks (large text).
HASHED: dict[str, frozenset[str]] = {
    "documents": frozenset({"body"}),
    "orders": frozenset({"note"}),
}
#: A driver JVM for a pipeline that runs a few minutes on a small machine.
PIPELINE_CONF = {
    "spark.driver.memory": "1g",
    # the quick compiler alone fills the default code cache of 48 MB within minutes
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"
    ),
    "spark.ui.enabled": "false",
}


class LiveRun:
    """A live run in ``root``. ``kafka`` and ``postgres`` are running servers to use (the
    run restarts the broker as a fault); without them the run starts its own."""

    def __init__(
        self,
        root: Path,
        plan: Plan,
        *,
        prefix: str = "live",
        kafka: KafkaBroker | None = None,
        postgres: Postgres | None = None,
        warehouse: str | None = None,
        log: Callable[[str], None] = print,
        conf: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root.resolve()
        self.plan = plan
        self.prefix = prefix
        self.namespace = prefix
        self.database = prefix
        self.kafka = kafka
        self.postgres = postgres
        self.warehouse = warehouse or str(self.root / "warehouse")
        self.log = log
        #: Spark settings of the pipeline beside :data:`PIPELINE_CONF` (e.g. an event log)
        self.conf = dict(conf or {})
        self.report = Report()
        self._own: list[Any] = []
        self._started = 0.0
        self._connector_started = dt.datetime.now(dt.UTC)
        self.connect: KafkaConnect | None = None
        self.follower: Follower | None = None

    # ------------------------------------------------------------------ services

    def _services(self) -> None:
        from cdcflow.testing.services.connect import KafkaConnect
        from cdcflow.testing.services.kafka import KafkaBroker
        from cdcflow.testing.services.postgres import Postgres

        if self.kafka is None:
            self.kafka = KafkaBroker(self.root / "kafka")
            self._own.append(self.kafka)
            self.kafka.start()
        if self.postgres is None:
            self.postgres = Postgres(self.root / "postgres" / "data")
            self._own.append(self.postgres)
            self.postgres.start()
        self.postgres.superuser(
            f"""SELECT format('CREATE DATABASE %I OWNER %I', '{self.database}', :'user')
                WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '{self.database}')
                \\gexec"""
        )
        self.connect = KafkaConnect(self.root / "connect", self.kafka.bootstrap)
        self.connect.start()

    @property
    def url(self) -> str:
        """The workload database's libpq URL."""
        assert self.postgres is not None
        p = self.postgres
        return f"postgresql://{p.user}:{p.password}@127.0.0.1:{p.port}/{self.database}"

    def config(self) -> Path:
        """The pipeline configuration: one ``kafka:`` source over the connector's topics."""
        assert self.kafka is not None
        cfg = {
            "pipeline": self.namespace,
            "checkpoint": str(self.root / "checkpoint"),
            "namespace": self.namespace,
            "catalog": {"name": "cdc", "warehouse": self.warehouse},
            "spark": {
                "master": "local[2]",
                "shuffle_partitions": 2,
                "conf": {**PIPELINE_CONF, **self.conf},
            },
            "consistency": self.plan.consistency,
            "follow_interval": self.plan.follow_interval,
            "sources": [
                {
                    "name": "pg",
                    "dialect": "debezium",
                    "kafka": {
                        "bootstrap_servers": self.kafka.bootstrap,
                        "pattern": self.prefix.replace(".", "\\.") + "\\..*",
                    },
                }
            ],
        }
        path = self.root / "pipeline.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    # ------------------------------------------------------------------ the run

    def run(self, spark: Callable[[], SparkSession]) -> Report:
        """The whole run; ``spark`` gives the session the checks read replicas with (asked
        for once the pipeline has stopped). Services the run started are stopped, also on
        failure."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            return self._run(spark)
        finally:
            self.close()

    def _run(self, spark: Callable[[], SparkSession]) -> Report:
        t0 = time.monotonic()
        self._services()
        assert self.kafka is not None and self.postgres is not None and self.connect is not None
        workload = Workload(self.url, self.plan.settings)
        workload.setup()
        self._mark("services and rows", t0)

        self._started = time.monotonic()
        workload.start(self.plan.duration)
        time.sleep(min(3.0, self.plan.duration / 10))  # the snapshot overlaps the sessions
        p = self.postgres
        self.connect.add(
            self.prefix,
            connector_config(
                port=p.port,
                database=self.database,
                user=p.user,
                password=p.password,
                prefix=self.prefix,
            ),
        )
        # transactions before it are the snapshot's: they do not count for the lag
        self._connector_started = dt.datetime.now(dt.UTC)
        self.log(f"connector {self.prefix} started at {self._now():.1f}s, snapshot under way")
        self._wait_for_topics()
        self.follower = Follower(self.config(), self.root / "cdcflow.log")
        self.follower.start()
        self.log(f"cdcflow run --follow started at {self._now():.1f}s")

        sampler = threading.Thread(target=self._sample_lag, name="live-lag", daemon=True)
        sampler.start()
        for at, kind in self.plan.faults():
            while self._now() < at:
                time.sleep(0.2)
            self._inject(kind)
        workload.join()
        self._mark("workload", self._started)

        self._caught_up(workload)
        self._mark("catch-up", self._started + self.plan.duration)
        self.follower.stop()
        self.report.cdcflow_runs = list(self.follower.runs)
        self.report.committed = dict(workload.stats.committed)
        self.report.rolled_back = dict(workload.stats.rolled_back)
        t1 = time.monotonic()
        self._check(spark())
        self._mark("checks", t1)
        return self.report

    def _now(self) -> float:
        return time.monotonic() - self._started

    def _mark(self, what: str, since: float) -> None:
        self.report.seconds[what] = time.monotonic() - since

    def _inject(self, kind: str) -> None:
        assert self.connect is not None and self.kafka is not None and self.follower is not None
        fault = Fault(self._now(), kind)
        t = time.monotonic()
        if kind == "connect":
            self.connect.kill()
            self.connect.start()
            fault.outcome = (
                f"Kafka Connect SIGKILLed, running again after {time.monotonic() - t:.1f}s"
            )
        elif kind == "cdcflow":
            self.follower.kill()
            fault.outcome = "cdcflow run SIGKILLed (process group) and started again"
        else:
            self.kafka.stop()
            self.kafka.start()
            fault.outcome = f"broker stopped and started, serving after {time.monotonic() - t:.1f}s"
        self.log(f"fault at {fault.at:.1f}s: {fault.outcome}")
        self.report.faults.append(fault)

    def _wait_for_topics(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._end_offsets():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the connector created no topic in {timeout:.0f}s")
            time.sleep(0.5)

    def _end_offsets(self) -> dict[tuple[str, int], int]:
        assert self.kafka is not None
        return end_offsets(self.kafka.bootstrap, self.prefix)

    # ------------------------------------------------------------------ lag and catch-up

    def _wal_lsn(self) -> int:
        import psycopg

        from cdcflow.positions import pg_lsn

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return int(pg_lsn(str(row[0])))

    def _connector_lsn(self) -> int | None:
        assert self.connect is not None
        try:
            offsets = self.connect.offsets(self.prefix)
        except Exception:  # the worker is being restarted
            return None
        for o in offsets:
            found = (o.get("offset") or {}).get("lsn")
            if isinstance(found, int):
                return found
        return None

    def _sample_lag(self) -> None:
        while self.follower is not None and not self.follower.stopping:
            lsn = self._connector_lsn()
            if lsn is not None:
                self.report.connector_lag_bytes.append(max(0, self._wal_lsn() - lsn))
            time.sleep(1.0)

    def _caught_up(self, workload: Workload, timeout: float = 300.0) -> None:
        """Wait until the connector's flushed offset passes the WAL position after the last
        workload commit (a fence transaction after it makes the connector move past it), then
        until cdcflow has committed a batch up to every partition's end."""
        import psycopg

        end = self._wal_lsn()
        last_commit = time.monotonic()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO ledger (account, entry, amount, memo) "
                "VALUES (-1, -1, 0, 'fence') ON CONFLICT DO NOTHING"
            )
        deadline = time.monotonic() + timeout
        while (self._connector_lsn() or 0) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the connector did not reach {end} in {timeout:.0f}s")
            time.sleep(0.2)
        self.report.connector_catch_up = time.monotonic() - last_commit
        self.log(f"connector caught up {self.report.connector_catch_up:.1f}s after the last commit")
        ends = self._end_offsets()
        while not self._applied(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"cdcflow did not reach the topics' ends in {timeout:.0f}s")
            time.sleep(0.5)
        self.log(f"cdcflow caught up at {self._now():.1f}s")

    def _applied(self, ends: dict[tuple[str, int], int]) -> bool:
        return applied(self.root / "checkpoint", ends)

    # ------------------------------------------------------------------ checks

    def _check(self, spark: SparkSession) -> None:
        import psycopg

        commits: dict[int, dt.datetime] = {}
        with psycopg.connect(self.url, autocommit=True) as conn:
            for seq, at in conn.execute("SELECT seq, at FROM live_commits").fetchall():
                commits[int(seq)] = at
            touched: dict[int, set[str]] = {}
            for seq, tbl in conn.execute(
                "SELECT DISTINCT c.seq, ch.tbl FROM live_changes ch "
                "JOIN live_commits c ON c.xid = ch.xid"
            ).fetchall():
                touched.setdefault(int(seq), set()).add(str(tbl))
            visible: dict[int, dict[str, dt.datetime]] = {}
            for spec in TABLES:
                cols = oracle.columns(conn, spec.name)
                key = tuple(c.name for c in cols if c.name in spec.key)
                ident = f"cdc.{self.namespace}.{spec.name}"
                hashed = HASHED.get(spec.name, frozenset())
                source = oracle.source_rows(conn, spec.name, cols, frozenset())
                replica = oracle.replica_rows(spark, ident, cols, frozenset())
                d = oracle.compare(source, replica)
                key_index = tuple(i for i, c in enumerate(cols) if c.name in spec.key)
                result = oracle_result(spec.name, cols, d, key_index)
                b = oracle.boundaries(conn, spec.name, key, cols, hashed)
                final = list(b.final.values())
                hashed_source = oracle.source_rows(conn, spec.name, cols, hashed)
                if not oracle.compare(hashed_source, final).equal:
                    raise AssertionError(f"{spec.name}: the recorded changes do not rebuild it")
                snaps = [
                    (int(r[0]), dt.datetime.fromtimestamp(r[1] / 1000, dt.UTC))
                    for r in spark.sql(
                        f"SELECT snapshot_id, unix_millis(committed_at) FROM {ident}.snapshots "
                        "ORDER BY committed_at, snapshot_id"
                    ).collect()
                ]
                rows = oracle.replica_snapshots(spark, ident, cols, hashed, [s for s, _ in snaps])
                matches = oracle.match_snapshots(b, snaps, rows)
                result.snapshots = len(matches)
                result.snapshots_matched = sum(m.seq is not None for m in matches)
                result.snapshot_failures = [
                    f"{m.snapshot} at {m.committed_at}: {m.detail}"
                    for m in matches
                    if m.seq is None
                ][:3]
                self.report.tables.append(result)
                for m in matches:
                    if m.seq is None:
                        continue
                    for seq in range(1, m.seq + 1):
                        if spec.name in touched.get(seq, ()):
                            visible.setdefault(seq, {}).setdefault(spec.name, m.committed_at)
        lags = _lags(commits, touched, visible, self._connector_started)
        self.report.lag_commits = [at for at, _ in lags]
        self.report.lags = [lag for _, lag in lags]
        dead_letters = f"cdc.{self.namespace}__cdcflow.dead_letters"
        if spark.catalog.tableExists(dead_letters):  # made by the first dead letter
            dead = spark.sql(f"SELECT error_code, error_message FROM {dead_letters}").collect()
            self.report.dead_letters = [f"[{r[0]}] {r[1]}" for r in dead]

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Stop what the run started: cdcflow, Kafka Connect, the replication slot, the
        servers it started itself."""
        if self.follower is not None:
            self.follower.stop()
        if self.connect is not None:
            self.connect.stop()
        if self.postgres is not None and self.postgres not in self._own:
            try:
                self.postgres.superuser(
                    f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    f"WHERE slot_name = '{self.prefix}'"
                )
            except Exception as e:  # the server may be gone already
                self.log(f"could not drop replication slot {self.prefix}: {e}")
        for server in reversed(self._own):
            server.stop()


def oracle_result(
    table: str, cols: list[oracle.Column], d: oracle.Difference, key: tuple[int, ...]
) -> TableResult:
    """A table's result from the difference of its source and replica rows."""
    return TableResult(
        table,
        d.source_rows,
        d.replica_rows,
        "" if d.equal else oracle.first_difference(cols, d, key),
    )


def _lags(
    commits: dict[int, dt.datetime],
    touched: dict[int, set[str]],
    visible: dict[int, dict[str, dt.datetime]],
    since: dt.datetime,
) -> list[tuple[dt.datetime, float]]:
    """(commit time, seconds from the commit to the first snapshot commit that shows it in
    every table it changed) of each transaction."""
    out = []
    for seq, at in commits.items():
        if at < since or seq not in visible:
            continue
        seen = visible[seq]
        if set(seen) != touched.get(seq, set()):
            continue
        out.append((at, (max(seen.values()) - at).total_seconds()))
    return out
