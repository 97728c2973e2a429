"""The engine's per-table decisions as data: batch metadata and table state in, plan out
(no Spark)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdcflow.engine.keys import unambiguous
from cdcflow.engine.meta import TableMeta, target_name
from cdcflow.engine.plan import (
    IDENTITY_PROPERTY,
    TableSettings,
    TableState,
    decide,
    decide_identity,
    decide_shape,
    identity_json,
    resolve_keys,
)
from cdcflow.engine.schema import Seen, common_type, holds, plan_schema
from cdcflow.iceberg.layouts import (
    KEY_PROPERTY,
    KEYLESS_PROPERTY,
    SHAPE_PROPERTY,
    TRUNCATE_PROPERTY,
)


def meta(ops: dict[str, int], seen: dict[str, set[str]] | None = None, **kw: object) -> TableMeta:
    m = TableMeta(ops=dict(ops), **kw)  # type: ignore[arg-type]
    for c, types in (seen or {}).items():
        for t in types:
            m.see(c, t, Seen(1))
    return m


def test_new_merge_table_takes_configured_keys_and_all_seen_columns() -> None:
    plan = decide(
        TableSettings("users", keys=["id"]),
        meta({"INSERT": 3}, {"id": {"bigint"}, "name": {"string"}}),
        None,
    )
    assert plan.keys == ("id",) and plan.key_source == "configured"
    assert plan.creates and plan.writes_rows
    assert plan.schema.types == {"id": "bigint", "name": "string"}
    assert plan.schema.add == {}  # a new table is created with its columns, nothing to add
    assert plan.key_problem is None


def test_existing_table_gains_and_widens_columns_and_records_its_keys() -> None:
    state = TableState({"id": "bigint", "n": "int", "_cdc": "struct<...>"}, {})
    plan = decide(
        TableSettings("t"),
        meta({"UPDATE": 1}, {"n": {"bigint"}, "extra": {"string"}}, key_sets={("id",)}),
        state,
    )
    assert plan.keys == ("id",) and plan.key_source == "batch"
    assert plan.schema.widen == {"n": "bigint"}
    assert plan.schema.add == {"extra": "string"}
    assert plan.properties == {KEY_PROPERTY: "id"}


def test_keys_come_first_from_configuration_then_the_replica_then_the_events() -> None:
    assert resolve_keys(["a"], "b", {("c",)}, ["d"], ["e"]) == (("a",), "configured")
    assert resolve_keys(None, "b,x", {("c",)}, ["d"], ["e"]) == (("b", "x"), "recorded")
    assert resolve_keys(None, None, {("c",), ("c", "z")}, ["d"], None) == (("c", "z"), "batch")
    assert resolve_keys(None, None, set(), ["d"], ["e"]) == (("d",), "source")
    assert resolve_keys(None, None, set(), None, ["e"]) == (("e",), "matched")
    assert resolve_keys(None, None, set(), None, None) == (None, None)


def test_a_table_without_keys_rejects_its_row_events_with_a_hint() -> None:
    plan = decide(TableSettings("orders"), meta({"INSERT": 2}, {"id": {"bigint"}}), None)
    assert plan.keys is None and not plan.writes_rows and not plan.creates
    assert plan.key_problem is not None and "tables.orders.keys" in plan.key_problem


def test_a_table_without_a_key_is_kept_as_a_multiset_of_rows() -> None:
    """``keys: none``: no key is looked for, not even one the events or the source name; the
    replica records that it has none, and neither kind of replica takes the other's events."""
    m = meta({"INSERT": 2, "DELETE": 1}, {"id": {"bigint"}, "v": {"string"}}, key_sets={("id",)})
    plan = decide(TableSettings("logs", keys="none"), m, None, source_keys=["id"])
    assert plan.multiset and plan.keys is None and plan.key_problem is None
    assert plan.writes_rows and plan.creates
    assert plan.properties[KEYLESS_PROPERTY] == "true"
    keyless = TableState(
        {"id": "bigint", "v": "string", "_cdc": "struct<>"}, {KEYLESS_PROPERTY: "true"}
    )
    again = decide(TableSettings("logs", keys="none"), m, keyless)
    assert again.multiset and KEYLESS_PROPERTY not in again.properties
    # keys now, over a keyless replica; no key, over a keyed one: refused, named
    keyed = decide(TableSettings("logs", keys=("id",)), m, keyless)
    assert (keyed.keys, keyed.key_code, keyed.writes_rows) == (None, "KEYS_CHANGED", False)
    assert "keys: none" in (keyed.key_problem or "")
    state = TableState({"id": "bigint", "_cdc": "struct<>"}, {KEY_PROPERTY: "id"})
    over = decide(TableSettings("logs", keys="none"), m, state)
    assert not over.multiset and over.key_code == "KEYS_CHANGED"
    assert "one row per key (id)" in (over.key_problem or "")


