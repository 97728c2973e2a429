"""Consistency mode: events wait for their transaction's COMMIT (`transactions`) or for a
RESOLVED watermark of their table (`resolved`), across batches and runs; nothing half-applied
is ever visible, and everything is applied once the consistent point arrives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _table_rows(spark: Any, cfg: Any, table: str, cols: str) -> list[dict[str, Any]]:
    from tests.scenario import rows

    if not spark.catalog.tableExists(f"cdc.{cfg.namespace}.{table}"):
        return []
    return rows(spark, cfg, table, cols)


def test_transactions_wait_for_their_commit(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import config, ev, land, run

    cfg = config(tmp_path, "cons_tx", keys={"t": ["id"], "u": ["id"]}, consistency="transactions")
    landing = tmp_path / "landing"
    begin = {"operation": "BEGIN", "transaction_id": "tx-1"}
    commit = {"operation": "COMMIT", "transaction_id": "tx-1"}
    land(
        landing,
        [
            begin,
            ev("INSERT", "t", 10, after={"id": 1, "v": "a"}, transaction_id="tx-1"),
            ev("INSERT", "u", 11, after={"id": 1, "v": "x"}, transaction_id="tx-1"),
            ev("INSERT", "t", 5, after={"id": 9, "v": "alone"}),  # no transaction: applied
        ],
    )
    reports = run(spark, cfg)
    assert _table_rows(spark, cfg, "t", "id, v") == [{"id": 9, "v": "alone"}]
    assert _table_rows(spark, cfg, "u", "id, v") == []
    assert sum(r.held for r in reports) == 2
    # a run with more of the transaction and an unrelated one: still held
    land(landing, [ev("UPDATE", "t", 12, after={"id": 1, "v": "b"}, transaction_id="tx-1")])
    run(spark, cfg)
    assert _table_rows(spark, cfg, "t", "id, v") == [{"id": 9, "v": "alone"}]
    # the COMMIT arrives: the whole transaction at once
    land(landing, [commit])
    reports = run(spark, cfg)
    assert sum(r.released for r in reports) == 3
    assert _table_rows(spark, cfg, "t", "id, v") == [{"id": 1, "v": "b"}, {"id": 9, "v": "alone"}]
    assert _table_rows(spark, cfg, "u", "id, v") == [{"id": 1, "v": "x"}]
    # redelivering everything changes nothing
    land(
        landing,
        [begin, ev("INSERT", "t", 10, after={"id": 1, "v": "a"}, transaction_id="tx-1"), commit],
    )
    run(spark, cfg)
    assert _table_rows(spark, cfg, "t", "id, v") == [{"id": 1, "v": "b"}, {"id": 9, "v": "alone"}]
    # a COMMIT that counts its events (Debezium's END) read before one of them (written to
    # another topic): the transaction waits for it
    counted = {"operation": "COMMIT", "transaction_id": "tx-2", "metadata": {"event_count": 2}}
    land(
        landing,
        [ev("INSERT", "t", 20, after={"id": 2, "v": "c"}, transaction_id="tx-2"), counted],
    )
    reports = run(spark, cfg)
    assert sum(r.held for r in reports) == 1
    assert _table_rows(spark, cfg, "u", "id, v") == [{"id": 1, "v": "x"}]
    assert {"id": 2, "v": "c"} not in _table_rows(spark, cfg, "t", "id, v")
    land(landing, [ev("INSERT", "u", 21, after={"id": 2, "v": "y"}, transaction_id="tx-2")])
    reports = run(spark, cfg)
    assert sum(r.released for r in reports) == 1
    assert {"id": 2, "v": "c"} in _table_rows(spark, cfg, "t", "id, v")
    assert {"id": 2, "v": "y"} in _table_rows(spark, cfg, "u", "id, v")
    # one that never gets its count (an event dead-lettered, or of a table not read) is
    # released by the next batch
    short = {"operation": "COMMIT", "transaction_id": "tx-3", "metadata": {"event_count": 5}}
    land(
        landing,
        [ev("INSERT", "t", 30, after={"id": 3, "v": "d"}, transaction_id="tx-3"), short],
    )
    run(spark, cfg)
    assert {"id": 3, "v": "d"} not in _table_rows(spark, cfg, "t", "id, v")
    land(landing, [ev("INSERT", "t", 31, after={"id": 4, "v": "e"})])
    reports = run(spark, cfg)
    assert sum(r.released for r in reports) == 1
    assert {"id": 3, "v": "d"} in _table_rows(spark, cfg, "t", "id, v")


def test_resolved_watermark_releases_events(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import config, ev, land, run

    cfg = config(tmp_path, "cons_res", keys={"t": ["id"]}, consistency="resolved")
    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "t", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "t", 30, after={"id": 2, "v": "b"}),
            ev("RESOLVED", "t", 20),
        ],
    )
    run(spark, cfg)
    assert _table_rows(spark, cfg, "t", "id, v") == [{"id": 1, "v": "a"}]
    land(landing, [ev("UPDATE", "t", 25, after={"id": 1, "v": "a2"}), ev("RESOLVED", "t", 40)])
    run(spark, cfg)
    assert _table_rows(spark, cfg, "t", "id, v") == [
        {"id": 1, "v": "a2"},
        {"id": 2, "v": "b"},
    ]


def test_cockroachdb_resolved_timestamps_release_events(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import config, land, run

    cfg = config(tmp_path, "cons_crdb", keys={"office_dogs": ["id"]}, consistency="resolved")
    cfg = cfg.model_copy(
        update={"sources": [cfg.sources[0].model_copy(update={"dialect": "cockroachdb"})]}
    )
    landing = tmp_path / "landing"

    def dog(i: int, name: str, hlc: int) -> dict[str, Any]:
        return {
            "after": {"id": i, "name": name},
            "key": [i],
            "topic": "office_dogs",
            "updated": f"{hlc}.0000000000",
        }

    land(landing, [dog(1, "Petee", 100), dog(2, "Carl", 300), {"resolved": "200.0000000000"}])
    run(spark, cfg)
    assert _table_rows(spark, cfg, "office_dogs", "id, name") == [{"id": 1, "name": "Petee"}]
    land(landing, [{"resolved": "400.0000000000"}])
    run(spark, cfg)
    assert _table_rows(spark, cfg, "office_dogs", "id, name") == [
        {"id": 1, "name": "Petee"},
        {"id": 2, "name": "Carl"},
    ]
