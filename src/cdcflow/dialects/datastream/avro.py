"""Datastream's Avro files: the canonical type of each payload column (Datastream's own logical
types and named records) and how its decoded value becomes a canonical one."""

from __future__ import annotations

from typing import Any

from cdcflow.transports.avro import canonical_type, record_fields
from cdcflow.types import DEFAULT_DECIMAL, json_bytes


def field_level_millis(schema: Any) -> set[str]:
    """Envelope fields whose ``logicalType`` sits on the field instead of the type (early
    Datastream files): their longs are epoch milliseconds."""
    out: set[str] = set()
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and str(f.get("logicalType", "")).startswith("timestamp-"):
            out.add(str(f.get("name")))
    return out


#: How to turn a decoded Avro value of a column into a canonical value.
Norm = str  # "plain" | "varchar" | "tz" | "interval" | "array"


def _vendor(t: Any) -> tuple[str, Norm] | None:
    """Datastream's own Avro types: its logical types and named records."""
    if t == "varchar":
        # a named type reused by name (early files)
        return "string", "varchar"
    if not isinstance(t, dict):
        return None
    logical = t.get("logicalType")
    if logical == "time-interval-micros":
        return "string", "interval"
    if logical == "json":
        return "json", "plain"
    if logical == "number":
        return DEFAULT_DECIMAL, "plain"
    if t.get("type") == "record":
        name = str(t.get("name", ""))
        fields = {f.get("name") for f in t.get("fields", []) if isinstance(f, dict)}
        if name == "varchar" or fields == {"value", "length"}:
            return "string", "varchar"
        if name == "timestampTz" or fields == {"timestamp", "offset"}:
            return "timestamp", "tz"
        if name.startswith("multidimensionalArray") or "nestedArray" in fields:
            return "json", "array"
    return None


def _vendor_type(t: Any) -> str | None:
    found = _vendor(t)
    return None if found is None else found[0]


def _normaliser(t: Any, named: dict[str, Any]) -> Norm:
    if isinstance(t, list):
        branches = [x for x in t if x != "null"]
        return _normaliser(branches[0], named) if len(branches) == 1 else "plain"
    found = _vendor(t)
    if found is not None:
        return found[1]
    if isinstance(t, str) and t in named:
        return _normaliser(named[t], named)
    if isinstance(t, dict) and isinstance(t.get("type"), str | list | dict):
        if t.get("type") not in ("record", "array", "map", "enum", "fixed"):
            return _normaliser(t["type"], named)
    return "plain"


def avro_columns(schema: Any) -> dict[str, tuple[str, Norm]]:
    """Payload column → (canonical type, normaliser) from the header schema."""
    out: dict[str, tuple[str, Norm]] = {}
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and f.get("name") == "payload":
            named: dict[str, Any] = {}
            for col in record_fields(f.get("type")):
                t = canonical_type(col["type"], named, _vendor_type)
                out[col["name"]] = (t, _normaliser(col["type"], named))
    return out


def avro_column_type(t: Any) -> tuple[str, Norm]:
    """A payload column's (canonical type, normaliser) for Avro type ``t``."""
    named: dict[str, Any] = {}
    return canonical_type(t, named, _vendor_type), _normaliser(t, named)


def normalise(value: Any, how: Norm) -> Any:
    if value is None:
        return None
    if how == "varchar" and isinstance(value, dict):
        return value.get("value")
    if how == "tz" and isinstance(value, dict):
        return value.get("timestamp")
    if how == "interval" and isinstance(value, int):
        sign = "-" if value < 0 else ""
        secs, micros = divmod(abs(value), 1_000_000)
        h, rest = divmod(secs, 3600)
        m, s = divmod(rest, 60)
        return f"{sign}{h:02d}:{m:02d}:{s:02d}" + (f".{micros:06d}" if micros else "")
    if how == "array":
        return json_bytes(_nested(value)).decode()
    if isinstance(value, dict | list):
        return json_bytes(value).decode()
    return value


def _nested(value: Any) -> Any:
    """A ``multidimensionalArray_*`` record ``{nestedArray, elementValue}`` as nested lists."""
    if isinstance(value, dict):
        if value.get("nestedArray") is not None:
            return [_nested(v) for v in value["nestedArray"]]
        return value.get("elementValue")
    return value
