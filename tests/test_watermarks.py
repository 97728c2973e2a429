"""RESOLVED events raise per-scope watermarks, never lower them; `cdcflow watermarks` shows
them with their lag."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

pytestmark = pytest.mark.spark


def test_resolved_events_raise_watermarks(spark: Any, tmp_path: Path) -> None:
    from cdcflow.cli.main import cli
    from tests.scenario import config, ev, land, rows, run

    cfg = config(tmp_path, "wm", keys={"t": ["id"]})
    landing = tmp_path / "landing"
    ts = "2026-01-01T00:00:0{}Z"
    land(
        landing,
        [
            ev("INSERT", "t", 10, after={"id": 1, "v": "a"}),
            ev("RESOLVED", "t", 20, timestamp=ts.format(2)),
            ev("RESOLVED", "t", 15, timestamp=ts.format(1)),
            ev("RESOLVED", "u", 5, timestamp=ts.format(0)),
        ],
    )
    run(spark, cfg)
    # an older watermark in a later run does not lower it
    land(landing, [ev("RESOLVED", "t", 12, timestamp=ts.format(1))])
    run(spark, cfg)
    got = {
        r["scope"]: (r["resolved_at"].isoformat(), r["batch_id"])
        for r in spark.sql("SELECT * FROM cdc.wm__cdcflow.watermarks").collect()
    }
    assert got == {"t": ("2026-01-01T00:00:02", 0), "u": ("2026-01-01T00:00:00", 0)}
    assert rows(spark, cfg, "t", "id, v") == [{"id": 1, "v": "a"}]

    path = tmp_path / "pipeline.yaml"
    doc = cfg.model_dump(mode="json")
    # the command runs in this process: its catalog is the session's
    doc["catalog"]["warehouse"] = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    path.write_text(yaml.safe_dump(doc))
    out = CliRunner().invoke(cli, ["watermarks", str(path), "--output", "json"])
    assert out.exit_code == 0, out.output
    assert '"scope":"t"' in out.output and '"lag_seconds"' in out.output
    # read through Spark: the same rows (the lag as of its own now)
    lagless = [re.sub(r',"lag_seconds":[0-9.]+', "", ln) for ln in out.output.splitlines()]
    spark_out = CliRunner().invoke(cli, ["watermarks", str(path), "--output", "json", "--spark"])
    assert spark_out.exit_code == 0, spark_out.output
    assert [re.sub(r',"lag_seconds":[0-9.]+', "", ln) for ln in spark_out.output.splitlines()] == (
        lagless
    )
