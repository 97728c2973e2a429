"""The suite on two Spark lines in one CI run (``.ci/run``): the lines divide the crash
matrices' points and the crash tests marked ``line`` between them, and two runs side by side
install a server's programs and jars one after the other."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cdcflow.testing.services.base import CACHE_ENV, installing
from tests.crashing import POINTS_ENV, line_points, spark_line

STEPS = ("versions@0", "merge@1", "tombstones@2", "dead_letters@3", "history@4")


def test_the_two_lines_prove_every_crash_point_once_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(POINTS_ENV, raising=False)
    four, three = line_points(STEPS, "4.1.1"), line_points(STEPS, "3.5.7")
    assert four == ["versions@0", "dead_letters@3"]
    assert three == ["merge@1", "tombstones@2", "history@4"]
    assert sorted(four + three) == sorted(STEPS)
    assert (spark_line("4.1.1"), spark_line("4.0.0"), spark_line("3.5.7")) == ("4", "4", "3.5")
    monkeypatch.setenv(POINTS_ENV, "all")
    assert line_points(STEPS, "3.5.7") == list(STEPS)


def test_a_crash_test_of_the_other_line_is_deselected_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suite's collection hook: a test marked for the other Spark line is deselected
    (reported to pytest as such), one for this line and an unmarked one stay; with
    ``CDCFLOW_CRASH_POINTS=all`` all stay."""
    from tests.conftest import pytest_collection_modifyitems

    other = "3.5" if spark_line() == "4" else "4"

    class Item:
        def __init__(self, line: str | None) -> None:
            self.mark = pytest.mark.line(line).mark if line else None
            self.fixturenames: tuple[str, ...] = ()

        def get_closest_marker(self, name: str) -> Any:
            return self.mark if name == "line" else None

        def add_marker(self, marker: Any) -> None:
            pass

    deselected: list[Any] = []
    config = SimpleNamespace(
        hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    )
    for env, kept in ((None, 2), ("all", 3)):
        if env is None:
            monkeypatch.delenv(POINTS_ENV, raising=False)
        else:
            monkeypatch.setenv(POINTS_ENV, env)
        here, there, unmarked = Item(spark_line()), Item(other), Item(None)
        items: list[Any] = [here, there, unmarked]
        deselected.clear()
        pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
        assert len(items) == kept and here in items and unmarked in items
        assert deselected == ([] if env else [there])


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
