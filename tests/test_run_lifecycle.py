"""One run at a time, and runs that stop when asked: the run lock (a second run refused at
once, a lock left by a killed run taken over) and ``--follow`` stopped by SIGTERM after the
batch in progress, without a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow.cli.main import main
from cdcflow.config import load_config_file
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.savegress.render import render_to_landing
from cdcflow.pipeline.checkpoint import LOCK_FILE, Checkpoint, PipelineBusy
from cdcflow.simulation.workload import generate
from tests.processes import pipeline_config

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _config(root: Path, warehouse: str, name: str) -> Path:
    w = generate(31, tables=2, transactions=10)
    res = render_to_landing(w, root / "landing", seed=31, files=2, duplicates=0.0)
    return pipeline_config(
        root, warehouse, res.options, name, files_per_batch=None, follow_interval="1s"
    )


def test_a_second_run_is_refused_at_once_and_a_dead_runs_lock_is_taken_over(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, "lock_once")
    cfg = load_config_file(config)
    holder = Checkpoint(cfg)
    holder.pipeline_id()
    holder.acquire()  # a live run of this pipeline (this process)
    try:
        started = time.monotonic()
        rc = main(["run", str(config)])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "is already running" in err and f"process {os.getpid()}" in err
        assert time.monotonic() - started < 30
        with pytest.raises(PipelineBusy):
            Checkpoint(cfg).acquire()
    finally:
        holder.release()
    # a lock left by a process that is gone (SIGKILL leaves it behind) does not block
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True)  # fmt: skip
    lock = {
        "run": "killed",
        "host": socket.gethostname(),
        "pid": int(dead.stdout),
        "started": time.time(),
        "heartbeat": time.time(),
    }
    (tmp_path / "checkpoint" / LOCK_FILE).write_text(json.dumps(lock))
    rc = main(["run", str(config)])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    assert captured.out.splitlines()[-1].startswith("done: 1 batch(es)")
    assert not (tmp_path / "checkpoint" / LOCK_FILE).exists()  # given back at the end


def test_follow_stops_cleanly_on_sigterm(spark: Any, tmp_path: Path) -> None:
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(tmp_path, warehouse, "lock_term")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "run", str(config), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("batch "):
            break
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=300)
    out.append(rest)
    text = "".join(out)
    assert proc.returncode == 0, text + err
    assert "stopped" in text.splitlines()[-1]
    assert "Traceback" not in err and "reentrant" not in err
    assert "stopping after the batch in progress" in err
    # Spark's warnings about what cdcflow does on purpose stay off stderr
    assert "locally checkpointed" not in err and "falling behind" not in err, err
    # and so does every other line of Spark's or log4j's (-v shows them), the stop included
    own = ("pipeline lock_term:", "stopping after the batch in progress")
    assert [ln for ln in err.splitlines() if not ln.startswith(own)] == [], err
    assert not (tmp_path / "checkpoint" / LOCK_FILE).exists()


_NO_SPARK_RUN = """
import sys, time
from cdcflow.cli.main import main
started = time.monotonic()
rc = main(["run", sys.argv[1]])
print(rc, round(time.monotonic() - started, 3), "pyspark" in sys.modules)
"""


def _run_without_spark(config: Path) -> tuple[int, float, bool, str]:
    """``cdcflow run CONFIG`` in a fresh process: its exit status, the seconds ``main`` took,
    whether PySpark was imported at all, and what it wrote on stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", _NO_SPARK_RUN, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rc, seconds, imported = proc.stdout.split()
    return int(rc), float(seconds), imported == "True", proc.stderr


def test_checks_that_need_no_spark_answer_before_spark_starts(tmp_path: Path) -> None:
    config = pipeline_config(tmp_path, str(tmp_path / "warehouse"), DialectOptions(), "early")
    (tmp_path / "landing").mkdir()
    cfg = load_config_file(config)
    holder = Checkpoint(cfg)
    holder.pipeline_id()
    holder.acquire()  # a live run of this pipeline
    try:
        rc, seconds, imported, err = _run_without_spark(config)
    finally:
        holder.release()
    assert rc == 2 and not imported and seconds < 1.0, (rc, seconds, err)
    assert err.startswith(
        f"[PIPELINE_RUNNING] pipeline 'early' is already running (process {os.getpid()}"
    )
    (tmp_path / "landing").rmdir()
    rc, seconds, imported, err = _run_without_spark(config)
    assert rc == 2 and not imported and seconds < 1.0, (rc, seconds, err)
    assert err.splitlines() == [
        f"[SOURCE_PATH_MISSING] source 's': landing zone {tmp_path / 'landing'} does not exist",
        "hint: check the path, or set create_path: true on the source to create it",
    ]
    # a Kafka source whose brokers do not answer (it took minutes and a Java trace)
    gone = tmp_path / "gone.yaml"
    gone.write_text(
        "pipeline: gone\nsources:\n  - name: pg\n    dialect: debezium\n"
        "    kafka: {bootstrap_servers: '127.0.0.1:1', topics: [dbserver1.public.orders]}\n"
    )
    rc, seconds, imported, err = _run_without_spark(gone)
    assert rc == 2 and not imported and seconds < 5.0, (rc, seconds, err)
    assert err.startswith(
        "[KAFKA_UNREACHABLE] source 'pg': the Kafka brokers at bootstrap_servers 127.0.0.1:1 "
        "could not be reached: no broker answered (127.0.0.1:1/bootstrap: Connect to "
        "ipv4#127.0.0.1:1 failed: Connection refused"
    ), err
    assert err.splitlines()[-1].startswith("hint: check the source's kafka.bootstrap_servers")


