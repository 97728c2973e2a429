"""Installs cdcflow into an existing PySpark environment and fails if pip replaces its pyspark
or pyarrow (``make check-install``).

A throwaway venv under a temporary folder gets a PySpark patch release (4.1 by default, or 3.5
with NumPy 1) and a pyarrow that differ from the constraints files (without pandas, as a bare
``pip install pyspark`` leaves it); then ``pip install <repo>`` and ``pip install
'<repo>[spark]'``, without the constraints, as a user would, and a smoke test that names the
jars cdcflow would load for that PySpark. The venv is removed afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
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
    "from cdcflow.serve.server import Metrics; "
    "from cdcflow.spark.session import SparkSettings, coordinates; "
    "print('imports ok; jars:', ','.join(coordinates(SparkSettings(), pyspark.__version__)))"
)


def run(cmd: list[str], log: list[str]) -> str:
    """Run ``cmd``, echo and keep its output; a failure stops the check."""
    print("$", " ".join(cmd), flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = done.stdout
    log.append(out)
    print(out, end="" if out.endswith("\n") or not out else "\n")
    print(f"  ({time.monotonic() - started:.1f}s)", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"check-install: failed (exit {done.returncode}): {' '.join(cmd)}")
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
    parser.add_argument("--pyspark", required=True, help="PySpark already installed")
    parser.add_argument("--pyarrow", required=True, help="pyarrow already installed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())
