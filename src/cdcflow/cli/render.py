"""How the read commands print a value of each Spark type: one rendering for JSON lines, one
for aligned tables. A column's type is given as its :class:`~cdcflow.observe.values.Shape`, the
same whether Spark or pyiceberg read it.

JSON (``--output json``): numbers and booleans as JSON numbers and booleans (NaN and infinities
as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), decimals exact as strings,
timestamps ISO-8601 in UTC with ``Z``, ``timestamp_ntz`` without a zone, dates ``YYYY-MM-DD``,
binary base64, structs and maps as objects (map keys as their text, entries in key order),
arrays as arrays — each recursively.

Tables: the same values as text, with thousands separators in integers, timestamps in UTC as
``YYYY-MM-DD HH:MM:SS[.ffffff]``, binary as its text with undecodable bytes escaped
(``\\xff``), nested values as compact JSON; control characters (``NUL``, escape sequences,
newlines) are escaped so a value never acts on the terminal.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import unicodedata
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from cdcflow.observe.values import ANY, ARRAY, MAP, STRUCT, WALL_CLOCK, Shape
from cdcflow.types import decimal_text

UTC = dt.UTC
#: Characters a terminal would act on or hide: control and format characters, line breaks.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _utc(value: dt.datetime) -> dt.datetime:
    """A ``timestamp`` value as PySpark returns it (a naive datetime in the local time zone
    of this process) as an aware UTC datetime."""
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(UTC)


def _instant(value: dt.datetime, sep: str, utc: bool, zone: str = "") -> str:
    """ISO-8601 text of a ``timestamp`` (``utc``: in UTC, followed by ``zone``) or of a
    ``timestamp_ntz`` (wall clock): microseconds always in JSON (``sep`` ``T``), in tables only
    when there are some."""
    if utc:
        value = _utc(value)
    spec = "microseconds" if value.microsecond or sep == "T" else "seconds"
    return value.replace(tzinfo=None).isoformat(sep=sep, timespec=spec) + zone


def json_value(value: Any, shape: Shape = ANY) -> Any:
    """The JSON value of a Spark value of a column of ``shape`` (:data:`ANY`: judged from the
    value, a naive datetime taken as a ``timestamp``)."""
    if value is None:
        return None
    kind = shape.kind
    if kind == STRUCT:
        return {name: json_value(value[i], inner) for i, (name, inner) in enumerate(shape.fields)}
    if kind == ARRAY:
        return [json_value(v, shape.element or ANY) for v in value]
    if kind == MAP:
        kt, vt = shape.key or ANY, shape.value or ANY
        return _entries((_key_text(k, kt), json_value(v, vt)) for k, v in value.items())
    if kind == WALL_CLOCK:
        return _instant(value, "T", utc=False)
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, int | str):
        return value
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dt.datetime):
        return _instant(value, "T", utc=True, zone="Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return _entries((_key_text(k, ANY), json_value(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def _entries(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A map's entries by key: their order in a map carries no meaning, and readers differ."""
    return dict(sorted(pairs, key=lambda kv: kv[0]))


def _key_text(key: Any, shape: Shape) -> str:
    found = json_value(key, shape)
    return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))


def json_line(columns: list[str], row: Any, shapes: list[Shape]) -> str:
    """One row as a compact JSON object (non-ASCII text kept as is)."""
    doc = {c: json_value(v, t) for c, v, t in zip(columns, row, shapes, strict=True)}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def printable(text: str) -> str:
    """``text`` with the characters a terminal would act on escaped (``\\x00``, ``\\n``,
    ``\\x1b``, ``\\u202e``...)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) in _ESCAPED_CATEGORIES:
            code = ord(ch)
            escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
            out.append(_NAMED_ESCAPES.get(ch, escape))
        else:
            out.append(ch)
    return "".join(out)


def text_value(value: Any, shape: Shape = ANY) -> str:
    """The text of a Spark value of a column of ``shape`` in a table cell (uncut)."""
    if value is None:
        return ""
    kind = shape.kind
    if kind in (STRUCT, ARRAY, MAP) or isinstance(value, dict | list):
        found = json_value(value, shape)
        text = json.dumps(found, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return printable(text)
    if kind == WALL_CLOCK:
        return _instant(value, " ", utc=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(json_value(value))
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dt.datetime):
        return _instant(value, " ", utc=True)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return printable(bytes(value).decode("utf-8", "backslashreplace"))
    return printable(str(value))
