"""Golden files: expected canonical events, regenerated with CDCFLOW_REGEN_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

GOLDEN_DIR = Path(__file__).parent / "golden"


def check_golden(dialect: str, name: str, lines: list[bytes]) -> None:
    """Compare decoded event lines with ``golden/<dialect>/<name>.jsonl`` field by field."""
    path = GOLDEN_DIR / dialect / f"{name}.jsonl"
    actual = [orjson.loads(line) for line in lines if line.strip()]
    if os.environ.get("CDCFLOW_REGEN_GOLDEN") == "1" or not path.exists():
        if os.environ.get("CI") and not path.exists():
            raise AssertionError(f"golden file missing: {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            b"".join(orjson.dumps(a, option=orjson.OPT_SORT_KEYS) + b"\n" for a in actual)
        )
    expected = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    problems = []
    if len(actual) != len(expected):
        problems.append(f"{len(actual)} events decoded, {len(expected)} expected")
    for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
        for field in sorted(set(a) | set(e)):
            if a.get(field) != e.get(field):
                problems.append(f"event {i} field {field!r}: {a.get(field)!r} != {e.get(field)!r}")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)