def test_schema_only_events_for_a_missing_table_create_nothing() -> None:
    plan = decide(TableSettings("t"), meta({"DDL": 1}, {"extra": {"int"}}), None)
    assert not plan.creates and not plan.writes_rows


def test_a_newer_truncate_moves_the_watermark_and_an_older_one_does_not() -> None:
    state = TableState({"id": "bigint"}, {TRUNCATE_PROPERTY: "p05"})
    newer = decide(TableSettings("t", keys=["id"]), meta({"TRUNCATE": 1}, truncate="p07"), state)
    assert newer.truncate == "p07" and newer.watermark == "p07"
    assert newer.properties[TRUNCATE_PROPERTY] == "p07"
    assert newer.writes_rows  # a truncate alone still applies
    older = decide(TableSettings("t", keys=["id"]), meta({"TRUNCATE": 1}, truncate="p03"), state)
    assert older.truncate is None and older.watermark == "p05"


def test_configured_table_properties_are_planned_only_where_the_table_differs() -> None:
    wanted = {"format-version": "3", "write.target-file-size-bytes": "1048576"}
    new = decide(
        TableSettings("t", keys=["id"], table_properties=wanted),
        meta({"INSERT": 1}, {"id": {"bigint"}}),
        None,
    )
    assert {k: new.properties[k] for k in wanted} == wanted
    # the table has them already (the format version as the catalog reads it): nothing to set
    state = TableState({"id": "bigint"}, {**wanted, KEY_PROPERTY: "id"})
    same = decide(
        TableSettings("t", keys=["id"], table_properties=wanted),
        meta({"INSERT": 1}, {"id": {"bigint"}}),
        state,
    )
    assert not set(wanted) & set(same.properties)
    older = TableState({"id": "bigint"}, {"format-version": "2", KEY_PROPERTY: "id"})
    upgraded = decide(
        TableSettings("t", keys=["id"], table_properties={"format-version": "3"}),
        meta({"INSERT": 1}, {"id": {"bigint"}}),
        older,
    )
    assert upgraded.properties["format-version"] == "3"


def test_table_properties_are_strings_and_cdcflows_own_names_are_refused() -> None:
    from cdcflow.config import TableConfig

    assert TableConfig(table_properties={"format-version": 3, "a": True}).table_properties == {
        "format-version": "3",
        "a": "true",
    }
    for bad, why in (
        ({"cdcflow.keys": "id"}, "cdcflow's own"),
        ({"format-version": "1"}, "cdcflow writes format 2 or 3"),
    ):
        with pytest.raises(ValueError, match=why):
            TableConfig(table_properties=bad)


def test_changelog_plans_work_on_the_after_image_fields() -> None:
    state = TableState({"a": "string", "_empty": "string"}, {})
    plan = decide(
        TableSettings("log", name="audit", mode="append"),
        meta({"INSERT": 1}, {"b": {"int"}}),
        state,
    )
    assert plan.mode == "append" and plan.name == "audit" and plan.keys is None
    assert plan.schema.add == {"b": "int"} and plan.writes_rows


