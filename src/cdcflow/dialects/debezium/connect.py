"""Kafka Connect schemas as Debezium writes them: the canonical type of each field (Connect
types, Debezium's semantic names, the Avro converter's ``connect.*`` properties) and the
value each encoding stands for (unscaled decimals, epoch days and ticks, PostgreSQL's
infinities, MongoDB Extended JSON). Vendor type names are :mod:`cdcflow.types.vendors`."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.common import epoch_instant
from cdcflow.types import MAX_PRECISION, ValueTypeError, decimal_type, json_bytes, source_type


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty list (a field of the wrong shape reads
    as absent)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def json_text(value: Any) -> str:
    """A JSON value written as JSON text."""
    return json_bytes(value).decode()


DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
#: Connect semantic type name → canonical type (``None``: decided by the field's parameters).
SEMANTIC: dict[str, str | None] = {
    DECIMAL: None,
    VARIABLE_DECIMAL: "decimal(38,18)",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Time": "time",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.NanoTime": "time",
    "io.debezium.time.ZonedTime": "string",
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
    "io.debezium.time.Timestamp": "timestamp_ntz",
    "io.debezium.time.MicroTimestamp": "timestamp_ntz",
    "io.debezium.time.NanoTimestamp": "timestamp_ntz",
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.IsoTimestamp": "timestamp",
    "io.debezium.time.Year": "int",
    "io.debezium.time.MicroDuration": "bigint",
    "io.debezium.time.Interval": "string",
    "io.debezium.data.Json": "json",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Bits": "binary",
    "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string",
    "io.debezium.data.Xml": "string",
    "io.debezium.data.geometry.Geometry": "json",
    "io.debezium.data.geometry.Geography": "json",
    "io.debezium.data.geometry.Point": "json",
}
#: Epoch counts a declared column type may name by their unit (Spark's function names): an
#: integer since 1970-01-01 00:00 UTC read as a ``timestamp``.
EPOCH_UNITS: dict[str, int] = {
    "timestamp_seconds": 1,
    "timestamp_millis": 1000,
    "timestamp_micros": 1_000_000,
    "timestamp_nanos": 1_000_000_000,
}
#: Units per second of the integer time types.
_UNITS: dict[str, int] = {
    "org.apache.kafka.connect.data.Time": 1000,
    "io.debezium.time.Time": 1000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
    "org.apache.kafka.connect.data.Timestamp": 1000,
    "io.debezium.time.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
    **EPOCH_UNITS,
}
#: Semantic names by their lower-case form (declared types are compared in any case).
_SEMANTIC_NAMES: dict[str, str] = {n.lower(): n for n in SEMANTIC}
#: ``org.apache.kafka.connect.data.Decimal(p,s)``: a declared decimal with its parameters.
_DECLARED_DECIMAL = re.compile(
    r"^org\.apache\.kafka\.connect\.data\.decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$"
)
_CONNECT: dict[str, str] = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "bigint",
    "float": "float",
    "double": "double",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
#: PostgreSQL's ``time`` ``24:00:00``, in microseconds.
_END_OF_DAY = 86_400_000_000
#: PostgreSQL's ``infinity`` and ``-infinity`` as the PostgreSQL connector writes them (the
#: JDBC driver's constants: microseconds of a timestamp, days of a date, a timestamptz's text)
#: → the last and first instants a replica holds, as Spark's own PostgreSQL reader gives them.
_PG_INFINITE_MICROS: dict[int, int] = {9223372036825200000: 1, -9223372036832400000: -1}
_PG_INFINITE_DAYS: dict[int, int] = {-2147472692: 1, -2147472691: -1}
_PG_INFINITE_TEXT: dict[str, int] = {"infinity": 1, "-infinity": -1}
_INFINITE: dict[int, dt.datetime] = {
    1: dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    -1: dt.datetime(1, 1, 1),
}
#: A field's type info: (canonical type, semantic name, Connect type).
Field = tuple[str, str, str]


def connect_field(f: Mapping[str, Any]) -> Field:
    """A Connect schema field → (canonical type, semantic name, Connect type)."""
    name, ctype = str(f.get("name") or ""), str(f.get("type") or "")
    found = f.get("parameters")
    params: Mapping[str, Any] = found if isinstance(found, dict) else {}
    native = str(params.get("__debezium.source.column.type", "")).upper().split(" ")[0]
    if name == DECIMAL or (
        ctype == "string" and not name and native in ("DECIMAL", "NUMERIC", "FIXED")
    ):
        p = params.get("connect.decimal.precision", params.get("__debezium.source.column.length"))
        s = params.get("scale", params.get("__debezium.source.column.scale", 0))
        try:
            return decimal_type(min(int(p or 38), 38), int(s or 0)), name, ctype
        except (TypeError, ValueError):  # a parameter that is not a number
            return "decimal(38,18)", name, ctype
    found = SEMANTIC.get(name)
    if found is not None:
        return found, name, ctype
    items = f.get("items")
    if ctype == "array" and isinstance(items, dict):
        inner, inner_name, inner_ctype = connect_field(items)
        return f"array<{inner}>", inner_name, f"array:{inner_ctype}"
    return _CONNECT.get(ctype, "json"), name, ctype


def declared_field(native: str) -> Field | None:
    """The Connect field a declared column type names, for values sent without a schema (the
    JSON converter's ``schemas.enable=false``): a Debezium or Kafka Connect semantic type
    (``io.debezium.time.MicroTimestamp``; ``org.apache.kafka.connect.data.Decimal(p,s)`` with
    the precision and scale its schema would carry), or an epoch count by its unit
    (``timestamp_micros``). ``None`` for any other name; ``ValueTypeError`` for a Connect
    decimal without its precision and scale, or with ones no decimal has."""
    low = " ".join(native.lower().split())
    name = _SEMANTIC_NAMES.get(low)
    if name == DECIMAL:
        raise ValueTypeError(
            f"{native!r} without its precision and scale: declare those its schema would "
            f"carry, e.g. {DECIMAL}(10,2) (the unscaled bytes do not say where the point is)"
        )
    if name is not None:
        canonical = SEMANTIC[name]
        assert canonical is not None
        return canonical, name, "struct" if name == VARIABLE_DECIMAL else ""
    m = _DECLARED_DECIMAL.match(low)
    if m is not None:
        p, s = int(m.group(1)), int(m.group(2))
        if not 1 <= p <= MAX_PRECISION or s > p:
            raise ValueTypeError(
                f"{native!r}: a decimal's precision is 1 to {MAX_PRECISION} and its scale at "
                "most its precision"
            )
        return decimal_type(p, s), DECIMAL, "bytes"
    if low in EPOCH_UNITS:
        return "timestamp", low, "int64"
    return None


#: What a column sent without a schema is declared as, for messages.
DECLARE = (
    "values Debezium's JSON converter sends without schemas are declared by their semantic "
    "type (io.debezium.time.MicroTimestamp, io.debezium.time.Date, io.debezium.time.MicroTime, "
    "io.debezium.time.ZonedTimestamp, org.apache.kafka.connect.data.Decimal(10,2), "
    "io.debezium.data.VariableScaleDecimal, …) or an epoch count by its unit "
    "(timestamp_millis, timestamp_micros, timestamp_nanos, timestamp_seconds)"
)


def declared_canonical(source: str, native: str) -> str:
    """The canonical type of a declared column type: a semantic type or epoch unit's, else
    the source database's."""
    field = declared_field(native)
    return field[0] if field is not None else source_type(source, native)


def schemaless_hint(t: str, value: Any) -> str:
    """What to declare for a value that a plain declared type cannot read, as words to add to
    the ``BAD_VALUE`` (``""`` when the value is not one of Debezium's encodings)."""
    number = type(value) is int
    if t in ("timestamp", "timestamp_ntz") and number:
        return (
            "; a number's unit is never guessed: declare its Debezium type "
            "(io.debezium.time.MicroTimestamp, io.debezium.time.Timestamp, "
            "io.debezium.time.NanoTimestamp) or its epoch unit (timestamp_micros, …)"
        )
    if t == "date" and number:
        return "; days since 1970-01-01 are declared io.debezium.time.Date"
    if t == "time" and number:
        return "; declare its Debezium type (io.debezium.time.MicroTime, io.debezium.time.Time)"
    if t.startswith("decimal") and isinstance(value, str):
        return f"; a decimal sent as base64 is declared {DECIMAL}(p,s)"
    if t.startswith("decimal") and isinstance(value, dict):
        return f"; declare {VARIABLE_DECIMAL}"
    return ""


def declared_fields(declared: Mapping[str, str]) -> dict[str, Field]:
    """How a table's values sent without a schema are encoded, by column: the Connect fields
    its declared types name (:func:`declared_field`); a type no field is made of is left to
    the type tables (``BAD_TYPE``)."""
    out: dict[str, Field] = {}
    for col, native in declared.items():
        try:
            field = declared_field(native)
        except ValueTypeError:
            continue
        if field is not None:
            out[col] = field
    return out


def schema_fields(schema: Any) -> dict[str, Field]:
    """Row columns of a value (``before``/``after``) or key schema, with their types."""
    if not isinstance(schema, dict):
        return {}
    fields = [f for f in as_list(schema.get("fields")) if isinstance(f, dict)]
    rows = [f for f in fields if f.get("field") in ("after", "before")]
    if rows:
        fields = [c for r in rows for c in as_list(r.get("fields")) if isinstance(c, dict)]
    return {str(c["field"]): connect_field(c) for c in fields if isinstance(c.get("field"), str)}


_AVRO_CONNECT: dict[str, str] = {"int": "int32", "long": "int64", "float": "float32"}


def avro_fields(schema: Any) -> dict[str, Field]:
    """Row columns of an Avro converter's value schema: the Connect field each Avro field
    stands for (``connect.name``, ``connect.parameters``)."""
    if not isinstance(schema, dict):
        return {}
    columns: list[dict[str, Any]] = []
    for f in as_list(schema.get("fields")):
        if not isinstance(f, dict) or f.get("name") not in ("after", "before"):
            continue
        branches = f.get("type")
        for b in branches if isinstance(branches, list) else [branches]:
            if isinstance(b, dict):
                columns.extend(c for c in as_list(b.get("fields")) if isinstance(c, dict))
    out: dict[str, Field] = {}
    for c in columns:
        t = c.get("type")
        t = next((b for b in t if b != "null"), None) if isinstance(t, list) else t
        t = t if isinstance(t, dict) else {"type": t}
        avro_type = str(t.get("type"))
        connect = {
            "type": _AVRO_CONNECT.get(avro_type, "float64" if avro_type == "double" else avro_type),
            "name": t.get("connect.name"),
            "parameters": t.get("connect.parameters"),
        }
        out.setdefault(str(c.get("name")), connect_field(connect))
    return out


def ejson(value: Any) -> Any:
    """MongoDB Extended JSON → plain values (``$oid`` → hex text, ``$numberLong`` → int,
    ``$date`` → UTC instant, ``$numberDecimal`` → Decimal)."""
    if isinstance(value, list):
        return [ejson(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((k, v),) = value.items()
        if k == "$oid":
            return str(v)
        try:
            if k in ("$numberLong", "$numberInt"):
                return int(v)
            if k in ("$numberDecimal", "$numberDouble"):
                return Decimal(str(v))
        except (TypeError, ValueError, InvalidOperation):
            raise Dialect.fail("BAD_IMAGE", f"{k} is not a number: {str(v)[:40]!r}") from None
        if k == "$date":
            v = ejson(v)
            if isinstance(v, int):
                return epoch_instant(v, "ms", "$date", "BAD_IMAGE")
            return v
    return {k: ejson(v) for k, v in value.items()}


def _unscaled(raw: bytes, scale: int) -> Decimal:
    """A decimal from its two's-complement unscaled bytes, every digit kept (arithmetic in
    the default context would round it to 28 digits)."""
    return Decimal(f"{int.from_bytes(raw, 'big', signed=True)}E{-scale}")


def _base64(text: str) -> bytes:
    """A Connect decimal's unscaled bytes from their base64 text (never a lenient reading:
    ``12.50`` is not base64 of anything)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            f"expected the base64 text of a decimal's unscaled bytes, got {text[:40]!r}"
        ) from None


def connect_value(value: Any, field: Field | None, t: str) -> Any:
    """A Connect-encoded value → the value of canonical type ``t``."""
    if value is None or field is None:
        return value
    _, name, ctype = field
    if t.startswith("decimal") and isinstance(value, str) and ctype == "bytes":
        return _unscaled(_base64(value), int(t.split(",")[1][:-1]))
    if name == VARIABLE_DECIMAL and isinstance(value, dict):
        raw = value.get("value", b"")
        raw = raw if isinstance(raw, bytes) else _base64(str(raw))
        scale = value.get("scale", 0)
        if isinstance(scale, dict | list | bool) or scale is None:
            raise ValueError(f"a variable-scale decimal's scale must be a number, got {scale!r}")
        return _unscaled(raw, int(scale))
    if ctype.startswith("array:") and isinstance(value, list) and t.startswith("array<"):
        inner = (t[6:-1], name, ctype[6:])
        return [connect_value(v, inner, inner[0]) for v in value]
    if t == "date" and isinstance(value, int):
        if value in _PG_INFINITE_DAYS:
            return _INFINITE[_PG_INFINITE_DAYS[value]].date()
        return _EPOCH_DAY + dt.timedelta(days=value)
    if name in _UNITS and isinstance(value, int):
        unit = _UNITS[name]
        micros = value * 1_000_000 // unit
        if t == "time":
            if micros == _END_OF_DAY:
                return "24:00:00"
            return (_EPOCH + dt.timedelta(microseconds=micros)).time().isoformat()
        sign = _PG_INFINITE_MICROS.get(micros)
        instant = _INFINITE[sign] if sign else _EPOCH + dt.timedelta(microseconds=micros)
        return instant.replace(tzinfo=dt.UTC) if t == "timestamp" else instant
    if t == "timestamp" and isinstance(value, str) and value in _PG_INFINITE_TEXT:
        return _INFINITE[_PG_INFINITE_TEXT[value]].replace(tzinfo=dt.UTC)
    if t == "json" and isinstance(value, dict):
        return json_text(value)
    return value
