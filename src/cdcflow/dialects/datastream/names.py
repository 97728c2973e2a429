"""Datastream Cloud Storage object names and folders (``{object}/yyyy/mm/dd/hh/mm/file``)."""

from __future__ import annotations

import re
from typing import Any

_DATE_PARTS = (re.compile(r"^\d{4}$"),) + (re.compile(r"^\d{2}$"),) * 4
_OBJECT_NAME = re.compile(
    r"^(?P<hash>[0-9a-fA-F]{40})_(?P<read_method>[A-Za-z0-9-]+)_(?P<a>\d+)_(?P<b>\d+)_(?P<c>\d+)"
    r"(?:\.[A-Za-z0-9.]+)?$"
)


def parse_object_name(name: str) -> dict[str, Any] | None:
    """A Datastream Cloud Storage object's base name, ``<40-hex hash>_<read_method>_<n>_<n>_<n>``
    (with or without extension), as its parts; ``None`` for other names."""
    m = _OBJECT_NAME.match(re.split(r"[\\/]", name)[-1])
    if not m:
        return None
    return {
        "hash": m.group("hash"),
        "read_method": m.group("read_method"),
        "numbers": [int(m.group("a")), int(m.group("b")), int(m.group("c"))],
    }


def folder_check(
    origin: str | None,
    obj: Any,
    database: str | None,
    schema: str | None,
    table: str,
    metadata: dict[str, Any],
) -> None:
    """Record the Cloud Storage object folder (``{object}/yyyy/mm/dd/hh/minute/file``) and note
    when it names another table."""
    if not origin:
        return
    named = parse_object_name(origin)
    if named is not None:
        metadata["file_read_method"] = named["read_method"]
    parts = re.split(r"[\\/]", origin)
    if len(parts) < 7:
        return
    dates = parts[-6:-1]
    if not all(p.match(d) for p, d in zip(_DATE_PARTS, dates, strict=True)):
        return
    folder = parts[-7]
    metadata["folder_object"] = folder
    expected = {
        n.lower()
        for n in (
            obj if isinstance(obj, str) else None,
            table,
            f"{schema}_{table}" if schema else None,
            f"{database}_{table}" if database else None,
        )
        if n
    }
    if folder.lower() not in expected and not folder.lower().endswith("_" + table.lower()):
        metadata["folder_mismatch"] = (
            f"file is under object folder {folder!r} but the event is for "
            f"{obj if isinstance(obj, str) else table!r}"
        )


def stem(origin: str | None) -> str | None:
    if not origin:
        return None
    name = re.split(r"[\\/]", origin)[-1]
    return name.split(".", 1)[0] or None
