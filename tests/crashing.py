"""Crash injection for the crash tests, outside the product: ``python -m tests.crashing
STEP[@BATCH] ARGS…`` runs ``cdcflow ARGS…`` with a step hook that kills the process (exit
status 137, as SIGKILL would) right after that step is reached — a ledgered commit
(``merge``, ``dead_letters``…) or a maintenance action (``before:rewrite_data_files``…) — to
prove that a rerun converges from any point. ``during:ACTION`` kills it inside a maintenance
action instead: once the action has a Spark job running (a rewrite's files being written,
not committed yet; an orphan removal listing or deleting) or a file of the table is gone (an
expiry, which runs in the driver, has committed and is deleting the files it expired); an
action that did neither exits 138 when it ends. :func:`install` does the same inside
a job of the test's own (``tests/api_job.py``).

The crash tests divide their work between the two Spark lines that CI runs side by side
(their subject is cdcflow's commit protocol, the same code on both lines): a crash matrix
(the commit steps of a batch, the maintenance actions, the points of a Kafka follow) proves
each point on one line — :func:`line_points`: Spark 4 the first of every three points, Spark
3.5 the other two, as Spark 4's suite also runs the Spark Connect tests — and a test marked
``line("3.5")`` (five crash tests) or ``line("4")`` (the live PostgreSQL stack with its
faults) runs on that line only (``conftest.py`` deselects it on the other). A CI run thus
proves every point and runs every crash test; SIGKILL mid-batch, the Kafka follow's kill and
the signal tests run on both lines. ``CDCFLOW_CRASH_POINTS=all`` runs every point and
every crash test on the line at hand."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cdcflow.iceberg import ledger

#: Where ``python -m tests.crashing`` is run from (``tests`` importable).
ROOT = Path(__file__).resolve().parents[1]


#: Environment variable: ``all`` runs every crash point and crash test on this Spark line.
POINTS_ENV = "CDCFLOW_CRASH_POINTS"


def spark_line(version: str | None = None) -> str:
    """The Spark line of the installed PySpark (or of ``version``): ``"4"`` or ``"3.5"``."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("pyspark")
    major, minor = version.split(".")[:2]
    return major if int(major) >= 4 else f"{major}.{minor}"


def every_line() -> bool:
    """Whether this run proves every crash point and runs every crash test."""
    return os.environ.get(POINTS_ENV, "") == "all"


def line_points(points: Sequence[str], spark_version: str | None = None) -> list[str]:
    """The points of a crash matrix this Spark line proves (see the module's text), in their
    order."""
    if every_line():
        return list(points)
    if spark_line(spark_version) == "4":
        return [p for i, p in enumerate(points) if i % 3 == 0]
    return [p for i, p in enumerate(points) if i % 3 != 0]


#: Exit status of a ``during:`` crash whose action ended without running a Spark job.
NO_JOB = 138


def _files(location: str) -> list[Path]:
    root = Path(location.removeprefix("file:"))
    return [Path(d, f) for d, _, names in os.walk(root) for f in names]


def _kill_inside(location: str) -> None:
    """Watch the driver's jobs and the table's files; exit 137 as soon as a job is running
    or a file the table had is gone (an action that runs in the driver has committed and is
    deleting what it replaced)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    assert sc is not None
    tracker = sc.statusTracker()
    had = _files(location) if location else []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if tracker.getActiveJobsIds() or not all(f.exists() for f in had):
            sys.stdout.flush()
            os._exit(137)
        time.sleep(0.002)


def install(spec: str) -> None:
    """Kill the process once the step ``spec`` (``step`` or ``step@batch``) is reached, or
    inside the maintenance action ``during:ACTION`` (see the module's text)."""
    step, _, batch = spec.partition("@")
    if step.startswith("during:"):
        action = step.removeprefix("during:")

        def watch(props: Mapping[str, str]) -> None:
            reached = props.get(ledger.STEP)
            if reached == f"before:{action}":
                where = props.get(ledger.LOCATION, "")
                threading.Thread(target=_kill_inside, args=(where,), daemon=True).start()
            elif reached == action:
                sys.stdout.flush()
                os._exit(NO_JOB)

        ledger.STEP_HOOKS.append(watch)
        return

    def crash(props: Mapping[str, str]) -> None:
        if props.get(ledger.STEP) == step and (not batch or props.get(ledger.BATCH) == batch):
            sys.stdout.flush()
            os._exit(137)

    ledger.STEP_HOOKS.append(crash)


def command(spec: str | None, *args: str) -> list[str]:
    """The command line of ``cdcflow ARGS…``, killed at ``spec`` when one is given."""
    if spec is None:
        return [sys.executable, "-m", "cdcflow", *args]
    return [sys.executable, "-m", "tests.crashing", spec, *args]


if __name__ == "__main__":
    from cdcflow.cli.main import main

    install(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
