"""The scenario world shared by the merge and scd2 scenario tests: one landing zone with a
table per rule, run three times (run 2 brings late and out-of-order events, run 3 redelivers
run 1's files unchanged under new names). Sharing the runs keeps the suite's time down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.scenario import config, ev, land, rows, run

HISTORY_TABLES = (
    "h1_dup",
    "h2_split",
    "h3_older",
    "h4_late_delete",
    "h5_truncate",
    "h6_partial",
    "h7_tracked",
    "h8_schema",
    "h9_pk",
    "h10_bad",
    "h11_after_delete",
)


#: Databricks' ``apply_changes`` example, in its order: ``userId, name, city, operation,
#: sequenceNum``.
DATABRICKS_FEED: list[tuple[int, str | None, str | None, str, int]] = [
    (124, "Raul", "Oaxaca", "INSERT", 1),
    (123, "Isabel", "Monterrey", "INSERT", 1),
    (125, "Mercedes", "Tijuana", "INSERT", 2),
    (126, "Lily", "Cancun", "INSERT", 2),
    (123, None, None, "DELETE", 6),
    (125, "Mercedes", "Guadalajara", "UPDATE", 6),
    (125, "Mercedes", "Mexicali", "UPDATE", 5),
    (123, "Isabel", "Chihuahua", "UPDATE", 5),
]


def databricks_example(table: str) -> list[dict[str, Any]]:
    """The change feed of the example as canonical events: they carry ``operation`` and
    ``sequenceNum`` as columns, and their commit positions say nothing (all 1)."""
    out = []
    for uid, name, city, op, n in DATABRICKS_FEED:
        image = {"userId": uid, "name": name, "city": city, "operation": op, "sequenceNum": n}
        if op == "DELETE":
            out.append(ev("DELETE", table, 1, before=image))
        else:
            out.append(ev(op, table, 1, after=image))
    return out


#: Tables without a key (``keys: none``): multisets of rows.
KEYLESS_TABLES = ("k1_bag", "k2_truncate")


def bag(op: str, seq: int, event: str, **images: dict[str, Any]) -> dict[str, Any]:
    """An event of table ``k1_bag`` with its producer's id."""
    return ev(op, "k1_bag", seq, id=event, **images)


#: ``k1_bag``'s events by run: identical rows under other ids (copies), the same event twice
#: (a duplicate), a delete delivered before the inserts it counts against, a delete whose row
#: is inserted only in run 2, two contents of one event (the later delivered wins), an update
#: without a before image (dead-lettered), an update of one of two copies of a row delivered
#: before the second copy's insert; run 3 redelivers run 1.
BAG_RUN1 = [
    bag("DELETE", 30, "e4", before={"v": "a", "n": 1}),
    bag("INSERT", 10, "e1", after={"v": "a", "n": 1}),
    bag("INSERT", 11, "e2", after={"v": "a", "n": 1}),
    bag("INSERT", 10, "e1", after={"v": "a", "n": 1}),
    bag("INSERT", 12, "e3", after={"v": "b", "n": 2}),
    bag("UPDATE", 20, "e5", before={"v": "b", "n": 2}, after={"v": "c", "n": 3}),
    bag("INSERT", 13, "e6", after={"v": "d", "n": 4}),
    bag("INSERT", 13, "e6", after={"v": "d2", "n": 4}),
    bag("DELETE", 40, "e7", before={"v": "z", "n": 9}),
    bag("UPDATE", 41, "e8", after={"v": "q", "n": 0}),
]
BAG_RUN2 = [
    bag("INSERT", 35, "e9", after={"v": "z", "n": 9}),
    bag("INSERT", 11, "e2", after={"v": "a", "n": 1}),
    # one of two copies of ('a', 1) updated, delivered before the insert of the second
    bag("UPDATE", 60, "e11", before={"v": "a", "n": 1}, after={"v": "e", "n": 5}),
    bag("INSERT", 50, "e10", after={"v": "a", "n": 1}),
]
TRUNCATE_RUN1 = [
    ev("INSERT", "k2_truncate", 10, after={"v": "x"}),
    ev("INSERT", "k2_truncate", 11, after={"v": "x"}),
    ev("TRUNCATE", "k2_truncate", 20),
    ev("INSERT", "k2_truncate", 30, after={"v": "y"}),
]
TRUNCATE_RUN2 = [
    ev("INSERT", "k2_truncate", 15, after={"v": "late"}),
    ev("DELETE", "k2_truncate", 40, before={"v": "y"}),
    ev("INSERT", "k2_truncate", 41, after={"v": "w"}),
]


