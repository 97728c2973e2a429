"""CockroachDB object and topic names: cloud-storage sink file names (their HLC timestamps) and
changefeed topics (``db.schema.table.family``)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_NAME = re.compile(
    r"^(?P<ts>\d{33})-(?P<uniquer>[0-9a-fA-F]+)-(?P<node>\d+)-(?P<sink>\d+)-(?P<file>\d+)-"
    r"(?P<topic>.+)-(?P<schema>\d+)\.(?P<ext>ndjson|json|csv|avro|parquet)(?P<gz>\.gz)?$"
)
_RESOLVED_NAME = re.compile(r"^(?P<ts>\d{33})\.RESOLVED$")
_DATE_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HOUR_DIR = re.compile(r"^\d{2}$")


def name_timestamp(ts: str) -> tuple[int, int]:
    """A cloud-storage file name's 33-digit timestamp (``YYYYMMDDhhmmss`` + 9 digits of
    nanoseconds + 10 digits of logical clock) → HLC (wall nanoseconds, logical)."""
    if not re.fullmatch(r"\d{33}", ts):
        raise ValueError(f"not a 33-digit changefeed file timestamp: {ts!r}")
    try:
        base = dt.datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"not a valid changefeed file timestamp: {ts!r}") from None
    seconds = (base - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).days * 86_400 + (
        base.hour * 3600 + base.minute * 60 + base.second
    )
    return seconds * 1_000_000_000 + int(ts[14:23]), int(ts[23:])


def parse_object_name(path: str) -> dict[str, Any] | None:
    """A cloud-storage sink object path as its parts, or ``None`` when the base name is not a
    changefeed data or ``.RESOLVED`` file name.

    Data files: ``<timestamp>-<uniquer>-<node>-<sink id>-<file id>-<topic>-<schema id>.<ext>``
    (the topic may contain dots and dashes; the schema id is the last dash-number). Folders: an
    optional date folder (``2020-04-02``), an optional hour folder (``20``) after it, and any
    prefix before them (``/db/schema/`` as replicator's HTTP paths carry).
    """
    parts = [p for p in re.split(r"[\\/]", path) if p]
    if not parts:
        return None
    base, folders = parts[-1], parts[:-1]
    out: dict[str, Any] = {}
    m = _NAME.match(base)
    if m:
        out.update(
            resolved=False,
            topic=m.group("topic"),
            schema_id=int(m.group("schema")),
            uniquer=m.group("uniquer"),
            node=int(m.group("node")),
            sink=int(m.group("sink")),
            file_id=int(m.group("file")),
            ext=m.group("ext") + (m.group("gz") or ""),
        )
    else:
        m = _RESOLVED_NAME.match(base)
        if not m:
            return None
        out.update(resolved=True, topic=None, ext="RESOLVED")
    out["timestamp"] = m.group("ts")
    try:
        out["hlc"] = name_timestamp(m.group("ts"))
    except ValueError:
        return None
    date: str | None = None
    hour: str | None = None
    prefix = folders
    if folders and _HOUR_DIR.match(folders[-1]) and len(folders) > 1:
        if _DATE_DIR.match(folders[-2]):
            date, hour, prefix = folders[-2], folders[-1], folders[:-2]
    if date is None and folders and _DATE_DIR.match(folders[-1]):
        date, prefix = folders[-1], folders[:-1]
    out.update(date=date, hour=hour, prefix=prefix)
    return out


def split_topic(topic: str) -> tuple[str | None, str | None, str, str | None]:
    """A changefeed topic → (database, schema, table, column family): ``table``,
    ``table.family``, ``db.schema.table`` (``full_table_name``), ``db.schema.table.family``."""
    parts = topic.split(".")
    if len(parts) == 1:
        return None, None, topic, None
    if len(parts) == 2:
        return None, None, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], None
    return parts[0], parts[1], parts[2], ".".join(parts[3:])
