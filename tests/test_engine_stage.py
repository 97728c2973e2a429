"""The batch's staging SQL, rows in → rows out: canonical events as a DataFrame, plans from
the engine, the staged rows and counts read back (Spark, no table written)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from cdcflow.engine.execute import BatchStage
from cdcflow.engine.meta import batch_meta, with_batch_columns
from cdcflow.engine.plan import TableSettings, decide
from cdcflow.engine.stats import TableStats
from cdcflow.event import spark_schema_ddl
from cdcflow.sequence import encode

pytestmark = pytest.mark.spark

FIELDS = [c.split(" ")[0].strip("`") for c in spark_schema_ddl().split(", ")]


def ev(
    op: str,
    seq: int,
    *,
    after: dict[str, str] | None = None,
    before: dict[str, str] | None = None,
    table: str = "t",
    origin: str = "f1",
    offset: int = 0,
    partial: bool = False,
    types: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A decoded row: images as wire strings."""
    row: dict[str, Any] = dict.fromkeys(FIELDS)
    row.update(
        id=f"e{seq}-{offset}",
        dialect="savegress",
        table=table,
        operation=op,
        sequence=encode((seq,)),
        after=after,
        before=before,
        partial=partial,
        metadata={},
        types=types or dict.fromkeys((after or before or {}), "string"),
        origin=origin,
        offset=offset,
        item=0,
    )
    row.update(extra)
    return row


def stage(spark: Any, rows: list[dict[str, Any]], **settings: Any) -> tuple[dict, TableStats]:
    df = spark.createDataFrame([tuple(r[f] for f in FIELDS) for r in rows], spark_schema_ddl())
    events = with_batch_columns(df)
    meta = batch_meta(spark, events)
    plans = [
        decide(TableSettings(t, **{"keys": ("id",), **settings}), m, None)
        for t, m in meta.tables.items()
    ]
    s = BatchStage(spark, events, plans)
    s.stage(None)
    stats = s.stats()
    assert s.staged_view is not None
    staged: dict[Any, dict[str, Any]] = defaultdict(dict)
    for r in spark.sql(f"SELECT * FROM {s.staged_view} WHERE NOT _bad").collect():
        staged[tuple(r["_kv"])] = r.asDict(recursive=True)
    s.release()
    return dict(staged), stats["t"]


def test_newest_wins_duplicates_collapse_conflicts_counted(spark: Any) -> None:
    staged, stats = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "1", "v": "a"}),
            ev("UPDATE", 30, after={"id": "1", "v": "c"}),
            ev("UPDATE", 20, after={"id": "1", "v": "b"}),
            ev("INSERT", 10, after={"id": "1", "v": "a"}, offset=9),  # exact duplicate
            ev("INSERT", 40, after={"id": "2", "v": "x"}, origin="f1"),
            ev("INSERT", 40, after={"id": "2", "v": "y"}, origin="f2"),  # delivered later
        ],
    )
    assert staged[("1",)]["_img"] == {"id": "1", "v": "c"}
    assert staged[("2",)]["_img"] == {"id": "2", "v": "y"}
    assert (stats.events, stats.winners, stats.conflicts, stats.duplicates) == (6, 4, 1, 1)
    assert stats.writes == 2 and stats.deletes == 0


def test_partial_events_keep_each_column_of_its_newest_author(spark: Any) -> None:
    staged, _ = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "1", "a": "a0", "b": "b0"}),
            ev("UPDATE", 30, after={"id": "1", "a": "a30"}, partial=True),
            ev("UPDATE", 20, after={"id": "1", "b": "b20"}, partial=True),
            ev("UPDATE", 5, after={"id": "1", "a": "old"}, partial=True),  # older than the base
        ],
    )
    row = staged[("1",)]
    assert row["_img"] == {"id": "1", "a": "a30", "b": "b20"}
    assert row["_cs"] == {"id": encode((30,)), "a": encode((30,)), "b": encode((20,))}
    assert row["_base_seq"] == encode((10,)) and row["_seq"] == encode((30,))


def test_a_primary_key_change_deletes_the_old_key(spark: Any) -> None:
    staged, stats = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "1", "v": "a"}),
            ev("UPDATE", 20, before={"id": "1", "v": "a"}, after={"id": "2", "v": "a"}),
        ],
    )
    assert staged[("1",)]["_op"] == "DELETE" and staged[("1",)]["_seq"] == encode((20,))
    assert staged[("2",)]["_op"] == "UPDATE"
    assert stats.deletes == 1


def test_keys_are_compared_as_values_of_their_type(spark: Any) -> None:
    typed = {"id": "decimal(10,2)", "v": "string"}
    staged, stats = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "1.5", "v": "a"}, types=typed),
            ev("UPDATE", 20, after={"id": "1.50", "v": "b"}, types=typed),
        ],
    )
    assert list(staged) == [("1.50",)] and staged[("1.50",)]["_img"]["v"] == "b"
    assert stats.winners == 2


def test_events_without_key_values_are_rejected_and_counted(spark: Any) -> None:
    staged, stats = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "1", "v": "a"}),
            ev("INSERT", 11, after={"v": "no key"}),
        ],
    )
    assert list(staged) == [("1",)]
    assert stats.rejected == {"KEY_MISSING": 1}


def test_positional_key_values_name_the_key(spark: Any) -> None:
    staged, _ = stage(
        spark,
        [
            ev("INSERT", 10, after={"id": "7", "v": "a"}),
            ev("DELETE", 20, metadata={"key_values": '["7"]'}),
        ],
    )
    assert staged[("7",)]["_op"] == "DELETE"


def test_sequence_by_values_encode_like_sequences(spark: Any) -> None:
    """``sequence_by`` columns are ordered by the same encoding the dialects use, computed in
    SQL: integers of any sign, timestamps (microseconds), dates (days) and text (escaped)."""
    from cdcflow.engine.encoding import encoded_sql
    from cdcflow.spark.sql import lit

    cases = [
        ("bigint", "0", encode([0])),
        ("bigint", "42", encode([42])),
        ("bigint", "-1250", encode([-1250])),
        ("int", "7", encode([7])),
        ("timestamp", "1970-01-01T00:00:01.5Z", encode([1_500_000])),
        ("date", "1970-01-11", encode([10])),
        ("string", 'a"b!c', encode(['a"b!c'])),
        ("string", "", encode([""])),
    ]
    exprs = ", ".join(f"{encoded_sql(lit(v), t)} AS c{i}" for i, (t, v, _) in enumerate(cases))
    got = spark.sql(f"SELECT {exprs}").collect()[0]
    assert [got[f"c{i}"] for i in range(len(cases))] == [e for _, _, e in cases]
    assert encoded_sql("'1.5'", "double") is None