@pytest.mark.parametrize(
    ("recorded", "shapes", "bad", "shape"),
    [
        (None, {}, set(), None),
        (None, {"n,n": 3, "n,s": 1}, {"n,s"}, "n,n"),  # the most common one is recorded
        (None, {"n,*": 2, "n,n": 1}, set(), "n,n"),  # unknowns filled from fitting shapes
        ("n,n", {"n,n": 2}, set(), "n,n"),  # nothing changes
        ("n,n", {"s": 1}, {"s"}, "n,n"),
    ],
)
def test_sequence_shapes(
    recorded: str | None, shapes: dict[str, int], bad: set[str], shape: str | None
) -> None:
    assert decide_shape(recorded, shapes) == (frozenset(bad), shape)


def test_shape_decisions_reach_the_plan() -> None:
    plan = decide(
        TableSettings("t", keys=["id"]), meta({"INSERT": 2}, shapes={"n,n": 2, "s": 1}), None
    )
    assert plan.bad_shapes == frozenset({"s"}) and plan.properties[SHAPE_PROPERTY] == "n,n"


@pytest.mark.parametrize(
    ("found", "names"),
    [
        ([(0, "id")], ("id",)),
        ([(0, "a"), (1, "b")], ("a", "b")),
        ([(0, "id"), (0, "qty")], None),  # two columns match: ambiguous
        ([(1, "b")], None),  # position 0 unmatched
        ([(0, "a"), (1, "a")], None),  # one column cannot be two key parts
        ([], None),
    ],
)
def test_positional_key_names_only_when_unambiguous(
    found: list[tuple[int, str]], names: tuple[str, ...] | None
) -> None:
    assert unambiguous(found) == names


def test_replica_names_from_templates() -> None:
    assert target_name("Shop.Users") == "shop_users"
    assert target_name("users", "{source}__{table}", "crdb") == "crdb__users"
    assert target_name("users", "{database}_{table}", "s", database="Shop-1") == "shop_1_users"
    assert target_name("users", "{database}_{table}", "s") == "_users"
    assert target_name("") == ""  # markers have no table


S = "src"


@pytest.mark.parametrize(
    ("recorded", "seen", "identity", "foreign"),
    [
        # first sight: the most frequent table of the batch is recorded
        (None, {(S, "db1", None, "users"): 5}, (S, "db1", None, "users"), set()),
        # two databases under one name: the other is foreign, never merged
        (
            None,
            {(S, "db1", None, "users"): 5, (S, "db2", None, "users"): 2},
            (S, "db1", None, "users"),
            {(S, "db2", None, "users")},
        ),
        # a field the producer leaves out fits, and is filled in when another event gives it
        (
            (S, None, None, "users"),
            {(S, "db1", None, "users"): 1},
            (S, "db1", None, "users"),
            set(),
        ),
        # another source under the same name is another table
        (
            ("crdb", None, None, "users"),
            {(S, None, None, "users"): 3},
            ("crdb", None, None, "users"),
            {(S, None, None, "users")},
        ),
        ((S, "db1", None, "users"), {}, (S, "db1", None, "users"), set()),
    ],
)
def test_a_replica_holds_one_source_table(
    recorded: tuple | None, seen: dict, identity: tuple, foreign: set
) -> None:
    assert decide_identity(recorded, seen) == (identity, frozenset(foreign))


def test_foreign_tables_are_left_out_of_the_plan_and_named_in_the_refusal() -> None:
    m = TableMeta()
    for db, cols in (
        ("db1", {"id": "bigint", "a": "string"}),
        ("db2", {"id": "bigint", "b": "int"}),
    ):
        sub = meta({"INSERT": 3 if db == "db1" else 1}, {c: {t} for c, t in cols.items()})
        m.identities[(db, None, "users")] = sub
        m.ops["INSERT"] = m.ops.get("INSERT", 0) + sub.events
    plan = decide(TableSettings("users", keys=["id"]), m, None, source="crdb")
    assert plan.identity == ("crdb", "db1", None, "users")
    assert plan.foreign == frozenset({("crdb", "db2", None, "users")})
    assert "b" not in plan.schema.types and plan.meta.events == 3
    assert plan.properties[IDENTITY_PROPERTY] == identity_json(plan.identity)
    assert plan.foreign_problem is not None
    assert "crdb:db2.users" in plan.foreign_problem and "crdb:db1.users" in plan.foreign_problem


