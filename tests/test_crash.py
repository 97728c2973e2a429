"""A pipeline killed with SIGKILL in the middle of a batch, then rerun, leaves the replicas
exactly equal to the oracle."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow.dialects import renderer_features
from cdcflow.dialects.savegress.render import render_to_landing
from cdcflow.simulation.landing import append, land
from cdcflow.simulation.workload import generate
from cdcflow.testing.compare import compare_replicas
from tests.crashing import ROOT, command, line_points
from tests.processes import pipeline_config as _config

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _run(
    config: Path, kill_after_batches: int | None, crash_after: str | None = None
) -> tuple[int, list[str]]:
    proc = subprocess.Popen(
        command(crash_after, "run", str(config)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        cwd=ROOT,
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


def _rerun(spark: Any, config: Path) -> int:
    """The run after a crash, in the test's own session (no process start: the crash is what
    needs a process of its own); its exit status as ``cdcflow run`` would give it."""
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline

    return Pipeline(load_config_file(config), spark).run().exit_status


def _check(spark: Any, w: Any, namespace: str, histories: tuple[str, ...] = ()) -> None:
    """Replicas (and the ``histories``, scd2 tables) equal the oracle's; every batch is in the
    batch history once."""
    compare_replicas(spark, w, namespace, histories=histories).assert_equal()
    # every batch is in the history exactly once, whatever was replayed
    hist = spark.sql(
        f"SELECT batch_id, count(*) AS n FROM cdc.{namespace}__cdcflow.batches GROUP BY batch_id"
    ).collect()
    assert hist and all(r["n"] == 1 for r in hist)


def test_crash_after_each_commit_step_then_rerun_equals_oracle(spark: Any, tmp_path: Path) -> None:
    """The process dies right after one commit of a batch (the first batch's versions
    appended to the history table that batch created, a merge, tombstones, dead letters,
    batch history, an scd2 table's history log, then its versions; each Spark line proves
    half of these points, see ``tests/crashing.py``), at a later batch on each rerun — the
    replay of the first batch finds its tables existing and merges; the final rerun converges
    to the oracle and the dead letters are not doubled."""
    w = generate(7, tables=3, transactions=36)
    res = render_to_landing(w, tmp_path / "landing", seed=7, files=6, duplicates=0.2)
    for f in res.files:  # one bad message per file, so every batch writes dead letters
        append(f, b"this line is not json\n")
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    history = sorted(w.tables)[0]
    config = _config(
        tmp_path,
        warehouse,
        res.options,
        namespace="crash_steps",
        tables={history: {"mode": "scd2"}},
    )
    steps = (
        "versions@0",
        "merge@1",
        "tombstones@2",
        "dead_letters@3",
        "history@4",
        "log@5",
        "versions@5",
    )
    for step in line_points(steps):  # this Spark line's half: tests/crashing.py
        rc, lines = _run(config, None, crash_after=step)
        assert rc == 137, (step, lines)
    assert _rerun(spark, config) == 3  # completed, with dead letters (the bad lines)
    _check(spark, w, "crash_steps", (history,))
    dead = spark.sql(
        "SELECT origin, count(*) AS n FROM cdc.crash_steps__cdcflow.dead_letters GROUP BY origin"
    ).collect()
    assert len(dead) == len(res.files) and all(r["n"] == 1 for r in dead)


def test_sigkill_mid_batch_then_rerun_equals_oracle(spark: Any, tmp_path: Path) -> None:
    w = generate(99, tables=3, transactions=50)
    res = render_to_landing(w, tmp_path / "landing", seed=99, files=6, duplicates=0.2)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, res.options)

    rc, lines = _run(config, kill_after_batches=1)
    assert rc == -signal.SIGKILL, lines
    assert _rerun(spark, config) == 0

    _check(spark, w, "crash")


@pytest.mark.line("3.5")  # tests/crashing.py
def test_crash_around_split_message_reassembly_then_rerun_equals_oracle(
    spark: Any, tmp_path: Path
) -> None:
    """SQL Server CES events, every third one split into segments spread over different files
    (so messages complete batches after they start): the process dies right after the
    segments-table commit of a batch; the rerun converges, with no dead letters and no segment
    left pending."""
    import orjson

    from cdcflow.dialects import renderer
    from cdcflow.dialects.sqlserver_ces.render import split_event

    w = generate(5, tables=2, transactions=40, features=renderer_features("sqlserver_ces"))
    plain = tmp_path / "plain"
    res = renderer("sqlserver_ces")(w, plain, seed=5, faults=False)
    docs = [orjson.loads(line) for f in res.files for line in f.read_bytes().splitlines()]
    files: list[list[bytes]] = [[] for _ in range(4)]
    for i, doc in enumerate(docs):
        parts = split_event(doc, 2 + i % 2) if i % 3 == 0 else [doc]
        for j, part in enumerate(parts):
            files[(i + j) % 4].append(orjson.dumps(part))
    landing = tmp_path / "landing"
    landing.mkdir()
    for n, lines in enumerate(files):
        land(landing / f"{n:03d}.jsonl", b"\n".join(lines) + b"\n")
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, res.options, "crash_seg", dialect="sqlserver_ces")
    # (a crash after a merge is the first test's)
    rc, lines = _run(config, None, crash_after="segments@1")
    assert rc == 137, lines
    assert _rerun(spark, config) == 0
    _check(spark, w, "crash_seg")
    assert not spark.catalog.tableExists("cdc.crash_seg__cdcflow.dead_letters")
    left = spark.sql(
        "SELECT count(*) AS n FROM cdc.crash_seg__cdcflow.segments WHERE resolved_batch IS NULL"
    ).collect()[0]["n"]
    assert left == 0


@pytest.mark.line("3.5")  # tests/crashing.py
def test_consistency_mode_crash_then_rerun_equals_oracle(spark: Any, tmp_path: Path) -> None:
    """consistency: transactions, with BEGIN/COMMIT markers shuffled over files (so events wait
    for commits delivered in later batches): the process dies right after the held-events commit
    of batch 1; the rerun converges to the oracle with nothing left held."""
    w = generate(13, tables=3, transactions=36)
    res = render_to_landing(w, tmp_path / "landing", seed=13, files=5, duplicates=0.1, markers=True)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, res.options, "crash_hold", consistency="transactions")
    rc, lines = _run(config, None, crash_after="hold@1")
    assert rc == 137, lines
    assert _rerun(spark, config) == 0
    _check(spark, w, "crash_hold")
    waiting = spark.sql(
        "SELECT count(*) AS n FROM cdc.crash_hold__cdcflow.held WHERE released_batch IS NULL"
    ).collect()[0]["n"]
    assert waiting == 0