def snapshot(spark: Any, cfg: Any, table: str) -> list[dict[str, Any]]:
    """A history table's rows without ``_cdc`` (its ``applied_at`` moves with every write)."""
    return [{k: v for k, v in r.items() if k != "_cdc"} for r in rows(spark, cfg, table)]


KEYS = {
    t: ["id"]
    for t in (
        "s1_order",
        "s2_stale",
        "s3_delete",
        "s3_soft",
        "s4_partial",
        "s5_pk",
        "s5_truncate",
        "s5_retruncate",
        "s6_schema",
        "s8_bad",
    )
}


def build(spark: Any, root: Path, catalog: str = "cdc") -> dict[str, Any]:
    """Land and run the three runs into ``catalog``; what the tests read back."""
    tables: dict[str, Any] = {"s3_soft": {"deletes": "soft"}}
    tables.update({t: {"mode": "scd2", "keys": ["id"]} for t in HISTORY_TABLES})
    tables["h7_tracked"] = {**tables["h7_tracked"], "track_history_columns": ["name"]}
    # the SCD type 2 example of Databricks' AUTO CDC documentation, and its variant without
    # history of city
    dbx = {
        "mode": "scd2",
        "keys": ["userId"],
        "sequence_by": "sequenceNum",
        "except_columns": ["operation", "sequenceNum"],
    }
    tables["dbx_users"] = dbx
    tables["dbx_users_city"] = {**dbx, "track_history_except_columns": ["city"]}
    tables.update({t: {"keys": "none"} for t in KEYLESS_TABLES})
    cfg = config(root, "scen", keys=KEYS, tables=tables, catalog=catalog)
    landing = root / "landing"
    run1 = [
        # 1: order by sequence, duplicates, conflicts
        [
            ev("INSERT", "s1_order", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "s1_order", 30, after={"id": 1, "v": "c"}),
            ev("UPDATE", "s1_order", 20, after={"id": 1, "v": "b"}),
            ev("INSERT", "s1_order", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "s1_order", 40, after={"id": 2, "v": "x"}),
        ],
        [
            ev("INSERT", "s1_order", 40, after={"id": 2, "v": "y"}),  # same seq, delivered later
            # 2: stale in a later run
            ev("INSERT", "s2_stale", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "s2_stale", 50, after={"id": 1, "v": "new"}),
            # 3: tombstones
            ev("INSERT", "s3_delete", 10, after={"id": 1, "v": "a"}),
            ev("DELETE", "s3_delete", 20, before={"id": 1, "v": "a"}),
            ev("DELETE", "s3_delete", 20, before={"id": 2}),
            ev("INSERT", "s3_delete", 10, after={"id": 2, "v": "late"}),
            ev("INSERT", "s3_delete", 10, after={"id": 3, "v": "a"}),
            ev("DELETE", "s3_delete", 20, before={"id": 3}),
            ev("INSERT", "s3_soft", 10, after={"id": 1, "v": "a"}),
            ev("DELETE", "s3_soft", 20, before={"id": 1, "v": "a"}),
            # 4: partial images
            ev("INSERT", "s4_partial", 10, after={"id": 1, "a": "a0", "b": "b0"}),
            ev("UPDATE", "s4_partial", 30, after={"id": 1, "a": "a30"}, partial=True),
            # 5: primary-key change, truncate
            ev("INSERT", "s5_pk", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "s5_pk", 20, before={"id": 1, "v": "a"}, after={"id": 2, "v": "a"}),
            ev("INSERT", "s5_truncate", 10, after={"id": 1}),
            ev("INSERT", "s5_truncate", 11, after={"id": 2}),
            ev("INSERT", "s5_truncate", 25, after={"id": 5}),
            ev("TRUNCATE", "s5_truncate", 20),
            ev("INSERT", "s5_truncate", 30, after={"id": 3}),
            # run 2 truncates, then writes a key again, deletes one and inserts one
            ev("INSERT", "s5_retruncate", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "s5_retruncate", 11, after={"id": 2, "v": "b"}),
            ev("INSERT", "s5_retruncate", 12, after={"id": 3, "v": "c"}),
            # 6: schema evolution
            ev("INSERT", "s6_schema", 10, after={"id": 1, "v": "a"}),
            ev(
                "DDL",
                "s6_schema",
                15,
                ddl_type="ALTER_TABLE",
                ddl_command="ALTER TABLE s6_schema ADD COLUMN extra integer",
            ),
            ev("INSERT", "s6_schema", 20, after={"id": 2, "v": "b", "extra": 5}),
        ],
    ]
    history1 = [
        [
            # duplicates collapse; a different copy at one sequence delivered later wins
            ev("INSERT", "h1_dup", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "h1_dup", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "h1_dup", 20, after={"id": 1, "v": "b"}),
            # a late event splits an interval (run 2 brings 20)
            ev("INSERT", "h2_split", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "h2_split", 30, after={"id": 1, "v": "c"}),
            # older than everything (run 2 brings 10)
            ev("UPDATE", "h3_older", 20, after={"id": 1, "v": "b"}),
            # a late delete (run 2 brings 20)
            ev("INSERT", "h4_late_delete", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "h4_late_delete", 30, after={"id": 1, "v": "c"}),
            # truncate closes every open version
            ev("INSERT", "h5_truncate", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "h5_truncate", 10, after={"id": 2, "v": "a"}),
            ev("TRUNCATE", "h5_truncate", 20),
            ev("INSERT", "h5_truncate", 30, after={"id": 2, "v": "b"}),
            # partial events carry the previous version's columns
            ev("INSERT", "h6_partial", 10, after={"id": 1, "a": "a10", "b": "b10"}),
            ev("UPDATE", "h6_partial", 30, after={"id": 1, "b": "b30"}, partial=True),
            # late events after a delete (run 2 brings 40 for both keys): recomputed from
            # the delete, carrying from the events after it, the versions before it kept
            ev("INSERT", "h11_after_delete", 10, after={"id": 1, "a": "a10", "b": "b10"}),
            ev("DELETE", "h11_after_delete", 20, before={"id": 1}),
            ev("INSERT", "h11_after_delete", 30, after={"id": 1, "a": "a30", "b": "b30"}),
            ev("UPDATE", "h11_after_delete", 50, after={"id": 1, "b": "b50"}, partial=True),
            ev("INSERT", "h11_after_delete", 10, after={"id": 2, "a": "x", "b": "y"}),
            ev("DELETE", "h11_after_delete", 20, before={"id": 2}),
            ev("INSERT", "h11_after_delete", 30, after={"id": 2, "a": "c", "b": "c"}),
            ev("UPDATE", "h11_after_delete", 50, after={"id": 2, "a": "d", "b": "d"}),
        ],
        [
            ev("UPDATE", "h1_dup", 20, after={"id": 1, "v": "b2"}),
            # tracked columns: a change of city alone updates the version in place
            ev("INSERT", "h7_tracked", 10, after={"id": 1, "name": "A", "city": "X"}),
            ev("UPDATE", "h7_tracked", 20, after={"id": 1, "name": "A", "city": "Y"}),
            ev("UPDATE", "h7_tracked", 30, after={"id": 1, "name": "B", "city": "Y"}),
            ev("UPDATE", "h7_tracked", 40, after={"id": 1, "name": "B", "city": "Z"}),
            ev("INSERT", "h8_schema", 10, after={"id": 1, "v": "a"}),
            # a key change closes the old key and opens the new one
            ev("INSERT", "h9_pk", 10, after={"id": 1, "v": "a"}),
            ev("UPDATE", "h9_pk", 20, before={"id": 1, "v": "a"}, after={"id": 2, "v": "a"}),
            ev("INSERT", "h10_bad", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "h10_bad", 20, after={"v": "no key"}),
        ],
    ]
    history2 = [
        [
            ev("UPDATE", "h2_split", 20, after={"id": 1, "v": "b"}),
            ev("INSERT", "h3_older", 10, after={"id": 1, "v": "a"}),
            ev("DELETE", "h4_late_delete", 20, before={"id": 1}),
            ev("UPDATE", "h5_truncate", 15, after={"id": 1, "v": "late"}),
            ev("UPDATE", "h6_partial", 20, after={"id": 1, "a": "a20"}, partial=True),
            ev("UPDATE", "h8_schema", 20, after={"id": 1, "v": "b", "extra": 7}),
            ev("UPDATE", "h11_after_delete", 40, after={"id": 1, "a": "a40"}, partial=True),
            # the values of 50 arrive at 40: 50 changes nothing any more, its version goes
            ev("UPDATE", "h11_after_delete", 40, after={"id": 2, "a": "d", "b": "d"}),
        ]
    ]
    run1 = [
        *run1,
        *history1,
        databricks_example("dbx_users"),
        databricks_example("dbx_users_city"),
        BAG_RUN1[:5],
        [*BAG_RUN1[5:], *TRUNCATE_RUN1],
    ]
    run1_files = [land(landing, m) for m in run1]
    # 8: bad input beside good input in one file
    bad = (
        b'{"operation":"INSERT","table":"s8_bad","after":{"id":1},"position":{"lsn":"0/1"}}\n'
        b'{"operation":"INSERT","table":"s8_bad","after":{"id":\n'
        b"this is not json\n"
        b'{"operation":"INSERT","table":"s8_bad","after":{"id":9,"v":"\xff"}}\n'
        b'{"operation":"EXPLODE","table":"s8_bad","after":{"id":3}}\n'
        b'{"operation":"DELETE","table":"s8_bad"}\n'
        b'{"operation":"INSERT","table":"s8_bad","after":{"id":2},"position":{"lsn":"0/2"}}\n'
    )
    bad_file = land(landing, bad)
    reports1 = run(spark, cfg)
    snap1 = {t: rows(spark, cfg, t) for t in ("s1_order", "s2_stale", "s5_pk", *KEYLESS_TABLES)}
    history_snap1 = {t: snapshot(spark, cfg, t) for t in ("h1_dup", "h9_pk")}
    land(
        landing,
        [
            ev("UPDATE", "s2_stale", 30, after={"id": 1, "v": "old"}),
            ev("INSERT", "s3_delete", 15, after={"id": 1, "v": "resurrected?"}),
            ev("INSERT", "s3_delete", 30, after={"id": 3, "v": "again"}),
            ev("INSERT", "s3_soft", 15, after={"id": 1, "v": "late"}),
            ev("UPDATE", "s4_partial", 20, after={"id": 1, "b": "b20"}, partial=True),
            ev("INSERT", "s5_pk", 5, after={"id": 1, "v": "older"}),
            ev("INSERT", "s5_truncate", 15, after={"id": 4}),
            ev("TRUNCATE", "s5_retruncate", 40),
            ev("UPDATE", "s5_retruncate", 41, after={"id": 2, "v": "b2"}),
            ev("DELETE", "s5_retruncate", 42, before={"id": 3}),
            ev("INSERT", "s5_retruncate", 43, after={"id": 7, "v": "g"}),
            ev("INSERT", "s6_schema", 30, after={"id": 3, "v": 123}),  # v is a string column
            ev("INSERT", "s6_schema", 31, after={"id": 4, "v": "d", "extra": 6}),
        ],
    )
    for m in history2:
        land(landing, m)
    land(landing, [*BAG_RUN2, *TRUNCATE_RUN2])
    retruncate = f"{cfg.catalog.name}.{cfg.namespace}.s5_retruncate.snapshots"
    snapshots1 = spark.sql(f"SELECT count(*) AS n FROM {retruncate}").collect()[0]["n"]
    reports2 = run(spark, cfg)
    snapshots2 = spark.sql(f"SELECT count(*) AS n FROM {retruncate}").collect()[0]["n"]
    history = {t: snapshot(spark, cfg, t) for t in (*HISTORY_TABLES, "dbx_users", "dbx_users_city")}
    before3 = {
        t: rows(spark, cfg, t)
        for t in (
            "s1_order",
            "s2_stale",
            "s3_delete",
            "s4_partial",
            "s5_pk",
            "s5_truncate",
            "s5_retruncate",
            "s6_schema",
            *KEYLESS_TABLES,
        )
    }
    for f in run1_files:  # redelivery of run 1, unchanged, under new names
        land(landing, f.read_bytes())
    reports3 = run(spark, cfg)
    return {
        "cfg": cfg,
        "reports": (reports1, reports2, reports3),
        "snap1": snap1,
        "before3": before3,
        "bad_file": bad_file,
        "history_snap1": history_snap1,
        "history": history,
        "retruncate_snapshots": snapshots2 - snapshots1,
    }
