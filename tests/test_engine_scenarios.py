"""The apply contract, item by item, as scenarios through the whole pipeline
(landing files → Iceberg).

One landing zone carries a table per scenario; the pipeline runs three times (run 2 brings
late and out-of-order events, run 3 redelivers run 1's files unchanged).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.scenario import config, ev, land, rows, run

pytestmark = pytest.mark.spark


def _vals(spark: Any, w: dict[str, Any], table: str, cols: str = "id, v") -> list[dict]:
    return rows(spark, w["cfg"], table, cols)


def test_1_highest_sequence_wins_duplicates_and_conflicts(spark: Any, world: dict) -> None:
    assert _vals(spark, world, "s1_order") == [{"id": 1, "v": "c"}, {"id": 2, "v": "y"}]
    first = world["reports"][0]
    assert sum(r.duplicates for r in first) >= 1
    assert sum(r.conflicts for r in first) >= 1


def test_2_stale_event_in_later_run_is_ignored(spark: Any, world: dict) -> None:
    assert _vals(spark, world, "s2_stale") == [{"id": 1, "v": "new"}]
    meta = rows(spark, world["cfg"], "s2_stale", "_cdc.sequence AS s, _cdc.operation AS op")
    assert meta[0]["op"] == "UPDATE"
    # run 2 is reported with its stale events: s2 (older than the replica row), s3 and s5_pk
    # (older than a tombstone), s3_soft (older than the soft-deleted row)
    stale = {o.table: o.stale for r in world["reports"][1] for o in r.outcomes}
    assert stale["s2_stale"] == 1
    assert stale["s3_delete"] == 1
    assert stale["s5_pk"] == 1
    assert stale["s3_soft"] == 1
    assert stale["s4_partial"] == 0


def test_3_tombstones_stop_late_inserts(spark: Any, world: dict) -> None:
    assert _vals(spark, world, "s3_delete") == [{"id": 3, "v": "again"}]


def test_3_soft_deletes_flag_the_row(spark: Any, world: dict) -> None:
    got = rows(spark, world["cfg"], "s3_soft", "id, v, _cdc.deleted AS deleted")
    assert got == [{"id": 1, "v": "a", "deleted": True}]


def test_4_out_of_order_partial_updates(spark: Any, world: dict) -> None:
    assert _vals(spark, world, "s4_partial", "id, a, b") == [{"id": 1, "a": "a30", "b": "b20"}]


def test_5_primary_key_change_and_truncate(spark: Any, world: dict) -> None:
    assert _vals(spark, world, "s5_pk") == [{"id": 2, "v": "a"}]
    assert [r["id"] for r in rows(spark, world["cfg"], "s5_truncate", "id")] == [3, 5]


def test_5_a_truncate_and_the_changes_after_it_are_one_snapshot(spark: Any, world: dict) -> None:
    """A batch holding a TRUNCATE and later changes commits once: no snapshot shows the table
    emptied without them (a key written again after the TRUNCATE is a new row)."""
    got = rows(spark, world["cfg"], "s5_retruncate", "id, v, _cdc.operation AS op")
    assert got == [{"id": 2, "v": "b2", "op": "UPDATE"}, {"id": 7, "v": "g", "op": "INSERT"}]
    assert world["retruncate_snapshots"] == 1


def test_6_added_column_and_type_conflict(spark: Any, world: dict) -> None:
    got = _vals(spark, world, "s6_schema", "id, v, extra")
    assert got == [
        {"id": 1, "v": "a", "extra": None},
        {"id": 2, "v": "b", "extra": 5},
        {"id": 4, "v": "d", "extra": 6},
    ]
    cfg = world["cfg"]
    dl = spark.sql(
        f"SELECT error_code, error_message FROM {cfg.catalog.name}.{cfg.namespace}__cdcflow."
        "dead_letters "
        "WHERE `table` = 's6_schema'"
    ).collect()
    assert [r["error_code"] for r in dl] == ["TYPE_CONFLICT"]
    assert "'v' is string" in dl[0]["error_message"]


def test_7_redelivery_leaves_tables_unchanged(spark: Any, world: dict) -> None:
    for table, before in world["before3"].items():
        assert rows(spark, world["cfg"], table) == before, table


def _bag(spark: Any, world: dict, table: str) -> Counter[tuple[Any, ...]]:
    got = rows(spark, world["cfg"], table)
    # every copy of an image is a row of its own, numbered 1..n
    copies = Counter(r["_cdc"]["image"] for r in got)
    assert sorted(r["_cdc"]["copy"] for r in got) == sorted(
        i for n in copies.values() for i in range(1, n + 1)
    )
    return Counter(tuple(v for k, v in sorted(r.items()) if k != "_cdc") for r in got)


def test_10_a_table_without_a_key_is_a_multiset_of_its_rows(spark: Any, world: dict) -> None:
    """``keys: none``: whatever the order (a delete before its inserts, one before the insert
    of its row a run later), the duplicates (the same event again, in a batch and across
    runs) and the redelivery of a run, the replica holds each row as many times as the
    events say; an update without a before image is dead-lettered, naming the table."""
    cfg = world["cfg"]
    after1 = Counter({("a", 1): 1, ("c", 3): 1, ("d2", 4): 1})
    assert Counter(tuple(r[k] for k in ("v", "n")) for r in world["snap1"]["k1_bag"]) == after1
    # run 2: the deleted row's late insert cancels it, another copy of ('a', 1) arrives and
    # one of the two becomes ('e', 5) (the update delivered first)
    got = _bag(spark, world, "k1_bag")
    assert got == Counter({(1, "a"): 1, (3, "c"): 1, (4, "d2"): 1, (5, "e"): 1})
    outcomes = [{o.table: o for r in reports for o in r.outcomes} for reports in world["reports"]]
    first, second, third = (o["k1_bag"] for o in outcomes)
    # run 1: e1 twice (a duplicate), e6 in two contents (a conflict), e8 dead-lettered
    assert (first.events, first.duplicates, first.conflicts, first.stale) == (10, 1, 1, 0)
    assert (first.dead_lettered, first.applied) == (1, 7)
    assert (second.events, second.duplicates, second.applied) == (4, 1, 3)
    # run 3 redelivers run 1: nothing applies again, the update without a before image is
    # dead-lettered again
    assert (third.events, third.duplicates + third.conflicts, third.dead_lettered) == (10, 9, 1)
    letters = spark.sql(
        f"SELECT `table`, error_message FROM {cfg.catalog.name}.{cfg.namespace}__cdcflow."
        "dead_letters WHERE error_code = 'IMAGE_INCOMPLETE'"
    ).collect()
    assert len(letters) == 2 and {r["table"] for r in letters} == {"k1_bag"}
    assert letters[0]["error_message"] == (
        "table k1_bag has no key (keys: none): an UPDATE removes the one row equal to its "
        "before image, and this event has none: the producer must send whole before images "
        "(PostgreSQL: ALTER TABLE ... REPLICA IDENTITY FULL)"
    )


def test_10_a_truncate_of_a_table_without_a_key(spark: Any, world: dict) -> None:
    """Rows before a ``TRUNCATE`` go, events older than it stay out, later ones count."""
    assert [r["v"] for r in world["snap1"]["k2_truncate"]] == ["y"]
    assert _bag(spark, world, "k2_truncate") == Counter({("w",): 1})
    stale = {o.table: o.stale for r in world["reports"][1] for o in r.outcomes}
    assert stale["k2_truncate"] == 1


def test_8_bad_input_is_dead_lettered_good_input_applied(spark: Any, world: dict) -> None:
    cfg = world["cfg"]
    assert [r["id"] for r in rows(spark, cfg, "s8_bad", "id")] == [1, 2]
    dl = spark.sql(
        "SELECT error_code, origin, line, offset, raw FROM "
        f"{cfg.catalog.name}.{cfg.namespace}__cdcflow."
        "dead_letters WHERE origin LIKE '%" + world["bad_file"].name + "' ORDER BY line"
    ).collect()
    assert [(r["error_code"], r["line"]) for r in dl] == [
        ("TRUNCATED_JSON", 2),
        ("NOT_JSON", 3),
        ("BAD_UTF8", 4),
        ("UNKNOWN_OPERATION", 5),
        ("DELETE_WITHOUT_KEY", 6),
    ]
    assert bytes(dl[1]["raw"]) == b"this is not json"
    assert all(r["offset"] > 0 for r in dl)


def test_run3_redelivery_made_no_new_dead_letters(spark: Any, world: dict) -> None:
    # the redelivered run-1 files hold no bad lines; dead letters of run 1 stay single
    cfg = world["cfg"]
    n = spark.sql(
        f"SELECT count(*) AS n FROM {cfg.catalog.name}.{cfg.namespace}__cdcflow.dead_letters "
        "WHERE error_code = 'NOT_JSON'"
    ).collect()[0]["n"]
    assert n == 1


#: Replicas whose reads are compared: merge, soft deletes, partial images, a truncate, an
#: added column, scd2 histories (one ordered by its own columns), a table without a key.
READ_TABLES = (
    "s1_order",
    "s3_soft",
    "s4_partial",
    "s5_truncate",
    "s6_schema",
    "h1_dup",
    "dbx_users",
    "k1_bag",
)


def _session_catalog(spark: Any, name: str, warehouse: str) -> dict[str, Any]:
    """The catalog ``name`` of the test session as a configuration's ``catalog:`` section."""
    prefix = f"spark.sql.catalog.{name}"
    options = {
        k: spark.conf.get(f"{prefix}.{k}")
        for k in ("jdbc.user", "jdbc.password")
        if spark.conf.get(f"{prefix}.{k}", None) is not None
    }
    found = {
        "name": name,
        "type": spark.conf.get(f"{prefix}.type"),
        "warehouse": spark.conf.get(f"{prefix}.warehouse", warehouse),
        "options": options,
    }
    uri = spark.conf.get(f"{prefix}.uri", None)
    if uri and not uri.startswith("jdbc:sqlite:"):
        found["uri"] = uri
    return found


