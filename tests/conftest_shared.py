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


def conformance_samples() -> list[tuple[Path, str | None]]:
    """Every real sample under ../shared/conformance with the dialect that reads it (its
    folder; in ``other/`` the unified format's ``savegress_*``, else none), or skip saying
    what is missing."""
    root = shared_path("conformance")
    out: list[tuple[Path, str | None]] = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.parent == root:
            continue
        folder = p.parent.name
        if folder == "other":
            out.append((p, "savegress" if p.name.startswith("savegress_") else None))
        else:
            out.append((p, folder))
    return out
