"""The live oracle's own rules, without services: Debezium's interval arithmetic, comparable
values, matching replica snapshots with transaction boundaries, the fault schedule."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from cdcflow.testing.live import oracle
from cdcflow.testing.live.report import Plan

COLS = [oracle.Column("id", "integer", "int"), oracle.Column("v", "text", "text")]


def test_intervals_are_debeziums_microseconds() -> None:
    # PostgreSQL's (year, month, day, hour, minute, microseconds) fields → what the connector
    # sent for the same intervals (tests/data/debezium/postgresql)
    assert oracle.debezium_interval((1, 2, 3, 4, 5, Decimal("6789000"))) == 37_091_106_789_000
    assert oracle.debezium_interval((0, 0, -3, -4, -5, Decimal("-6500000"))) == -273_906_500_000
    assert oracle.debezium_interval((0, -1, 0, 0, 0, 0)) == -2_629_800_000_000
    # the seconds are a double: 0.000249 s is 248.99999999999997 µs, truncated
    assert oracle.debezium_interval((0, 0, 0, 0, 0, Decimal("249"))) == 248


def test_comparable_values() -> None:
    digits = "12345678901234567890.123456789012345678"
    assert oracle.normal(Decimal(digits), "decimal", "source") == Decimal(digits)
    assert oracle.normal(Decimal("2.50"), "decimal", "source") == Decimal("2.5")
    assert oracle.normal(Decimal("NaN"), "decimal", "source") is None  # Debezium sends null
    assert oracle.normal(0.1, "float", "source") == oracle.normal(0.10000000149011612, "float", "r")
    assert oracle.normal(float("nan"), "double", "source") == "NaN"
    assert oracle.normal("24:00:00", "time", "source") == "24:00:00.000000"
    assert oracle.normal("13:14:15.5", "time", "source") == "13:14:15.500000"
    assert oracle.normal(bytearray(b"\x00"), "bytes", "replica") == b"\x00"


def _boundaries(changes: list[tuple[int, str, tuple | None, tuple | None]]) -> oracle.Boundaries:
    b = oracle.Boundaries("t", COLS, (0,), [0], [0])
    state: dict[tuple, tuple] = {}
    for seq, op, old, new in changes:
        if op == "T":
            state.clear()
        else:
            if old is not None:
                state.pop(old, None)
            if new is not None:
                state[(new[0],)] = new
        b.changes.append((seq, op, old, new))
        b.seqs.append(seq)
        b.fingerprints.append(oracle.fingerprint(state.values()))
    return b


def test_snapshots_match_boundaries_that_never_go_back() -> None:
    b = _boundaries(
        [
            (1, "I", None, (1, "a")),
            (2, "I", None, (2, "b")),
            (3, "U", (1,), (1, "c")),
            (5, "T", None, None),
            (5, "I", None, (3, "d")),  # TRUNCATE and an insert in one transaction
        ]
    )
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = {
        10: [(1, "a"), (2, "b")],
        11: [(1, "c"), (2, "b")],
        12: [],  # the table emptied: the TRUNCATE's transaction also inserted
        13: [(1, "a"), (2, "b")],  # back to an older state
        14: [(3, "d")],
    }
    matches = oracle.match_snapshots(b, [(s, at) for s in rows], rows)
    assert [m.seq for m in matches] == [2, 3, None, None, 5]
    assert matches[2].detail == "nearest boundary: commit 5, missing in the replica: key id=3"
    assert matches[3].detail.startswith("nearest boundary: commit 3, key id=1: v: source 'c'")


def test_the_first_difference_names_the_key_and_the_columns() -> None:
    d = oracle.compare([(1, "a"), (2, "b")], [(1, "x"), (2, "b"), (3, "c")])
    assert not d.equal and (d.source_rows, d.replica_rows) == (2, 3)
    assert oracle.first_difference(COLS, d, (0,)) == "key id=1: v: source 'a' replica 'x'"


def test_faults_are_spread_over_the_run() -> None:
    faults = Plan(duration=100.0).faults()
    assert [k for _, k in faults] == ["connect", "cdcflow", "broker", "connect", "cdcflow"]
    assert all(0 < t < 90 for t, _ in faults) and faults == sorted(faults)