def test_columns_keep_the_producers_order_not_the_alphabets() -> None:
    from cdcflow.engine.statements import create_replica_columns

    seen = {"zeta": {"string"}, "id": {"bigint"}, "alpha": {"int"}}
    plan = decide(TableSettings("t", keys=["id"]), meta({"INSERT": 1}, seen), None)
    assert list(plan.schema.types) == ["zeta", "id", "alpha"]
    columns = create_replica_columns(plan, "struct<x:int>")
    assert columns == "`zeta` string, `id` bigint, `alpha` int, _cdc struct<x:int>"
    # a later batch's new column follows the existing ones
    state = TableState({"zeta": "string", "id": "bigint", "alpha": "int"}, {KEY_PROPERTY: "id"})
    later = decide(
        TableSettings("t"), meta({"UPDATE": 1}, {"beta": {"int"}, "id": {"bigint"}}), state
    )
    assert list(later.schema.types) == ["zeta", "id", "alpha", "beta"]


def test_scd2_plans_track_the_chosen_columns_and_keep_what_a_truncate_precedes() -> None:
    seen = {"id": {"bigint"}, "name": {"string"}, "city": {"string"}, "note": {"string"}}
    m = meta({"UPDATE": 2, "TRUNCATE": 1}, seen, truncate="p05!")
    every = decide(TableSettings("u", mode="scd2", keys=["id"]), m, None)
    assert every.mode == "scd2" and every.keyed and every.tracked is None
    # history keeps what came before a TRUNCATE: nothing is dropped under a watermark
    assert every.watermark == "" and every.truncate is None
    but_city = decide(
        TableSettings("u", mode="scd2", keys=["id"], track_history_except_columns=["city"]), m, None
    )
    assert but_city.tracked == ("name", "note")
    only_name = decide(
        TableSettings("u", mode="scd2", keys=["id"], track_history_columns=["name"]), m, None
    )
    assert only_name.tracked == ("name",)
    # the validity columns of an existing history table are not data columns
    state = TableState(
        {"id": "bigint", "name": "string", "__START_AT": "string", "__CURRENT": "boolean"}, {}
    )
    existing = decide(TableSettings("u", mode="scd2", keys=["id"]), m, state)
    assert set(existing.schema.add) == {"city", "note"}


def test_except_columns_are_not_written_but_an_ordering_column_keeps_its_type() -> None:
    seen = {"id": {"bigint"}, "v": {"string"}, "op": {"string"}, "n": {"int"}}
    plan = decide(
        TableSettings("t", keys=["id"], except_columns=["op", "n", "id"], sequence_by=("n",)),
        meta({"INSERT": 1}, seen),
        None,
    )
    assert plan.schema.types == {"id": "bigint", "v": "string"}  # a key is always written
    assert (plan.sequence_by, plan.sequence_types) == (("n",), ("int",))


# ---------------------------------------------------------------- column types

_TYPES = [
    "int",
    "bigint",
    "float",
    "double",
    "decimal(10,2)",
    "decimal(38,2)",
    "decimal(5,4)",
    "string",
    "json",
    "uuid",
    "boolean",
    "date",
    "timestamp",
    "array<int>",
    "array<decimal(10,2)>",
]


def test_a_new_column_takes_the_type_that_holds_every_value_whatever_the_order() -> None:
    # the batch: three decimal(10,2) balances and one bigint, in either order
    for order in (["decimal(10,2)", "bigint"], ["bigint", "decimal(10,2)"]):
        seen = {"balance": {t: Seen(3 if t.startswith("decimal") else 1) for t in order}}
        plan = plan_schema(None, seen)
        assert plan.types == {"balance": "decimal(21,2)"} and not plan.conflicts


