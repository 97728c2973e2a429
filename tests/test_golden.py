"""Golden files are never written by a test run that compares: a missing one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import golden


def test_a_missing_golden_file_fails_and_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    monkeypatch.setattr(golden, "UPDATE", False)
    with pytest.raises(AssertionError, match=r"golden file missing: .*--update-goldens"):
        golden.check_golden("d", "new", [b'{"a": 1}\n'])
    assert not list(tmp_path.rglob("*"))


def test_update_goldens_writes_then_a_change_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    monkeypatch.setattr(golden, "UPDATE", True)
    golden.check_golden("d", "new", [b'{"a": 1}\n'])
    monkeypatch.setattr(golden, "UPDATE", False)
    golden.check_golden("d", "new", [b'{"a": 1}\n'])
    with pytest.raises(AssertionError, match="field 'a': 2 != 1"):
        golden.check_golden("d", "new", [b'{"a": 2}\n'])
