"""Installs cdcflow into an existing PySpark environment and fails if pip replaces its pyspark
or pyarrow (``make check-install``); or, with ``--fresh``, into an empty one and runs the demo
there (``make check-fresh``).

A throwaway venv under a temporary folder gets a PySpark patch release (4.1 by default, or 3.5
with NumPy 1) and a pyarrow that differ from the constraints files (without pandas, as a bare
``pip install pyspark`` leaves it); then ``pip install <repo>`` and ``pip install
'<repo>[spark]'``, without the constraints, as a user would, and a smoke test that names the
jars cdcflow would load for that PySpark. The venv is removed afterwards unless ``--keep``.

``--fresh``: the empty venv gets ``pip install '<repo>[spark]'`` alone, so pip takes the newest
versions inside the ranges; then ``cdcflow jars --fetch`` into an empty jar cache (every jar;
one that cannot be resolved is reported, and fails the check unless it is Spark's Kafka
connector, which only Kafka pipelines load) and ``cdcflow demo``, which must pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: What the package build needs from the repository.
SOURCES = ("pyproject.toml", "README.md", "src")
#: Packages whose installed version must survive the install.
KEPT = ("pyspark", "pyarrow")
VERSIONS = (
    "import importlib.metadata as m, json, sys; "
    "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
)
SMOKE = (
    "import pandas, pyarrow, pyspark; "
    "import cdcflow.cli.main; "
    "from cdcflow.outputs.stream import post; "
    "from cdcflow.serve.receiver import Metrics; "
    "from cdcflow.spark.session import SparkSettings, needs; "
    "wanted = needs(SparkSettings(), pyspark.__version__); "
    "print('imports ok; jars:', ','.join(c for n in wanted for c in n.coordinates))"
)
#: Configurations whose jars ``--fresh`` checks: a landing zone on the embedded catalog, one
#: on a JDBC catalog on PostgreSQL, Kafka topics.
PIPELINES = {
    "embedded": "sources: [{name: s, path: landing}]\n",
    "postgresql": "catalog: {uri: 'jdbc:postgresql://db/iceberg', warehouse: /tmp/w}\n"
    "sources: [{name: s, path: landing}]\n",
    "kafka": "sources: [{name: s, kafka: {bootstrap_servers: 'b:9092', topics: [t]}}]\n",
}


def run_allowed(cmd: list[str], log: list[str]) -> tuple[int, str]:
    """Run ``cmd`` as :func:`run` does, but return its exit status instead of stopping."""
    print("$", " ".join(cmd), flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.append(done.stdout)
    print(done.stdout, end="" if done.stdout.endswith("\n") or not done.stdout else "\n")
    print(f"  ({time.monotonic() - started:.1f}s, exit {done.returncode})", flush=True)
    return done.returncode, done.stdout


def run(cmd: list[str], log: list[str]) -> str:
    """Run ``cmd``, echo and keep its output; a failure stops the check."""
    status, out = run_allowed(cmd, log)
    if status != 0:
        raise SystemExit(f"check-install: failed (exit {status}): {' '.join(cmd)}")
    return out


def versions(python: str, names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``names`` in the environment of ``python``."""
    out = subprocess.run(
        [python, "-c", VERSIONS, *names], check=True, capture_output=True, text=True
    )
    found: dict[str, str] = json.loads(out.stdout)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("repo", type=Path, help="the cdcflow repository")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the venv")
    parser.add_argument("--pyspark", help="PySpark already installed")
    parser.add_argument("--pyarrow", help="pyarrow already installed")
    parser.add_argument("--fresh", action="store_true", help="into an empty venv, with the demo")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if not args.fresh and not (args.pyspark and args.pyarrow):
        parser.error("--pyspark and --pyarrow are needed, unless --fresh")

    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="cdcflow-check-install-"))
    log: list[str] = []
    try:
        repo = root / "cdcflow"
        repo.mkdir()
        for name in SOURCES:
            src = args.repo / name
            if src.is_dir():
                shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, repo / name)
        venv = root / "venv"
        run([args.python, "-m", "venv", str(venv)], log)
        py = str(venv / "bin" / "python")
        pip = [py, "-m", "pip", "--disable-pip-version-check", "install"]
        if args.fresh:
            return fresh(repo, venv, root, log, started)
        numpy = ["numpy<2"] if args.pyspark.startswith("3.") else []
        run([*pip, f"pyspark=={args.pyspark}", f"pyarrow=={args.pyarrow}", *numpy], log)
        before = versions(py, KEPT)
        log.clear()  # only what installing cdcflow prints is judged
        run([*pip, str(repo)], log)
        run([*pip, f"{repo}[spark]"], log)
        after = versions(py, KEPT)
        run([py, "-c", SMOKE], log)

        problems: list[str] = []
        for name in KEPT:
            if before[name] != after[name]:
                problems.append(f"{name} changed: {before[name]} -> {after[name]}")
            if re.search(rf"^\s*(Uninstalling|Attempting uninstall:) {name}\b", "".join(log), re.M):
                problems.append(f"pip uninstalled {name}")
        elapsed = time.monotonic() - started
        if problems:
            print("check-install: FAILED: " + "; ".join(problems), file=sys.stderr)
            return 1
        kept = ", ".join(f"{n} {after[n]}" for n in KEPT)
        print(f"check-install: ok: {kept} kept; took {elapsed:.0f}s")
        return 0
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def fresh(repo: Path, venv: Path, root: Path, log: list[str], started: float) -> int:
    """``--fresh``: cdcflow with the spark extra into the empty ``venv``, its jars into an
    empty cache, and the demo."""
    py = str(venv / "bin" / "python")
    cdcflow = str(venv / "bin" / "cdcflow")
    run([py, "-m", "pip", "--disable-pip-version-check", "install", f"{repo}[spark]"], log)
    got = versions(py, ("pyspark", "pyarrow", "numpy", "pandas"))
    os.environ["CDCFLOW_JAR_CACHE"] = str(root / "jars")
    status, _ = run_allowed([cdcflow, "jars", "--fetch"], log)
    if status not in (0, 2):  # 2: a set of jars could not be resolved, the others are cached
        raise SystemExit(f"check-fresh: failed: cdcflow jars --fetch (exit {status})")
    # what each kind of pipeline loads is cached now (exit 0), or not (1): the ones without
    # Kafka must be
    configs = {name: root / f"{name}.yaml" for name in PIPELINES}
    for name, text in PIPELINES.items():
        configs[name].write_text(text)
    cached = {
        name: run_allowed([cdcflow, "jars", str(path)], log)[0] for name, path in configs.items()
    }
    missing = sorted(name for name, code in cached.items() if code != 0 and name != "kafka")
    if missing:
        raise SystemExit(f"check-fresh: failed: the jars of {', '.join(missing)} pipelines")
    run([cdcflow, "demo", "--dir", str(root / "demo")], log)
    stack = ", ".join(f"{n} {v}" for n, v in got.items())
    kafka = "resolved" if cached["kafka"] == 0 else "not resolved (Kafka pipelines stop, naming it)"
    print(f"check-fresh: ok: {stack}; the demo passed; Spark's Kafka connector {kafka}; took "
          f"{time.monotonic() - started:.0f}s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
