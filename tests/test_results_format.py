"""How the read commands print: lags as durations, counts with separators, aligned columns,
JSON lines."""

from __future__ import annotations

import pytest

from cdcflow.cli.results import duration, emit


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (114_220_245.3, "1321d 23:50:45"),  # what used to print as 1.142202453E8
        (245, "00:04:05"),
        (-3725, "-01:02:05"),
        (None, ""),
    ],
)
def test_lags_print_as_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_tables_align_and_separate_thousands(capsys: pytest.CaptureFixture[str]) -> None:
    emit(["scope", "lag", "events"], [("t", duration(114_220_245.3), 1_234_567)], "table")
    assert capsys.readouterr().out.splitlines() == [
        "scope  lag                events",
        "t      1321d 23:50:45  1,234,567",
    ]


def test_json_output_is_one_compact_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    emit(["scope", "events"], [("t", 12), ("u", 3)], "json")
    assert capsys.readouterr().out.splitlines() == [
        '{"scope":"t","events":12}',
        '{"scope":"u","events":3}',
    ]
