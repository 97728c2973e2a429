"""``scd2`` tables, rule by rule, as scenarios through the whole pipeline (landing files →
Iceberg history tables), in the scenario world of ``tests/scenario_world.py``. Versions are
written as ``(key, values…, start, end, current)`` with the events' commit positions, compared
exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.sequence import decode
from tests.scenario import config, ev, land, rows, run
from tests.scenario_world import snapshot

pytestmark = pytest.mark.spark


def at(seq: int) -> tuple[int, ...]:
    """The decoded ``sequence`` of ``ev(..., seq)`` (LSN ``0/seq``, sequence 0)."""
    return (seq, 0)


def versions(spark: Any, cfg: Any, table: str, *cols: str) -> list[tuple]:
    """(key, values…, start, end, current) per version, sorted."""
    return versions_of(rows(spark, cfg, table), *cols)


def versions_of(table_rows: list[dict[str, Any]], *cols: str) -> list[tuple]:
    """(key, values…, start, end, current) per row of a history table, sorted."""
    out = []
    for r in table_rows:
        end = decode(r["__END_AT"]) if r["__END_AT"] is not None else None
        out.append(
            (
                r["id"],
                *(r[c] for c in cols),
                decode(r["__START_AT"]),
                end,
                r["__CURRENT"],
            )
        )
    return sorted(out, key=repr)


def test_duplicates_collapse_and_the_later_copy_wins(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h1_dup", "v") == [
        (1, "a", at(10), at(20), False),
        (1, "b2", at(20), None, True),
    ]
    outcomes = [o for r in world["reports"][0] for o in r.outcomes if o.table == "h1_dup"]
    assert {o.mode for o in outcomes} == {"scd2"}
    assert sum(o.duplicates for o in outcomes) == 1


def test_a_late_event_splits_an_interval(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h2_split", "v") == [
        (1, "a", at(10), at(20), False),
        (1, "b", at(20), at(30), False),
        (1, "c", at(30), None, True),
    ]


def test_a_late_event_older_than_all_inserts_a_closed_first_version(
    spark: Any, world: dict
) -> None:
    assert versions(spark, world["cfg"], "h3_older", "v") == [
        (1, "a", at(10), at(20), False),
        (1, "b", at(20), None, True),
    ]


def test_a_late_delete_closes_the_right_version(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h4_late_delete", "v") == [
        (1, "a", at(10), at(20), False),
        (1, "c", at(30), None, True),
    ]


def test_truncate_closes_every_open_version(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h5_truncate", "v") == [
        (1, "a", at(10), at(15), False),
        (1, "late", at(15), at(20), False),
        (2, "a", at(10), at(20), False),
        (2, "b", at(30), None, True),
    ]


def test_partial_events_carry_the_previous_values(spark: Any, world: dict) -> None:
    # the late partial at 20 changes what the version at 30 carries
    assert versions(spark, world["cfg"], "h6_partial", "a", "b") == [
        (1, "a10", "b10", at(10), at(20), False),
        (1, "a20", "b10", at(20), at(30), False),
        (1, "a20", "b30", at(30), None, True),
    ]


def test_late_events_after_a_delete_recompute_from_it(spark: Any, world: dict) -> None:
    # run 2's events at 40 follow each key's delete at 20: the versions after the delete are
    # recomputed (the partial at 40 carries b from 30; key 2's event at 40 holds the values of
    # its event at 50, so the version that started at 50 is gone) and the versions before the
    # delete stay; as run 2 left them (run 3 redelivers every event, which recomputes all)
    # and at the end
    expected = [
        (1, "a10", "b10", at(10), at(20), False),
        (1, "a30", "b30", at(30), at(40), False),
        (1, "a40", "b30", at(40), at(50), False),
        (1, "a40", "b50", at(50), None, True),
        (2, "c", "c", at(30), at(40), False),
        (2, "d", "d", at(40), None, True),
        (2, "x", "y", at(10), at(20), False),
    ]
    assert versions_of(world["history"]["h11_after_delete"], "a", "b") == expected
    assert versions(spark, world["cfg"], "h11_after_delete", "a", "b") == expected


def test_a_version_starting_at_the_batchs_earliest_event_can_go(spark: Any, tmp_path: Path) -> None:
    # a different copy at 20, delivered in a later run, holds the values of 10: the version
    # that started at 20 (the earliest sequence of that run) goes
    cfg = config(tmp_path, "scd2_gone", keys={"g": ["id"]}, tables={"g": {"mode": "scd2"}})
    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "g", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "g", 20, after={"id": 1, "v": "b"}),
            ev("UPDATE", "g", 30, after={"id": 1, "v": "c"}),
        ],
    )
    run(spark, cfg)
    assert len(versions(spark, cfg, "g", "v")) == 3
    land(landing, [ev("UPDATE", "g", 20, after={"id": 1, "v": "a"})])
    run(spark, cfg)
    assert versions(spark, cfg, "g", "v") == [
        (1, "a", at(10), at(30), False),
        (1, "c", at(30), None, True),
    ]


def test_a_changed_tracked_setting_leaves_no_overlapping_versions(
    spark: Any, tmp_path: Path
) -> None:
    # every column tracked in run 1, only name in run 2: each key touched in run 2 is
    # recomputed under the new setting from its last delete before run 2's event (key 1: no
    # delete, all of it), and the versions the old setting opened there go
    def cfg(tables: dict[str, Any]) -> Any:
        return config(tmp_path, "scd2_retrack", keys={"g": ["id"]}, tables={"g": tables})

    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "g", 10, after={"id": 1, "name": "A", "city": "X"}),
            ev("UPDATE", "g", 20, after={"id": 1, "name": "A", "city": "Y"}),
            ev("INSERT", "g", 10, after={"id": 2, "name": "A", "city": "X"}),
            ev("UPDATE", "g", 15, after={"id": 2, "name": "A", "city": "Y"}),
            ev("DELETE", "g", 20, before={"id": 2}),
            ev("INSERT", "g", 25, after={"id": 2, "name": "B", "city": "X"}),
            ev("UPDATE", "g", 27, after={"id": 2, "name": "B", "city": "Y"}),
        ],
    )
    run(spark, cfg({"mode": "scd2"}))
    assert len(versions(spark, cfg({}), "g", "name", "city")) == 6
    land(
        landing,
        [
            ev("UPDATE", "g", 30, after={"id": 1, "name": "A", "city": "Z"}),
            ev("UPDATE", "g", 30, after={"id": 2, "name": "B", "city": "Z"}),
        ],
    )
    run(spark, cfg({"mode": "scd2", "track_history_columns": ["name"]}))
    assert versions(spark, cfg({}), "g", "name", "city") == [
        (1, "A", "Z", at(10), None, True),
        (2, "A", "X", at(10), at(15), False),
        (2, "A", "Y", at(15), at(20), False),
        (2, "B", "Z", at(25), None, True),
    ]


def test_untracked_changes_update_the_version_in_place(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h7_tracked", "name", "city") == [
        (1, "A", "Y", at(10), at(30), False),
        (1, "B", "Z", at(30), None, True),
    ]


def test_new_columns_are_added(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h8_schema", "v", "extra") == [
        (1, "a", None, at(10), at(20), False),
        (1, "b", 7, at(20), None, True),
    ]


def test_a_key_change_closes_the_old_key(spark: Any, world: dict) -> None:
    assert versions(spark, world["cfg"], "h9_pk", "v") == [
        (1, "a", at(10), at(20), False),
        (2, "a", at(20), None, True),
    ]


def test_bad_events_are_dead_lettered(spark: Any, world: dict) -> None:
    cfg = world["cfg"]
    assert versions(spark, cfg, "h10_bad", "v") == [(1, "a", at(10), None, True)]
    dead = spark.sql(
        f"SELECT error_code FROM {cfg.catalog.name}.{cfg.namespace}__cdcflow.dead_letters "
        "WHERE error_message LIKE '%h10_bad%'"
    ).collect()
    # one per delivery: run 1 and its redelivery in run 3
    assert [r.error_code for r in dead] == ["KEY_MISSING", "KEY_MISSING"]


def test_redelivery_changes_nothing(spark: Any, world: dict) -> None:
    cfg = world["cfg"]
    for t, before in world["history"].items():
        assert snapshot(spark, cfg, t) == before, t
    # run 2 did not touch these tables: their history stayed as run 1 wrote it
    for t, before in world["history_snap1"].items():
        assert snapshot(spark, cfg, t) == before, t


def test_the_databricks_scd2_example(spark: Any, world: dict) -> None:
    cfg = world["cfg"]
    got = [
        (r["userId"], r["name"], r["city"], decode(r["__START_AT"]), end(r))
        for r in rows(spark, cfg, "dbx_users")
    ]
    assert sorted(got, key=repr) == [
        (123, "Isabel", "Chihuahua", (5,), (6,)),
        (123, "Isabel", "Monterrey", (1,), (5,)),
        (124, "Raul", "Oaxaca", (1,), None),
        (125, "Mercedes", "Guadalajara", (6,), None),
        (125, "Mercedes", "Mexicali", (5,), (6,)),
        (125, "Mercedes", "Tijuana", (2,), (5,)),
        (126, "Lily", "Cancun", (2,), None),
    ]
    # the columns that drove the feed are not written
    columns = spark.table(f"{cfg.catalog.name}.{cfg.namespace}.dbx_users").columns
    assert "operation" not in columns and "sequenceNum" not in columns


def test_the_databricks_example_without_history_of_city(spark: Any, world: dict) -> None:
    got = [
        (r["userId"], r["name"], r["city"], decode(r["__START_AT"]), end(r))
        for r in rows(spark, world["cfg"], "dbx_users_city")
    ]
    assert sorted(got, key=repr) == [
        (123, "Isabel", "Chihuahua", (1,), (6,)),
        (124, "Raul", "Oaxaca", (1,), None),
        (125, "Mercedes", "Guadalajara", (2,), None),
        (126, "Lily", "Cancun", (2,), None),
    ]


def end(r: dict[str, Any]) -> tuple | None:
    """A version's decoded end (``None`` while current)."""
    return decode(r["__END_AT"]) if r["__END_AT"] is not None else None
