"""End to end: bodies POSTed to `cdcflow serve` (a CockroachDB webhook batch, a signed unified
batch), then the pipeline over the receiver's landing zone → the replicas hold exactly the
changes that were acknowledged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.test_serve import SECRET, Running, base_config, signed, start

pytestmark = pytest.mark.spark


def test_posted_bodies_become_exact_replicas(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdcflow.config import load_config
    from cdcflow.pipeline.query import Pipeline

    monkeypatch.setenv("TEST_SG_SECRET", SECRET)
    (tmp_path / "token.txt").write_text("unused\n")
    server, thread = start(base_config(tmp_path), tmp_path)
    try:
        recv = Running(server, tmp_path / "landing", server.server_address[1])
        hlc = 1_700_000_000_000_000_000
        crdb = {
            "payload": [
                {"after": {"id": 1, "v": "a"}, "key": [1], "topic": "dogs", "updated": f"{hlc}.0"},
                {"after": {"id": 2, "v": "b"}, "key": [2], "topic": "dogs", "updated": f"{hlc}.0"},
                {
                    "after": {"id": 1, "v": "a2"},
                    "key": [1],
                    "topic": "dogs",
                    "updated": f"{hlc + 5}.0",
                },
            ],
            "length": 3,
        }
        later = {
            "payload": [
                {"after": None, "key": [2], "topic": "dogs", "updated": f"{hlc + 9}.0"},
                # an out-of-order duplicate of an earlier version: must not win
                {"after": {"id": 1, "v": "a"}, "key": [1], "topic": "dogs", "updated": f"{hlc}.0"},
            ],
            "length": 2,
        }
        for body in (crdb, later):
            status, _ = recv.post("/crdb", orjson.dumps(body))
            assert status == 200
        events = [
            {
                "id": f"evt-{i}",
                "source": "postgres",
                "table": "users",
                "operation": op,
                "position": {"lsn": f"0/{100 + i:X}", "sequence": 0},
                **({"after": {"id": k, "name": n}} if op != "DELETE" else {"before": {"id": k}}),
                "key": {"id": k},
            }
            for i, (op, k, n) in enumerate(
                [
                    ("INSERT", 1, "ann"),
                    ("INSERT", 2, "bob"),
                    ("UPDATE", 1, "anna"),
                    ("DELETE", 2, ""),
                ]
            )
        ]
        batch = orjson.dumps(
            {
                "batch_id": "b1",
                "batch_size": 4,
                "batch_timestamp": "2025-01-15T10:30:00Z",
                "events": events,
            }
        )
        status, _ = recv.post("/events", batch, signed(batch, "b1"))
        assert status == 200
        # the same batch again (a producer retry): answered as a duplicate, landed once
        status, reply = recv.post("/events", batch, signed(batch, "b1"))
        assert status == 200 and reply.get("status") == "duplicate"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

    cfg = load_config(
        {
            "pipeline": "served",
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": "served",
            "catalog": {"name": "cdc", "warehouse": str(tmp_path / "wh")},
            "sources": [
                {
                    "name": "crdb",
                    "path": str(tmp_path / "landing" / "crdb"),
                    "dialect": "cockroachdb",
                    "keys": {"dogs": ["id"]},
                },
                {
                    "name": "sg",
                    "path": str(tmp_path / "landing" / "savegress"),
                    "dialect": "savegress",
                },
            ],
        }
    )
    reports = Pipeline(cfg, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 0

    def rows(table: str) -> list[dict[str, Any]]:
        got = spark.sql(f"SELECT * FROM cdc.served.{table}").drop("_cdc").collect()
        return sorted((r.asDict() for r in got), key=repr)

    # two sources: each names its replicas after itself
    assert rows("crdb__dogs") == [{"id": 1, "v": "a2"}]
    assert rows("sg__users") == [{"id": 1, "name": "anna"}]
