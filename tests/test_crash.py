"""A pipeline killed with SIGKILL in the middle of a batch, then rerun, leaves the replicas
exactly equal to the oracle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.testing import oracle
from cdcflow.testing.compare import diff_table, read_replica
from cdcflow.testing.render_savegress import render_to_landing
from cdcflow.testing.workload import generate

pytestmark = pytest.mark.spark


def _config(root: Path, warehouse: str, options: Any) -> Path:
    cfg = {
        "pipeline": "crash",
        "checkpoint": str(root / "checkpoint"),
        "namespace": "crash",
        "catalog": {"name": "cdc", "type": "hadoop", "warehouse": warehouse},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
        "sources": [
            {
                "name": "s",
                "path": str(root / "landing"),
                "dialect": "savegress",
                "keys": {t: list(k) for t, k in options.table_keys.items()},
                "types": {t: dict(c) for t, c in options.column_types.items()},
                "max_files_per_batch": 1,
            }
        ],
    }
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(config: Path, kill_after_batches: int | None) -> tuple[int, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "run", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if (
            kill_after_batches is not None
            and sum(x.startswith("batch ") for x in lines) >= kill_after_batches
        ):
            time.sleep(1.5)  # into the next batch's work
            os.killpg(proc.pid, signal.SIGKILL)
            break
    return proc.wait(timeout=600), lines


def test_sigkill_mid_batch_then_rerun_equals_oracle(spark: Any, tmp_path: Path) -> None:
    w = generate(99, tables=3, transactions=80)
    res = render_to_landing(w, tmp_path / "landing", seed=99, files=6, duplicates=0.2)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, res.options)

    rc, lines = _run(config, kill_after_batches=1)
    assert rc == -signal.SIGKILL, lines
    rc, lines = _run(config, kill_after_batches=None)
    assert rc == 0, lines
    assert lines[-1].startswith("done:")

    expected = oracle.apply(w)
    for name, table in w.tables.items():
        cols = list(table.columns)
        actual = read_replica(spark, f"cdc.crash.{name}", cols)
        d = diff_table(name, list(expected[name].values()), actual, cols)
        assert d.equal, f"{name}: missing {d.missing[:3]} unexpected {d.unexpected[:3]}"
    # every batch is in the history exactly once, whatever was replayed
    hist = spark.sql(
        "SELECT batch_id, count(*) AS n FROM cdc.crash__cdcflow.batches GROUP BY batch_id"
    ).collect()
    assert hist and all(r["n"] == 1 for r in hist)
