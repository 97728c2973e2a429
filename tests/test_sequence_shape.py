"""Events whose sort fields are shaped differently from their table's cannot be ordered against
the others: the engine dead-letters them (SEQUENCE_SHAPE_MISMATCH), across batches and runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.engine.plan import merge_shapes, shapes_fit


def test_shapes_fit_with_unknown_kinds() -> None:
    assert shapes_fit("n,s,n", "n,s,n")
    assert shapes_fit("n,*,*", "n,s,n")
    assert not shapes_fit("n,s,n", "n,n,n")
    assert not shapes_fit("n,s", "n,s,n")
    assert merge_shapes("n,*,*", "n,s,n") == "n,s,n"


def _mongo(n: int, doc_id: str, sort_keys: list[Any], op: str = "UPDATE") -> dict[str, Any]:
    return {
        "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "read_timestamp": "2024-05-01T10:00:01.000Z",
        "source_timestamp": "2024-05-01T10:00:00.000Z",
        "object": "app_carts",
        "read_method": "mongodb-cdc",
        "source_metadata": {
            "database": "app",
            "collection": "carts",
            "change_type": op,
            "is_deleted": False,
            "primary_keys": ["_id"],
        },
        "payload": {"_id": doc_id, "n": n},
        "sort_keys": sort_keys,
    }


@pytest.mark.spark
def test_misshapen_sort_keys_are_dead_lettered(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import config, land, rows, run

    cfg = config(tmp_path, "shape")
    cfg = cfg.model_copy(
        update={"sources": [cfg.sources[0].model_copy(update={"dialect": "datastream"})]}
    )
    landing = tmp_path / "landing"
    land(
        landing,
        [
            _mongo(1, "a", [1714557600000, 10, 1], "CREATE"),
            _mongo(2, "a", [1714557600001, 11, 1]),
            _mongo(3, "b", [1714557600002, 12, 1], "CREATE"),
            _mongo(4, "a", [1714557600003, "oops"]),  # another shape: cannot be ordered
        ],
    )
    run(spark, cfg)
    assert rows(spark, cfg, "carts", "_id, n") == [{"_id": "a", "n": 2}, {"_id": "b", "n": 3}]
    props = {
        r["key"]: r["value"] for r in spark.sql("SHOW TBLPROPERTIES cdc.shape.carts").collect()
    }
    assert props["cdcflow.sequence-shape"] == "n,n,n"
    # a later run: the recorded shape decides
    land(landing, [_mongo(5, "b", ["x", 13, 1]), _mongo(6, "b", [1714557600004, 14, 1])])
    run(spark, cfg)
    assert rows(spark, cfg, "carts", "_id, n") == [{"_id": "a", "n": 2}, {"_id": "b", "n": 6}]
    dead = spark.sql(
        "SELECT error_code, error_message FROM cdc.shape__cdcflow.dead_letters"
    ).collect()
    assert [r["error_code"] for r in dead] == ["SEQUENCE_SHAPE_MISMATCH"] * 2
    assert "orders by n,n,n" in dead[0]["error_message"]
