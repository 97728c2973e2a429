"""``python -m cdcflow.testing.live [--minutes M] [--short] [--root DIR]``: a live run with
its own services (``make live-demo``); prints the report and exits 0 when every replica
equals its table."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run the live scenario and print its report."""
    from cdcflow.testing.live.report import Plan
    from cdcflow.testing.live.scenario import LiveRun

    parser = argparse.ArgumentParser(prog="python -m cdcflow.testing.live")
    parser.add_argument("--minutes", type=float, default=3.0, help="minutes of workload")
    parser.add_argument(
        "--short", action="store_true", help="one fault of each kind (the test's version)"
    )
    parser.add_argument("--root", type=Path, help="keep the run's folders here")
    args = parser.parse_args(argv)
    n = 1 if args.short else 2
    plan = Plan(duration=args.minutes * 60, connect_kills=n, cdcflow_kills=n, broker_restarts=1)
    root = args.root or Path(tempfile.mkdtemp(prefix="cdcflow-live-"))
    # a SIGTERM stops the run as Ctrl-C does: the services it started are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    run = LiveRun(root, plan, log=lambda line: print(line, file=sys.stderr, flush=True))

    def spark():  # type: ignore[no-untyped-def]
        import cdcflow.api as cdc

        return cdc.session(str(root / "pipeline.yaml"))

    try:
        report = run.run(spark)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    for line in report.lines():
        print(line)
    print(f"live run: {time.monotonic() - started:.0f}s in all")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
