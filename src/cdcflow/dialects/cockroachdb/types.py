"""CockroachDB column types and values as changefeeds write them: Avro schemas (and Avro's JSON
encoding of unions and records), the enriched envelope's Kafka-Connect-style ``schema``, BIT
arrays, JSONB nulls. The vendor type table itself is :mod:`cdcflow.types.vendors.cockroachdb`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cdcflow.dialects.base import Dialect
from cdcflow.transports.avro import canonical_type, record_fields
from cdcflow.transports.json import kind
from cdcflow.types import decimal_type, json_bytes

#: Marker object of a JSONB ``null`` (not SQL NULL) in CockroachDB's JSON output.
JSON_NULL = "__crdb_json_null__"
_AVRO_BRANCHES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string", "array", "map"}
)
_BIT_DOC = re.compile(r"\b(?:VAR)?BIT\b", re.IGNORECASE)


def bits_from_avro(words: list[int]) -> str:
    """A BIT/VARBIT value encoded by CockroachDB's Avro changefeeds (first element: the number of
    bits used in the last word; then 64-bit words, big-endian) → the bit string."""
    if not words:
        return ""
    used, rest = int(words[0]), [int(w) & 0xFFFFFFFFFFFFFFFF for w in words[1:]]
    if not rest:
        return ""
    if not 0 <= used <= 64:
        raise ValueError(f"BIT array's first element must be 0..64, got {used}")
    text = "".join(format(w, "064b") for w in rest[:-1])
    return text + format(rest[-1], "064b")[:used]


def unwrap(value: Any) -> Any:
    """An Avro JSON-encoded union branch (``{"long": 1}``, ``{"string": "x"}``) → its value."""
    if isinstance(value, dict) and len(value) == 1:
        ((branch, inner),) = value.items()
        if branch in _AVRO_BRANCHES:
            if branch == "array" and isinstance(inner, list):
                return [unwrap(v) for v in inner]
            return inner
    return value


def avro_record_body(value: Any) -> Any:
    """``{"office_dogs": {"id": {"long": 1}}}`` (a record in Avro's JSON encoding, named after
    the table) → its fields; anything else as it is."""
    name = avro_record_name(value)
    if name is None:
        return value
    (inner,) = value.values()
    return {k: unwrap(v) for k, v in inner.items()}


def avro_record_name(value: Any) -> str | None:
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((name, inner),) = value.items()
    if not isinstance(inner, dict) or name in _AVRO_BRANCHES:
        return None
    if not inner or not all(
        v is None or (isinstance(v, dict) and len(v) == 1 and next(iter(v)) in _AVRO_BRANCHES)
        for v in inner.values()
    ):
        return None
    return _record_topic(name)


def _record_topic(name: str) -> str:
    """An Avro record name → topic: the namespace (``super.drivers``) dropped, ``_u002e_`` (an
    escaped dot, column families) restored."""
    return name.rsplit(".", 1)[-1].replace("_u002e_", ".")


def avro_schema_types(schema: Any) -> tuple[dict[str, str], frozenset[str]]:
    """Column types (and BIT columns) of a changefeed Avro schema: the row record under
    ``after``/``before`` (wrapped), or the top-level record (bare/row)."""
    types: dict[str, str] = {}
    bits: set[str] = set()
    if not isinstance(schema, dict):
        return types, frozenset()
    fields = [f for f in schema.get("fields", []) if isinstance(f, dict)]
    row_fields: list[dict[str, Any]] = []
    for f in fields:
        if f.get("name") in ("after", "before"):
            row_fields.extend(record_fields(f.get("type")))
    if not row_fields:
        row_fields = [
            f
            for f in fields
            if f.get("name") not in ("__crdb__", "updated", "resolved", "mvcc_timestamp")
        ]
    named: dict[str, Any] = {}
    for f in row_fields:
        name = str(f.get("name"))
        if name in types:
            continue
        if _BIT_DOC.search(str(f.get("doc", ""))):
            # BIT/VARBIT travel as arrays of 64-bit words
            bits.add(name)
            types[name] = "string"
            continue
        types[name] = canonical_type(f.get("type"), named)
    return types, frozenset(bits)


def enriched_schema_types(schema: Mapping[str, Any]) -> dict[str, str]:
    """Column types from an enriched message's Kafka-Connect-style ``schema`` section."""
    out: dict[str, str] = {}
    fields = schema.get("fields") if isinstance(schema, Mapping) else None
    if not isinstance(fields, list):
        raise Dialect.fail(
            "BAD_SCHEMA", f"the enriched 'schema' needs a list of 'fields', got {kind(fields)}"
        )
    for f in fields:
        if not isinstance(f, dict) or f.get("field") not in ("after", "before", "key"):
            continue
        columns = f.get("fields")
        for col in columns if isinstance(columns, list) else []:
            if isinstance(col, dict) and isinstance(col.get("field"), str):
                out.setdefault(col["field"], _connect_type(col))
    return out


_CONNECT_NAMED: dict[str, str] = {
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "date": "date",
    "time": "time",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
}
_CONNECT_TYPES: dict[str, str] = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
    "array": "json",
    "struct": "json",
    "map": "json",
}


def _connect_type(col: Mapping[str, Any]) -> str:
    name = str(col.get("name", "")).lower()
    if name == "decimal":
        params = col.get("parameters")
        params = params if isinstance(params, dict) else {}
        try:
            return decimal_type(int(params.get("precision", 38)), int(params.get("scale", 18)))
        except (TypeError, ValueError):
            return "decimal(38,18)"
    if name in _CONNECT_NAMED:
        return _CONNECT_NAMED[name]
    return _CONNECT_TYPES.get(str(col.get("type", "")).lower(), "string")


def to_json_text(value: Any) -> str:
    """A JSON value written as JSON text (JSONB null markers as ``null``)."""
    return json_bytes(_json_nulls(value)).decode()


def _json_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(JSON_NULL) is True and len(value) == 1:
            return None
        return {k: _json_nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_nulls(v) for v in value]
    return value
