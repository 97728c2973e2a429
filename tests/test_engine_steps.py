"""What a batch writes and in which order (:mod:`cdcflow.engine.steps`), as plain data: each
table's DDL and the batch's plan for the shapes users have, without Spark."""

from __future__ import annotations

from cdcflow.engine.plan import TablePlan, TableSettings, TableState, decide
from cdcflow.engine.stats import TableStats
from cdcflow.engine.steps import Step, batch_plan, table_ddl, table_steps
from cdcflow.iceberg.layouts import KEY_PROPERTY, KEYLESS_PROPERTY, TRUNCATE_PROPERTY
from tests.test_engine_sql import COLUMNS, meta

REPLICA = TableState({"id": "bigint", "name": "string", "_cdc": "struct<>"}, {KEY_PROPERTY: "id"})


def orders(ops: dict[str, int], state: TableState | None = REPLICA, **kw: object) -> TablePlan:
    return decide(TableSettings("orders", keys=("id",), **kw), meta(ops, COLUMNS), state)  # type: ignore[arg-type]


def test_a_new_replica_is_created_with_its_keys_and_an_existing_one_gains_columns() -> None:
    new = table_ddl(orders({"INSERT": 1}, None))
    assert new is not None and new.creates
    assert new.properties[KEY_PROPERTY] == "id"
    assert "_cdc struct<" in (new.columns or "") and "`price` decimal(10,2)" in (new.columns or "")
    grown = table_ddl(orders({"UPDATE": 1}))
    assert grown is not None and not grown.creates
    assert dict(grown.add) == {"price": "decimal(10,2)"} and grown.prefixes == ("",)
    same = decide(
        TableSettings("orders", keys=("id",)),
        meta({"UPDATE": 1}, {"id": "bigint", "name": "string"}),
        REPLICA,
    )
    assert table_ddl(same) is None


def test_a_changelog_is_altered_inside_both_images_and_a_keyless_table_is_never_created() -> None:
    state = TableState({"id": "bigint"}, {})
    log = decide(TableSettings("audit", mode="append"), meta({"INSERT": 1}, COLUMNS), state)
    ddl = table_ddl(log)
    assert ddl is not None and ddl.prefixes == ("before.", "after.")
    keyless = decide(TableSettings("orders"), meta({"INSERT": 1}, COLUMNS), None)
    assert keyless.keys is None and table_ddl(keyless) is None


def test_the_truncate_watermark_is_set_after_the_rows_not_with_the_ddl() -> None:
    m = meta({"TRUNCATE": 1, "INSERT": 2}, {"id": "bigint", "name": "string"}, truncate="p07")
    plan = decide(TableSettings("orders", keys=("id",)), m, REPLICA)
    assert plan.properties.get(TRUNCATE_PROPERTY) == "p07"
    ddl = table_ddl(plan)
    assert ddl is None or TRUNCATE_PROPERTY not in ddl.properties
    # rows after the TRUNCATE: one MERGE deletes the older rows, then the watermark
    live = table_steps(plan, TableStats(live=2, writes=2), logged=False)
    assert [s.kind for s in live] == ["merge", "mark_truncate"]
    # nothing after it: a truncate statement, then the watermark
    gone = table_steps(plan, TableStats(), logged=False)
    assert [s.kind for s in gone] == ["truncate", "mark_truncate"]


def test_a_batch_of_one_replica_merges_and_leaves_tombstones_for_its_deletes() -> None:
    plan = orders({"UPDATE": 5, "DELETE": 1})
    steps = batch_plan(
        [plan], {"orders": TableStats(live=5, deletes=1)}, logged=False, watermarks=False
    )
    assert steps.lines() == ["tombstones", "merge:orders"]
    quiet = batch_plan([plan], {"orders": TableStats(live=5)}, logged=False, watermarks=False)
    assert quiet.lines() == ["merge:orders"]
    # every event stale or buried: nothing to write, the table still has its (empty) steps
    idle = batch_plan([plan], {"orders": TableStats()}, logged=False, watermarks=False)
    assert idle.tables == {"orders": ()} and idle.internal == ()


