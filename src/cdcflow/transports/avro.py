"""Avro transport: object-container files, schemaless records, Confluent framing, and the one
mapping of Avro schema types to canonical types.

Every reader turns fastavro's many exception types for corrupt input into ``CORRUPT_AVRO``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from cdcflow.errors import DecodeError
from cdcflow.transports.json import dumps
from cdcflow.transports.message import AvroSchema, AvroValue, Framed, RawMessage, Unreadable
from cdcflow.types import decimal_type

#: The first bytes of an Avro object-container file.
OCF_MAGIC = b"Obj\x01"
#: The first byte of a Confluent-framed message (then a 4-byte schema id).
CONFLUENT_MAGIC = b"\x00"

#: A vendor's own reading of an Avro type (its logical types, named records), else ``None``.
VendorTypes = Callable[[Any], str | None]


def corrupt(message: str) -> DecodeError:
    """``CORRUPT_AVRO`` naming what could not be read."""
    return DecodeError(message, code="CORRUPT_AVRO")


def open_container(data: bytes) -> tuple[Iterator[Any], AvroSchema]:
    """The record iterator and writer schema of an object-container file (``CORRUPT_AVRO``
    when the header cannot be read)."""
    import fastavro

    if not data.startswith(OCF_MAGIC):
        raise corrupt("not an Avro object-container file (no 'Obj\\x01' header)")
    try:
        reader = fastavro.reader(io.BytesIO(data))
        schema = reader.writer_schema
    except Exception as e:  # fastavro raises many types for corrupt input
        raise corrupt(f"unreadable Avro header: {type(e).__name__}: {e}") from None
    return iter(reader), AvroSchema(schema)


def message(record: Any, schema: AvroSchema, origin: str | None, number: int) -> RawMessage:
    """One record as a message (``offset`` and ``index`` = record number)."""
    return RawMessage(
        data=dumps(record),
        origin=origin,
        offset=number,
        index=number,
        form="avro",
        avro=AvroValue(record, schema),
    )


RecordReader = Callable[[Any, AvroSchema, str | None, int], RawMessage]


def read_records(
    records: Iterator[Any],
    schema: AvroSchema,
    data: bytes,
    origin: str | None,
    to_message: RecordReader = message,
) -> Iterator[Framed]:
    """Messages of an opened container; a damaged file keeps the records before the damage
    and ends with one ``CORRUPT_AVRO`` part."""
    n = 0
    try:
        for record in records:
            yield to_message(record, schema, origin, n)
            n += 1
    except Exception as e:  # fastavro raises many types for corrupt input
        yield Unreadable(
            "CORRUPT_AVRO",
            f"corrupt Avro file after {n} record(s): {type(e).__name__}: {e}",
            data,
            origin,
            offset=n,
        )


@lru_cache(maxsize=64)
def _parsed(schema_json: bytes) -> Any:
    import fastavro

    return fastavro.parse_schema(orjson.loads(schema_json))


def parse_schema(schema: Any) -> Any:
    """A schema (JSON form) parsed for fastavro, cached by its text."""
    return _parsed(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))


def read_schemaless(data: bytes, schema: Any) -> Any:
    """One schemaless record written with ``schema`` (JSON form); the whole body must be read,
    else it was written with another schema (``CORRUPT_AVRO``)."""
    import fastavro

    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, parse_schema(schema))
    except Exception as e:  # fastavro raises many types for corrupt input
        raise corrupt(
            f"not a schemaless Avro record of this schema: {type(e).__name__}: {e}"
        ) from None
    if buf.tell() != len(data):
        raise corrupt(
            f"schemaless Avro record ends at byte {buf.tell()} of {len(data)}: written with "
            "another schema"
        )
    return record


def is_confluent(body: bytes) -> bool:
    """Whether ``body`` starts like a Confluent-framed message (magic byte 0, schema id)."""
    return len(body) >= 5 and body[:1] == CONFLUENT_MAGIC


def read_confluent(body: bytes, schema_dir: str | None) -> AvroValue:
    """A Confluent-framed Avro message (magic byte 0, 4-byte schema id, schemaless record)
    decoded with the schema ``<id>.avsc`` or ``<id>.json`` of ``schema_dir``."""
    if not is_confluent(body):
        raise corrupt("not a Confluent-framed Avro message (magic byte 0, 4-byte schema id)")
    schema_id = int.from_bytes(body[1:5], "big")
    schema = AvroSchema(schema_file(schema_id, schema_dir), schema_id)
    import fastavro

    try:
        record = fastavro.schemaless_reader(io.BytesIO(body[5:]), parse_schema(schema.schema))
    except DecodeError:
        raise
    except Exception as e:  # fastavro raises many types for corrupt input
        raise corrupt(f"Avro message with schema {schema_id}: {type(e).__name__}: {e}") from None
    return AvroValue(record, schema)


def schema_file(schema_id: int, schema_dir: str | None) -> Any:
    """The schema registered as ``schema_id``: ``<schema_dir>/<id>.avsc`` or ``<id>.json``."""
    if not schema_dir:
        raise DecodeError(
            f"Avro schema id {schema_id}: no schema_dir is configured for this source",
            code="UNKNOWN_SCHEMA_ID",
            hint="set the source option schema_dir to a folder of <id>.avsc files",
        )
    for ext in (".avsc", ".json"):
        p = Path(str(schema_dir)) / f"{schema_id}{ext}"
        if p.exists():
            try:
                return orjson.loads(p.read_bytes())
            except orjson.JSONDecodeError as e:
                raise DecodeError(f"schema file {p} is not JSON: {e}", code="BAD_SCHEMA") from None
    raise DecodeError(
        f"Avro schema id {schema_id} is not in {schema_dir} (expected {schema_id}.avsc or "
        f"{schema_id}.json)",
        code="UNKNOWN_SCHEMA_ID",
    )


# ---------------------------------------------------------------- Avro types → canonical types

_PRIMITIVES: dict[str, str] = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
}
_LOGICAL: dict[str, str] = {
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "timestamp-nanos": "timestamp",
    "local-timestamp-millis": "timestamp_ntz",
    "local-timestamp-micros": "timestamp_ntz",
    "date": "date",
    "time-millis": "time",
    "time-micros": "time",
    "uuid": "uuid",
}


def canonical_type(
    t: Any, named: dict[str, Any] | None = None, vendor: VendorTypes | None = None
) -> str:
    """The canonical type of values written with Avro type ``t``.

    Logical types map to their canonical types (``decimal`` → decimal(p,s), ``timestamp-*`` →
    timestamp, ``local-timestamp-*`` → timestamp_ntz, ``date``, ``time-*``, ``uuid``); records,
    arrays and maps are JSON; enums text; fixed binary. A nullable union is its other branch; a
    wider union is the decimal branch when one is a decimal, else text when one is text, else
    JSON. ``named`` collects named types so later references resolve; ``vendor`` reads a
    producer's own logical types first.
    """
    named = {} if named is None else named
    if vendor is not None:
        found = vendor(t)
        if found is not None:
            return found
    if isinstance(t, list):
        branches = [x for x in t if x != "null"]
        if len(branches) == 1:
            return canonical_type(branches[0], named, vendor)
        decimals = [
            x for x in branches if isinstance(x, dict) and x.get("logicalType") == "decimal"
        ]
        if decimals:
            return canonical_type(decimals[0], named, vendor)
        return "string" if "string" in branches else "json"
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t in named:
            return canonical_type(named[t], named, vendor)
        return "string"
    if not isinstance(t, dict):
        return "string"
    if t.get("name") and t.get("type") in ("record", "enum", "fixed"):
        named.setdefault(str(t["name"]), t)
    logical = t.get("logicalType")
    if logical == "decimal":
        return decimal_type(int(t.get("precision", 38)), int(t.get("scale", 0)))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    base = t.get("type")
    if base in ("record", "array", "map"):
        return "json"
    if base == "enum":
        return "string"
    if base == "fixed":
        return "binary"
    if isinstance(base, str | list | dict):
        return canonical_type(base, named, vendor)
    return "string"


def record_fields(t: Any) -> list[dict[str, Any]]:
    """The fields of a record type (or of the record branch of a nullable union)."""
    for option in t if isinstance(t, list) else [t]:
        if isinstance(option, dict) and option.get("type") == "record":
            return [f for f in option.get("fields", []) if isinstance(f, dict)]
    return []
