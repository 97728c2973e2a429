"""Crash injection for the crash tests, outside the product: ``python -m tests.crashing
STEP[@BATCH] ARGS…`` runs ``cdcflow ARGS…`` with a step hook that kills the process (exit
status 137, as SIGKILL would) right after that step is reached — a ledgered commit
(``merge``, ``dead_letters``…) or a maintenance action (``before:rewrite_data_files``…) — to
prove that a rerun converges from any point. :func:`install` does the same inside a job of the
test's own (``tests/api_job.py``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from cdcflow.iceberg import ledger

#: Where ``python -m tests.crashing`` is run from (``tests`` importable).
ROOT = Path(__file__).resolve().parents[1]


def install(spec: str) -> None:
    """Kill the process once the step ``spec`` (``step`` or ``step@batch``) is reached."""
    step, _, batch = spec.partition("@")

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
