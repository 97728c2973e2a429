"""The live producer, short: PostgreSQL → Debezium's PostgreSQL connector in Kafka Connect →
the session's broker → ``cdcflow run --follow`` with ``consistency: transactions`` → Iceberg,
with one fault of each kind (Kafka Connect and ``cdcflow run`` killed, the broker restarted),
the database as the oracle (``cdcflow.testing.live``; ``make live-demo`` is the long run)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

from cdcflow.testing.live.report import Plan, Report
from cdcflow.testing.live.scenario import LiveRun
from cdcflow.testing.live.schema import TABLES
from cdcflow.testing.live.workload import Settings

# the live stack with its faults is a crash test of the Spark 4 line (tests/crashing.py)
pytestmark = [pytest.mark.spark, pytest.mark.line("4")]

_runs = itertools.count()
#: About a minute of workload: one fault of each kind, the whole run under four minutes.
PLAN = Plan(
    duration=70.0,
    connect_kills=1,
    cdcflow_kills=1,
    broker_restarts=1,
    settings=Settings(
        sessions=3, tx_per_second=10.0, customers=60, orders=80, documents=10, ledger=40
    ),
)


@pytest.fixture(scope="module")
def live(spark: Any, kafka: Any, postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Report:
    """One live run on the session's broker, PostgreSQL server and catalog."""
    root: Path = tmp_path_factory.mktemp("live")
    run = LiveRun(
        root,
        PLAN,
        prefix=f"live{next(_runs)}",
        kafka=kafka,
        postgres=postgres,
        warehouse=spark.conf.get("spark.sql.catalog.cdc.warehouse"),
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    report = run.run(lambda: spark)
    print("\n".join(report.lines()), file=sys.stderr)
    return report


def _text(report: Report) -> str:
    return "\n".join(report.lines())


def test_every_replica_equals_its_table(live: Report) -> None:
    assert [t.table for t in live.tables] == [t.name for t in TABLES], _text(live)
    assert all(t.source_rows > 0 and not t.difference for t in live.tables), _text(live)


@pytest.mark.parametrize("table", [t.name for t in TABLES])
def test_every_snapshot_is_at_a_transaction_boundary(live: Report, table: str) -> None:
    (result,) = [t for t in live.tables if t.table == table]
    assert result.snapshots > 1, _text(live)
    assert result.snapshots_matched == result.snapshots, _text(live)


def test_one_fault_of_each_kind_and_nothing_dead_lettered(live: Report) -> None:
    assert sorted(f.kind for f in live.faults) == ["broker", "cdcflow", "connect"], _text(live)
    assert "killed (SIGKILL)" in live.cdcflow_runs, _text(live)
    assert live.dead_letters == [], _text(live)


def test_the_lag_is_measured(live: Report) -> None:
    """Every transaction committed while the pipeline ran is seen in a replica snapshot; the
    connector caught up once the workload stopped."""
    assert len(live.lags) > 100 and all(0 < lag < 300 for lag in live.lags), _text(live)
    assert 0 < live.connector_catch_up < 120 and live.connector_lag_bytes, _text(live)
