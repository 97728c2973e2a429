"""What a Datastream event's ``source_metadata`` says, per source: the source engine (from
``read_method``, else the metadata's shape), where the change happened, its native position,
its ``sort_keys`` as sequence elements, and the instants Datastream writes."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cdcflow import positions
from cdcflow.dialects.common import epoch_instant
from cdcflow.types import json_bytes, parse_timestamp

#: ``read_method`` prefix → source engine.
READ_METHOD_SOURCES: tuple[tuple[str, str], ...] = (
    ("mysql", "mysql"),
    ("oracle", "oracle"),
    ("postgres", "postgres"),
    ("sqlserver", "sqlserver"),
    ("salesforce", "salesforce"),
    ("mongodb", "mongodb"),
    ("mongo", "mongodb"),
    ("spanner", "spanner"),
)

#: ``source_metadata`` fields kept in ``position`` (the native position and sort order).
POSITION_FIELDS: tuple[str, ...] = (
    "log_file",
    "log_position",
    "scn",
    "rs_id",
    "ssn",
    "lsn",
    "physical_location",
    "commit_timestamp",
    "record_sequence",
    "mod_index",
)

#: Source → the ``source_metadata`` field each element of its native position comes from.
NATIVE_FIELDS: dict[str, tuple[str, ...]] = {
    "mysql": ("log_file", "log_position"),
    "oracle": ("scn", "rs_id", "rs_id", "rs_id", "ssn"),
    "postgres": ("lsn",),
    "sqlserver": ("lsn",),
    "spanner": ("commit_timestamp", "record_sequence", "mod_index"),
}
#: Text of digits only (epoch counts, record sequences written as text).
DIGITS = re.compile(r"^\s*\d+\s*$")


def source_of(read_method: str, meta: Mapping[str, Any]) -> str | None:
    """The source engine, from ``read_method`` (``mysql-cdc-binlog``, ``oracle-backfill``,
    ``postgresql-cdc``...), else from the shape of ``source_metadata``."""
    low = read_method.lower()
    for prefix, source in READ_METHOD_SOURCES:
        if low.startswith(prefix):
            return source
    if "commit_timestamp" in meta or "mod_index" in meta or "record_sequence" in meta:
        return "spanner"
    if "collection" in meta:
        return "mongodb"
    if "object_name" in meta or "domain" in meta:
        return "salesforce"
    if "scn" in meta or "rs_id" in meta or "row_id" in meta:
        return "oracle"
    if "log_position" in meta or "log_file" in meta:
        return "mysql"
    if "physical_location" in meta or "replication_index" in meta:
        return "sqlserver"
    lsn = meta.get("lsn")
    if isinstance(lsn, str):
        return "postgres" if "/" in lsn else "sqlserver"
    return None


def is_backfill(read_method: str, meta: Mapping[str, Any]) -> bool:
    """Whether the event is a backfill (snapshot) read rather than a streamed change."""
    low = read_method.lower()
    return "backfill" in low or "dump" in low or meta.get("snapshot") is True


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def where_of(
    source: str | None, meta: Mapping[str, Any], doc: Mapping[str, Any]
) -> tuple[str | None, str | None, str | None]:
    """(database, schema, table) of a change, where the source's metadata names them (else
    the event's ``object``)."""
    if source == "salesforce":
        return (
            _text(meta.get("domain")),
            None,
            _text(meta.get("object_name")) or _text(doc.get("object")),
        )
    if source == "mongodb":
        return (
            _text(meta.get("database")),
            None,
            _text(meta.get("collection")) or _text(doc.get("object")),
        )
    if source == "spanner":
        database = _text(meta.get("database_id")) or _text(meta.get("database"))
        return (
            database,
            _text(meta.get("schema")),
            _text(meta.get("table")) or _text(doc.get("object")),
        )
    table = _text(meta.get("table")) or _text(doc.get("object"))
    return _text(meta.get("database")), _text(meta.get("schema")), table


def native_position(source: str | None, meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The source's own position as a tuple of numbers (``None`` when the row has none)."""
    if source == "mysql":
        file, pos = meta.get("log_file"), meta.get("log_position")
        if isinstance(file, str) and file and pos is not None:
            return positions.mysql_binlog(file, pos)
        return None
    if source == "oracle":
        scn = meta.get("scn")
        if scn is None or scn == "":
            return None
        ssn = meta.get("ssn")
        return (
            positions.oracle_scn(scn),
            *positions.oracle_rs_id(meta.get("rs_id")),
            int(ssn) if ssn not in (None, "") else 0,
        )
    if source in ("postgres", "sqlserver"):
        lsn = meta.get("lsn")
        if not isinstance(lsn, str) or not lsn.strip():
            return None
        return (positions.pg_lsn(lsn) if source == "postgres" else positions.mssql_lsn(lsn),)
    if source == "spanner":
        commit = meta.get("commit_timestamp")
        if not isinstance(commit, str) or not commit:
            return None
        record = meta.get("record_sequence")
        rs: int | str = 0
        if isinstance(record, int) and not isinstance(record, bool):
            rs = record
        elif isinstance(record, str):
            rs = int(record) if DIGITS.match(record) else record
        mod = meta.get("mod_index", 0)
        if isinstance(mod, bool) or not isinstance(mod, int | str) or not DIGITS.match(str(mod)):
            raise ValueError(f"mod_index must be an integer, got {mod!r}")
        return positions.timestamp_nanos(commit), rs, int(mod)
    return None


def sort_element(v: Any) -> int | str | None:
    """One ``sort_keys`` element as a sequence element: numbers compare as numbers, text as
    text."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float | Decimal):
        if not math.isfinite(v):
            raise ValueError(f"sort key {v!r} is not a finite number")
        if isinstance(v, float) and v.is_integer() and abs(v) >= 2**53:
            # JSON read without exact numbers makes an integer past 64 bits a float
            raise ValueError(f"sort key {v!r} is not an exact integer")
        if v == int(v):
            return int(v)
    if isinstance(v, dt.datetime):
        return epoch_micros(v)
    return json_bytes(v).decode()


def sequence_shape(elements: list[int | str | None]) -> str:
    """The kinds of ``sort_keys`` elements (``n`` number, ``s`` text, ``*`` null): the engine
    dead-letters events of a table whose shape differs from the table's
    (``SEQUENCE_SHAPE_MISMATCH``), since their sequences would not compare."""
    return ",".join("*" if e is None else "n" if isinstance(e, int) else "s" for e in elements)


def instant(value: Any) -> dt.datetime:
    """``source_timestamp``: ISO text (``T`` or space, zone optional → UTC), an Avro
    ``timestamp-millis`` value, or epoch milliseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return epoch_instant(value, "ms", "epoch time")
    return parse_timestamp(value)


def epoch_micros(ts: dt.datetime) -> int:
    """Microseconds since the epoch of a UTC instant, exactly."""
    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
