"""Golden files: expected canonical events, and the engine's SQL per plan shape. A missing
golden file fails its test; files are written only by ``pytest --update-goldens`` (then review
the diff before committing)."""

from __future__ import annotations

import difflib
from pathlib import Path

import orjson

GOLDEN_DIR = Path(__file__).parent / "golden"

#: Set by ``--update-goldens`` (tests/conftest.py): write what was decoded instead of comparing.
UPDATE = False


def check_golden(dialect: str, name: str, lines: list[bytes]) -> None:
    """Compare decoded event lines with ``golden/<dialect>/<name>.jsonl`` field by field."""
    path = GOLDEN_DIR / dialect / f"{name}.jsonl"
    actual = [orjson.loads(line) for line in lines if line.strip()]
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            b"".join(orjson.dumps(a, option=orjson.OPT_SORT_KEYS) + b"\n" for a in actual)
        )
    if not path.exists():
        raise AssertionError(
            f"golden file missing: {path}; write it with `pytest --update-goldens` and review it"
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


def check_golden_text(group: str, name: str, text: str, suffix: str = "sql") -> None:
    """Compare a text with ``golden/<group>/<name>.<suffix>`` line by line (trailing spaces
    aside); written only by ``pytest --update-goldens``."""
    path = GOLDEN_DIR / group / f"{name}.{suffix}"
    actual = [line.rstrip() for line in text.strip("\n").splitlines()]
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(actual) + "\n")
    if not path.exists():
        raise AssertionError(
            f"golden file missing: {path}; write it with `pytest --update-goldens` and review it"
        )
    expected = path.read_text().rstrip("\n").splitlines()
    if actual != expected:
        diff = difflib.unified_diff(expected, actual, str(path), "built", lineterm="", n=2)
        raise AssertionError(f"{path.name} differs from what was built:\n" + "\n".join(diff))
