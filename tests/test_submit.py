"""What ``spark-submit`` needs from the package: the file it runs works from inside the package
folder, and cdcflow imports from a zip (``--py-files``), so every folder is a regular package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import cdcflow
import cdcflow.submit

pytestmark = pytest.mark.services

_PACKAGE = Path(cdcflow.__file__).parent


def test_the_submit_file_runs_the_command_line_when_run_as_a_file() -> None:
    # run as a file, its folder (with cdcflow's types package) would shadow the standard library
    proc = subprocess.run(
        [sys.executable, cdcflow.submit.__file__, "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: cdcflow [OPTIONS] COMMAND [ARGS]...")
    assert " run " in proc.stdout and " demo " in proc.stdout


def test_cdcflow_imports_from_a_zip(tmp_path: Path) -> None:
    archive = tmp_path / "cdcflow.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(_PACKAGE.rglob("*.py")):
            z.write(f, f.relative_to(_PACKAGE.parent).as_posix())
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); "
        "import cdcflow.cli.pipeline, cdcflow.pipeline.query, cdcflow.decode.spark; "
        "print(cdcflow.pipeline.query.__file__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(archive)), proc.stdout