def test_follow_stopped_with_its_jvm_by_sigterm_stops_cleanly_and_expiry_waits(
    spark: Any, tmp_path: Path
) -> None:
    # SIGTERM to the whole process group (a service manager stopping the unit, Ctrl-C in a
    # terminal): the JVM shuts down at the same time as the run stops
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    w = generate(32, tables=2, transactions=10)
    first = slice(0, 7)
    res = render_to_landing(
        w, tmp_path / "landing", seed=32, files=2, duplicates=0.0, transactions=first
    )
    assert any(c.kind == "delete" for t in w.transactions[first] for c in t.changes)
    config = pipeline_config(
        tmp_path,
        warehouse,
        res.options,
        "term_group",
        files_per_batch=None,
        follow_interval="1s",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "run", str(config), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    out: list[str] = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("batch "):
            break
    os.killpg(proc.pid, signal.SIGTERM)
    rest, err = proc.communicate(timeout=300)
    text = "".join(out) + rest
    assert proc.returncode == 0, text + err
    assert text.splitlines()[-1].endswith("· stopped"), text
    assert "Traceback" not in err and "Exception" not in err, err
    assert not (tmp_path / "checkpoint" / LOCK_FILE).exists()
    tombstones = "cdc.term_group__cdcflow.tombstones"
    spark.catalog.refreshTable(tombstones)
    kept = spark.table(tombstones).count()
    assert kept > 0
    # expiry is left to the next run: its first batch drops what is past the retention
    old = "('accounts', '[1]', 'p0', timestamp'2020-01-01')"
    spark.sql(f"INSERT INTO {tombstones} VALUES {old}")
    later = slice(7, None)
    render_to_landing(w, tmp_path / "landing", seed=33, files=1, duplicates=0.0, transactions=later)
    assert main(["run", str(config)]) == 0
    spark.catalog.refreshTable(tombstones)
    assert spark.table(tombstones).where("deleted_at < timestamp'2021-01-01'").count() == 0
    assert spark.table(tombstones).count() >= kept


class _Query:
    """A streaming query seen through the calls ``Pipeline.wait`` makes: it fails (Spark's
    known Kafka restart failure) right after its first ``exception()`` look, so the next look
    finds it ended."""

    def __init__(self, name: str, fails: bool) -> None:
        self.name, self.fails, self.looks = name, fails, 0

    def exception(self) -> Exception | None:
        self.looks += 1
        return RuntimeError("NullPointerException") if self.fails and self.looks > 1 else None

    @property
    def isActive(self) -> bool:
        return self.looks == 0 if self.fails else False

    def awaitTermination(self) -> None:
        return None


def test_a_query_that_fails_between_two_looks_is_still_judged_and_started_again(
    tmp_path: Path,
) -> None:
    """``wait`` looks for a failure, then whether any query is still active: a query that
    fails between the two looks (Spark's Kafka source, SPARK-57438, over a Connect server
    whose answers take milliseconds) is judged — here started again — rather than taken for a
    run that ended well or for a failure of the run."""
    from cdcflow.pipeline.query import Pipeline

    config = pipeline_config(tmp_path, str(tmp_path / "warehouse"), DialectOptions(), "race")
    pipe = Pipeline(load_config_file(config))
    restarted: list[str] = []

    def restart() -> bool:
        for i, q in enumerate(pipe.queries):
            if q.exception() is not None:
                restarted.append(q.name)
                pipe.queries[i] = _Query("again", fails=False)  # type: ignore[assignment]
        return True

    pipe.queries = [_Query("first", fails=True)]  # type: ignore[list-item]
    pipe._restart_failed = restart  # type: ignore[method-assign]
    result = pipe.wait(timeout=5)
    assert restarted == ["first"]
    assert result.failure is None and not result.stopped
    assert [q.name for q in pipe.queries] == ["again"]  # type: ignore[attr-defined]