def test_9_the_read_commands_read_the_same_with_pyiceberg_and_spark(
    spark: Any, world: dict
) -> None:
    """pyiceberg opens each catalog (the embedded one, JDBC on PostgreSQL, REST) and reads
    what Spark reads: the replicas (in key order, every type), their row counts, the batch
    history, maintenance, dead letters and watermarks; the rows a snapshot's summary gives
    (records less deletes, what the status page shows) are the rows counted."""
    from cdcflow.cli.render import json_line
    from cdcflow.config import load_config
    from cdcflow.observe.catalog import open_catalog
    from cdcflow.observe.tables import Listing
    from cdcflow.observe.tables_iceberg import IcebergResults
    from cdcflow.observe.tables_spark import SparkResults
    from cdcflow.pipeline.replay import DeadLetterFilter

    cfg = world["cfg"]
    doc = cfg.model_dump()
    doc["catalog"] = _session_catalog(spark, cfg.catalog.name, cfg.catalog.warehouse)
    cfg = load_config(doc)
    fast, slow = IcebergResults(cfg, open_catalog(cfg.catalog)), SparkResults(cfg, spark)

    def text(found: Listing | None) -> list[str] | None:
        if found is None:
            return None
        return [json_line(found.columns, r, found.shapes) for r in found.rows]

    names = fast.replica_names()
    assert names == slow.replica_names() and set(READ_TABLES) <= set(names)
    counts = fast.row_counts(names)
    assert counts == slow.row_counts(names)
    assert {n: f.rows for n, f in fast.files(names).items()} == counts
    assert fast.files(names) == slow.files(names)
    for name in READ_TABLES:
        shown = fast.show(name, 3)
        assert (text(shown), shown.total) == (text(slow.show(name, 3)), counts[name]), name
    assert text(fast.batches(100)) == text(slow.batches(100))
    assert text(fast.maintenance()) == text(slow.maintenance())
    every = DeadLetterFilter(include_replayed=True)
    assert text(fast.dead_letters(every, None, 100, 80)) == text(
        slow.dead_letters(every, None, 100, 80)
    )
    assert fast.watermarks() == slow.watermarks()
    assert fast.open_dead_letters() == slow.open_dead_letters()
    assert fast.table_batches() == slow.table_batches()


def test_columns_named_like_working_columns(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Keys and columns called `_id`, `offset`, `item`, `_seq`-like names are ordinary
    columns: partial updates, deletes and tombstones work on them."""
    root = tmp_path_factory.mktemp("names")
    cfg = config(root, "names", keys={"odd": ["_id", "offset"]})
    landing = root / "landing"
    land(
        landing,
        [
            ev("INSERT", "odd", 10, after={"_id": "a", "offset": 1, "item": "x", "_op": "o"}),
            ev("INSERT", "odd", 11, after={"_id": "b", "offset": 1, "item": "y", "_op": "p"}),
            ev("UPDATE", "odd", 20, after={"_id": "a", "offset": 1, "item": "z"}, partial=True),
            ev("DELETE", "odd", 30, before={"_id": "b", "offset": 1}),
            ev("INSERT", "odd", 5, after={"_id": "b", "offset": 1, "item": "late", "_op": "q"}),
        ],
    )
    run(spark, cfg)
    assert rows(spark, cfg, "odd", "_id, offset, item, _op") == [
        {"_id": "a", "offset": 1, "item": "z", "_op": "o"}
    ]
