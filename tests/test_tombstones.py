"""Tombstones: one internal table for every replica; tables of earlier versions (one per
replica, typed key columns) are moved into it and keep protecting deleted keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.sequence import encode
from tests.scenario import config, ev, land, rows, run

pytestmark = pytest.mark.spark


def test_per_replica_tombstones_of_earlier_versions_keep_protecting(
    spark: Any, tmp_path: Path
) -> None:
    cfg = config(tmp_path, "tomb_mig", keys={"t": ["id"], "u": ["a", "b"]})
    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "t", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "u", 10, after={"a": 1, "b": "x", "v": "a"}),
        ],
    )
    run(spark, cfg)
    # as an earlier version left them: key 5 of t and (2, 'y') of u deleted at LSN 100
    spark.sql(
        "CREATE TABLE cdc.tomb_mig__cdcflow.tombstones__t (id bigint, _seq string, "
        "_deleted_at timestamp) USING iceberg TBLPROPERTIES ('cdcflow.key-columns'='id')"
    )
    spark.sql(
        "CREATE TABLE cdc.tomb_mig__cdcflow.tombstones__u (a bigint, b string, _seq string, "
        "_deleted_at timestamp) USING iceberg TBLPROPERTIES ('cdcflow.key-columns'='a,b')"
    )
    seq = encode((100, 0))  # LSN 0/64, as the unified format's events order
    spark.sql(f"INSERT INTO cdc.tomb_mig__cdcflow.tombstones__t VALUES (5, '{seq}', now())")
    spark.sql(f"INSERT INTO cdc.tomb_mig__cdcflow.tombstones__u VALUES (2, 'y', '{seq}', now())")
    land(
        landing,
        [
            ev("INSERT", "t", 50, after={"id": 5, "v": "late"}),  # older than its delete
            ev("INSERT", "t", 150, after={"id": 6, "v": "new"}),
            ev("INSERT", "u", 50, after={"a": 2, "b": "y", "v": "late"}),
        ],
    )
    run(spark, cfg)
    assert [r["id"] for r in rows(spark, cfg, "t", "id")] == [1, 6]
    assert [(r["a"], r["b"]) for r in rows(spark, cfg, "u", "a, b")] == [(1, "x")]
    left = [r["tableName"] for r in spark.sql("SHOW TABLES IN cdc.tomb_mig__cdcflow").collect()]
    assert not [n for n in left if n.startswith("tombstones__")]
    kept = spark.sql("SELECT target, key FROM cdc.tomb_mig__cdcflow.tombstones").collect()
    assert {(r["target"], r["key"]) for r in kept} == {("t", '["5"]'), ("u", '["2","y"]')}


def test_tombstones_are_looked_up_for_the_replicas_that_have_some(
    spark: Any, tmp_path: Path
) -> None:
    from cdcflow.iceberg.catalog import Catalog
    from cdcflow.iceberg.tombstones import TombstoneIndex

    cfg = config(tmp_path, "tomb_idx", keys={"t": ["id"], "u": ["id"]})
    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "t", 10, after={"id": 1, "v": "a"}),
            ev("INSERT", "u", 10, after={"id": 1, "v": "a"}),
            ev("DELETE", "t", 20, before={"id": 1, "v": "a"}),
        ],
    )
    run(spark, cfg)
    # the table is partitioned by replica: its partitions say which replicas have tombstones
    index = TombstoneIndex(Catalog("cdc"), "tomb_idx__cdcflow")
    assert index.targets(spark) == {"t"}
    land(
        landing,
        [
            ev("INSERT", "t", 15, after={"id": 1, "v": "late"}),  # older than its delete
            ev("INSERT", "u", 30, after={"id": 2, "v": "b"}),
        ],
    )
    run(spark, cfg)
    assert [r["id"] for r in rows(spark, cfg, "t", "id")] == []
    assert [r["id"] for r in rows(spark, cfg, "u", "id")] == [1, 2]


def test_an_unpartitioned_tombstone_table_is_looked_up_whole_and_partitioned(
    spark: Any, tmp_path: Path
) -> None:
    from cdcflow.iceberg.catalog import Catalog
    from cdcflow.iceberg.tombstones import TombstoneIndex

    cfg = config(tmp_path, "tomb_old", keys={"u": ["id"]})
    landing = tmp_path / "landing"
    land(landing, [ev("INSERT", "u", 10, after={"id": 1, "v": "a"})])
    run(spark, cfg)
    # as an earlier version left it: one unpartitioned table, key 9 of u deleted at LSN 100
    spark.sql(
        "CREATE TABLE cdc.tomb_old__cdcflow.tombstones (target string, key string, "
        "seq string, deleted_at timestamp) USING iceberg"
    )
    seq = encode((100, 0))
    spark.sql(
        f"INSERT INTO cdc.tomb_old__cdcflow.tombstones VALUES ('u', '[\"9\"]', '{seq}', now())"
    )
    land(landing, [ev("INSERT", "u", 50, after={"id": 9, "v": "late"})])
    run(spark, cfg)
    assert [r["id"] for r in rows(spark, cfg, "u", "id")] == [1]
    fields = spark.sql("SELECT * FROM cdc.tomb_old__cdcflow.tombstones.partitions").columns
    assert "partition" in fields
    # its file from before the partitioning names no replica: every replica is looked up
    assert TombstoneIndex(Catalog("cdc"), "tomb_old__cdcflow").targets(spark) is None
