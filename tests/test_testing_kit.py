"""The testing kit: reproducible workloads, a correct oracle, faithful renderers."""

from __future__ import annotations

import collections
import datetime as dt
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.dialects.savegress.render import render_messages, render_to_landing
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import Change, TableDef, generate
from cdcflow.testing.compare import ReplicaComparison, diff_table


def test_same_seed_same_workload() -> None:
    assert generate(5, transactions=40) == generate(5, transactions=40)
    assert generate(5, transactions=40) != generate(6, transactions=40)


def test_every_feature_appears() -> None:
    w = generate(11, transactions=400)
    kinds = collections.Counter(c.kind for c in w.changes())
    assert {"insert", "update", "delete", "truncate", "add_column"} <= set(kinds)
    updates = [c for c in w.changes() if c.kind == "update"]
    assert any(c.changed for c in updates), "no partial update"
    assert any(c.before and {k: c.before[k] for k in c.key} != c.key for c in updates), (
        "no PK change"
    )
    inserted: dict[tuple, int] = collections.Counter(
        (c.table, tuple(c.key.items())) for c in w.changes() if c.kind == "insert"
    )
    assert any(n > 1 for n in inserted.values()), "no re-insert of a deleted key"
    assert len({c.table for c in w.changes()}) == 3
    assert any(len({c.table for c in tx.changes}) > 1 for tx in w.transactions)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10**6))
def test_oracle_never_sees_impossible_changes(seed: int) -> None:
    w = generate(seed, transactions=60)
    result = oracle.apply(w)  # asserts on impossible changes
    for name, rows in result.items():
        cols = list(w.tables[name].columns)
        for row in rows.values():
            assert list(row) == cols


def _ch(
    kind: str, key: dict, before: dict | None = None, after: dict | None = None, **kw: object
) -> Change:
    return Change(
        kind,
        "t",
        key,
        before,
        after,
        txid="x",
        lsn=1,
        seq=1,
        commit_time=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        **kw,
    )  # type: ignore[arg-type]


def test_oracle_hand_cases() -> None:
    t = {"t": TableDef("t", ("id",), {"id": "bigint", "v": "string", "x": "bigint"})}
    changes = [
        _ch("insert", {"id": 1}, after={"id": 1, "v": "a"}),
        _ch("insert", {"id": 2}, after={"id": 2, "v": "b"}),
        _ch("update", {"id": 3}, before={"id": 1, "v": "a"}, after={"id": 3, "v": "a"}),
        _ch("delete", {"id": 2}, before={"id": 2, "v": "b"}),
        _ch("insert", {"id": 2}, after={"id": 2, "v": "again"}),
        _ch("add_column", {}, column="x", column_type="bigint"),
        _ch(
            "update",
            {"id": 2},
            before={"id": 2, "v": "again"},
            after={"id": 2, "v": "again", "x": 7},
        ),
    ]
    got = oracle.apply(changes, t)["t"]
    assert got == {(3,): {"id": 3, "v": "a", "x": None}, (2,): {"id": 2, "v": "again", "x": 7}}
    assert oracle.apply([*changes, _ch("truncate", {})], t)["t"] == {}


def test_renderer_values_follow_the_spec_type_table() -> None:
    w = generate(2, transactions=80)
    docs = render_messages(w)
    assert len(docs) == sum(1 for _ in w.changes())
    some = next(d for d in docs if d["table"] == "accounts" and d["operation"] == "INSERT")
    after = some["after"]
    if after["balance"] is not None:
        assert isinstance(after["balance"], str)
        Decimal(after["balance"])
    if after["opened"] is not None:
        assert after["opened"].endswith("Z")
    assert some["position"]["lsn"].count("/") == 1


def test_render_to_landing_faults(tmp_path: Path) -> None:
    w = generate(4, transactions=60)
    res = render_to_landing(
        w,
        tmp_path,
        seed=4,
        duplicates=0.5,
        redeliver_files=1,
        batch_envelopes=True,
        kafka_form=True,
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(p.name for p in res.files)
    assert not any(n.startswith("_") for n in names)
    assert len(res.files) == 5  # 4 + one redelivered
    batches = [
        orjson.loads(line)
        for p in res.files
        for line in p.read_bytes().splitlines()
        if b'"batch_id"' in line[:20]
    ]
    assert batches and all(b["batch_size"] == len(b["events"]) for b in batches)
    assert res.messages > sum(1 for _ in w.changes())  # duplicates were added


def test_a_replicas_first_difference_is_said_column_by_column() -> None:
    """One row with another value is said by its key and the differing column; a row on one
    side only is said whole; the other differing replicas are named."""
    cols, key = ["id", "name", "n"], ["id"]
    expected = [{"id": 1, "name": "a", "n": 1}, {"id": 2, "name": "b", "n": 2}]
    other = diff_table("t", expected, [expected[0], {**expected[1], "n": 3}], cols, key)
    assert (other.expected, other.actual, other.equal) == (2, 2, False)
    assert (
        other.first_difference()
        == "t: 2 rows expected, 2 in the replica; key id=2: n expected 2, replica 3"
    )
    gone = diff_table("u", expected, expected[:1], cols, key)
    assert (
        gone.first_difference()
        == "u: 2 rows expected, 1 in the replica; missing: id=2, name='b', n=2"
    )
    extra = diff_table("v", expected[:1], expected, cols, key)
    assert (
        extra.first_difference()
        == "v: 1 rows expected, 2 in the replica; unexpected: id=2, name='b', n=2"
    )
    same = diff_table("w", expected, list(reversed(expected)), cols, key)
    assert same.equal and same.first_difference() == ""
    found = ReplicaComparison((same, other, gone))
    assert found.first_difference() == other.first_difference() + " (also differing: u)"
    with pytest.raises(AssertionError, match="key id=2: n expected 2, replica 3"):
        found.assert_equal()
    ReplicaComparison((same,)).assert_equal()
