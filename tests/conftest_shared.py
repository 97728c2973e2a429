"""Locating ../shared (specs and conformance samples), skipping clearly when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CDCFLOW_SHARED", _ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test saying what is missing."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(
            f"{p} is absent: the shared specs/conformance folder is not next to the "
            "project (set CDCFLOW_SHARED to its location)"
        )
    return p
