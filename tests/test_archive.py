"""A landing zone's processed files moved to its archive, so a long-running pipeline's listing
holds only what waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import load_config
from tests.scenario import ev, land, rows, run

pytestmark = pytest.mark.spark


def test_files_of_committed_batches_move_to_the_archive(spark: Any, tmp_path: Path) -> None:
    landing, archive = tmp_path / "landing", tmp_path / "archive"
    cfg = load_config(
        {
            "pipeline": "archived",
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": "archived",
            "catalog": {"name": "cdc", "warehouse": str(tmp_path / "warehouse")},
            "sources": [
                {
                    "name": "src",
                    "path": str(landing),
                    "archive": str(archive),
                    "dialect": "savegress",
                    "keys": {"t": ["id"]},
                }
            ],
        }
    )
    first = land(landing, [ev("INSERT", "t", 10, after={"id": 1, "v": "a"})])
    run(spark, cfg)
    second = land(landing, [ev("UPDATE", "t", 20, after={"id": 1, "v": "b"})])
    run(spark, cfg)
    assert [(r["id"], r["v"]) for r in rows(spark, cfg, "t", "id, v")] == [(1, "b")]
    waiting = sorted(p.name for p in landing.rglob("*") if p.is_file())
    archived = sorted(p.name for p in archive.rglob("*") if p.is_file())
    # a batch's files move once it is committed and the next one starts; the last batch's
    # files wait for the next run
    assert first.name in archived and first.name not in waiting
    assert second.name in waiting and second.name not in archived
