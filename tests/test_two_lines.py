"""The suite on two Spark lines in one CI run (``.ci/run``): each line proves its half of
every crash matrix, and two runs side by side install a server's programs and jars one after
the other."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdcflow.testing.services.base import CACHE_ENV, installing
from tests.crashing import POINTS_ENV, line_points

STEPS = ("versions@0", "merge@1", "tombstones@2", "dead_letters@3", "history@4")


def test_the_two_lines_prove_every_crash_point_once_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(POINTS_ENV, raising=False)
    four, three = line_points(STEPS, "4.1.1"), line_points(STEPS, "3.5.7")
    assert four == ["versions@0", "tombstones@2", "history@4"]
    assert three == ["merge@1", "dead_letters@3"]
    assert sorted(four + three) == sorted(STEPS)
    monkeypatch.setenv(POINTS_ENV, "all")
    assert line_points(STEPS, "3.5.7") == list(STEPS)


def test_a_second_run_waits_for_the_first_ones_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While this run holds the cache's install lock, another process's install waits; it
    goes on once the lock is released."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    code = (
        "from cdcflow.testing.services.base import installing\n"
        "with installing():\n"
        "    print('installing', flush=True)\n"
    )
    with installing():
        other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        time.sleep(2.0)
        assert other.poll() is None  # still waiting for the lock
    out, _ = other.communicate(timeout=60)
    assert other.returncode == 0 and out == "installing\n"
    assert (tmp_path / "install.lock").exists()