def test_a_replica_the_batch_creates_is_appended_to_and_an_existing_one_merged() -> None:
    new = orders({"INSERT": 3, "DELETE": 1}, None)
    assert not new.exists
    stats = {"orders": TableStats(live=3, deletes=1)}
    assert batch_plan([new], stats, logged=False, watermarks=False).lines() == [
        "tombstones",
        "insert:orders",
    ]
    # a replay of that batch finds the replica the first attempt created: it merges
    again = orders({"INSERT": 3, "DELETE": 1})
    assert again.exists
    assert batch_plan([again], stats, logged=False, watermarks=False).lines() == [
        "tombstones",
        "merge:orders",
    ]
    soft = orders({"DELETE": 2}, None, deletes="soft")
    assert [s.kind for s in table_steps(soft, TableStats(live=2), logged=False)] == ["insert"]


def test_soft_deletes_leave_no_tombstone() -> None:
    plan = orders({"DELETE": 2}, deletes="soft")
    steps = batch_plan(
        [plan], {"orders": TableStats(live=2, deletes=2)}, logged=False, watermarks=False
    )
    assert steps.lines() == ["merge:orders"]


def test_an_scd2_tables_versions_wait_for_the_history_log() -> None:
    history = decide(
        TableSettings("customers", mode="scd2", keys=("id",)), meta({"UPDATE": 2}, COLUMNS), None
    )
    plan = orders({"INSERT": 1})
    stats = {"customers": TableStats(live=2), "orders": TableStats(live=1)}
    steps = batch_plan([history, plan], stats, logged=True, watermarks=True)
    assert steps.lines() == ["log", "watermarks", "versions:customers after log", "merge:orders"]
    assert steps.tables["customers"] == (Step("versions", "customers", ("log",)),)


def test_a_changelog_whose_every_event_was_rejected_writes_nothing() -> None:
    log = decide(TableSettings("audit", mode="append"), meta({"INSERT": 3}, COLUMNS), None)
    assert table_steps(log, TableStats(rejected={"BAD_TYPE": 3}), logged=False) == ()
    assert table_steps(log, TableStats(rejected={"BAD_TYPE": 2}), logged=False) == (
        Step("changelog", "audit"),
    )


def test_a_table_without_a_key_counts_its_copies_after_the_log() -> None:
    """A keyless replica is created with its images' metadata; its copies are counted from
    the log once the log holds the batch's events (a replay whose events the log already
    holds counts again without writing it); only duplicates write nothing; a TRUNCATE
    recounts, then sets the watermark."""
    m = meta({"INSERT": 2, "DELETE": 1}, COLUMNS)
    new = decide(TableSettings("logs", keys="none"), m, None)  # type: ignore[arg-type]
    ddl = table_ddl(new)
    assert ddl is not None and ddl.creates and ddl.properties == {KEYLESS_PROPERTY: "true"}
    assert "_cdc struct<image:string, copy:bigint" in (ddl.columns or "")
    fresh = TableStats(events=3, winners=3, writes=3, live=3)
    assert batch_plan([new], {"logs": fresh}, logged=False, watermarks=False).lines() == [
        "multiset_log",
        "multiset:logs after multiset_log",
    ]
    replayed = TableStats(events=3, winners=3, writes=3, live=0)
    assert batch_plan([new], {"logs": replayed}, logged=False, watermarks=False).lines() == [
        "multiset:logs"
    ]
    dups = TableStats(events=3)
    assert batch_plan([new], {"logs": dups}, logged=False, watermarks=False).lines() == []
    truncated = decide(
        TableSettings("logs", keys="none"),  # type: ignore[arg-type]
        meta({"TRUNCATE": 1}, {}, truncate="p09"),
        TableState({**COLUMNS, "_cdc": "struct<>"}, {KEYLESS_PROPERTY: "true"}),
    )
    assert [s.kind for s in table_steps(truncated, TableStats(), logged=False)] == [
        "multiset",
        "mark_truncate",
    ]
