"""The ``append`` sink: a changelog of canonical events per table, each event once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.scenario import config, ev, land, rows, run

pytestmark = pytest.mark.spark


def test_changelog_keeps_every_event_once(spark: Any, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        "append_t",
        keys={"audit": ["id"]},
        tables={"audit": {"mode": "append"}},
    )
    first = [
        ev("INSERT", "audit", 10, after={"id": 1, "v": "a"}, id="e1"),
        ev("UPDATE", "audit", 20, before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"}, id="e2"),
        ev("DELETE", "audit", 30, before={"id": 1, "v": "b"}, id="e3"),
    ]
    land(tmp_path / "landing", first)
    land(tmp_path / "landing", first[:2])  # redelivered in the same batch
    run(spark, cfg)
    # a later run redelivers everything and adds one new event with a new column
    land(
        tmp_path / "landing",
        [*first, ev("INSERT", "audit", 40, after={"id": 2, "v": "c", "n": 7}, id="e4")],
    )
    run(spark, cfg)

    got = rows(
        spark,
        cfg,
        "audit",
        "_cdc.event_id AS id, _cdc.operation AS op, _cdc.sequence AS seq, "
        "before.v AS before_v, after.v AS after_v, after.n AS n",
    )
    assert [(r["id"], r["op"], r["before_v"], r["after_v"], r["n"]) for r in got] == [
        ("e1", "INSERT", None, "a", None),
        ("e2", "UPDATE", "a", "b", None),
        ("e3", "DELETE", "b", None, None),
        ("e4", "INSERT", None, "c", 7),
    ]
    seqs = [r["seq"] for r in got]
    assert seqs == sorted(seqs)  # the sequence column orders the history