@given(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=5), st.randoms())
def test_the_common_type_holds_every_type_and_ignores_the_order(
    types: list[str], rng: random.Random
) -> None:
    found = common_type(types)
    shuffled = list(types)
    rng.shuffle(shuffled)
    assert common_type(shuffled) == found
    if found is not None:
        assert all(holds(found, t) for t in types)
        # the narrowest: every type holding them all holds it
        assert all(holds(u, found) for u in _TYPES if all(holds(u, t) for t in types))


@pytest.mark.parametrize(
    ("seen", "chosen", "refused"),
    [
        # no type holds both: the type of more events, whichever its name
        ({"double": Seen(3, "p1"), "decimal(10,2)": Seen(1, "p2")}, "double", {"decimal(10,2)"}),
        ({"double": Seen(1, "p1"), "decimal(10,2)": Seen(3, "p2")}, "decimal(10,2)", {"double"}),
        # as many events each: the type of the newest event
        ({"boolean": Seen(2, "p9"), "string": Seen(2, "p1")}, "boolean", {"string"}),
        ({"boolean": Seen(2, "p1"), "string": Seen(2, "p9")}, "string", {"boolean"}),
        # a type holding several of them counts all their events
        (
            {"bigint": Seen(2, "p1"), "int": Seen(2, "p1"), "decimal(38,30)": Seen(3, "p1")},
            "bigint",
            {"decimal(38,30)"},
        ),
    ],
)
def test_without_a_common_type_the_events_decide_not_the_names(
    seen: dict[str, Seen], chosen: str, refused: set[str]
) -> None:
    plan = plan_schema(None, {"v": seen})
    assert plan.types == {"v": chosen} and plan.conflicts == {"v": refused}


def test_an_existing_column_widens_to_hold_every_type_it_can_whatever_the_order() -> None:
    seen = {"n": {"decimal(14,2)": Seen(1), "decimal(12,2)": Seen(1), "decimal(9,3)": Seen(1)}}
    plan = plan_schema({"n": "decimal(10,2)"}, seen)
    assert plan.widen == {"n": "decimal(14,2)"} and plan.conflicts == {"n": {"decimal(9,3)"}}


def test_table_settings_are_built_from_the_configuration_under_the_same_names() -> None:
    from dataclasses import fields

    from cdcflow.api import table_config
    from cdcflow.config import TableConfig, load_config

    # every setting but the target is a configuration field of the same name
    assert {f.name for f in fields(TableSettings)} - set(TableConfig.model_fields) == {"target"}
    doc = {
        "keys": ["id"],
        "deletes": "soft",
        "except_columns": ["x"],
        "sequence_by": ["version"],
        "table_properties": {"format-version": "2"},
    }
    cfg = load_config({"sources": [{"name": "s"}], "tables": {"t": doc}}, "test")
    s = TableSettings.of("t", cfg.table("t"))
    assert s == TableSettings(
        "t",
        keys=("id",),
        deletes="soft",
        except_columns=("x",),
        sequence_by=("version",),
        table_properties={"format-version": "2"},
    )
    assert s.name == "t" and s.soft_deletes and s.columns is None
    none = load_config({"sources": [{"name": "s"}], "tables": {"t": {"keys": "none"}}}, "test")
    assert TableSettings.of("t", none.table("t")).keyless
    assert TableSettings.of("t", TableConfig(name="r")).name == "r"
    # the API's table settings are the configuration's
    api = table_config(
        keys=["id"], sequence_by="version", stored_as_scd_type=2, track_history_column_list=["n"]
    )
    assert TableSettings.of("t", api) == TableSettings(
        "t", mode="scd2", keys=("id",), sequence_by=("version",), track_history_columns=("n",)
    )
