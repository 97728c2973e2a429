"""The CES CloudEvent as it travels: structured JSON, binary content mode (attributes in
transport headers or properties, the body as ``data``), the spec's Avro records; and its
``data`` member, JSON text or Avro binary of the spec's Data record, read into one JSON-shaped
document the decoder reads the same whatever carried it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import orjson

from cdcflow.dialects.base import Dialect
from cdcflow.errors import DecodeError
from cdcflow.transports.avro import read_schemaless
from cdcflow.transports.json import header_map, kind

#: Prefixes of CloudEvent attributes carried as transport headers or properties (binary mode).
CE_PREFIXES = ("cloudEvents:", "cloudEvents_", "ce_", "ce-")


def _fields(*spec: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"name": n, "type": t} for n, t in spec]


def _texts_of(*names: str) -> list[dict[str, Any]]:
    return _fields(*((n, "string") for n in names))


#: The spec's Avro schema of a CES CloudEvent (``data`` as bytes).
CLOUDEVENT_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ChangeEvent",
    "fields": [
        *_texts_of("specversion", "type", "source", "id", "logicalid", "time"),
        *_texts_of("datacontenttype", "operation"),
        *_fields(("segmentindex", "int"), ("finalsegment", "boolean"), ("data", "bytes")),
    ],
}

#: The spec's Avro schema of ``data`` under Avro serialization (``old``/``current`` stay JSON
#: text).
DATA_AVRO_SCHEMA: dict[str, Any] = {
    "name": "Data",
    "type": "record",
    "fields": _fields(
        (
            "eventsource",
            {
                "name": "EventSource",
                "type": "record",
                "fields": [
                    *_texts_of("db", "schema", "tbl"),
                    *_fields(
                        (
                            "cols",
                            {
                                "type": "array",
                                "items": {
                                    "name": "Column",
                                    "type": "record",
                                    "fields": [
                                        *_texts_of("name", "type"),
                                        *_fields(("index", "int")),
                                    ],
                                },
                            },
                        ),
                        (
                            "pkkey",
                            {
                                "type": "array",
                                "items": {
                                    "name": "PkKey",
                                    "type": "record",
                                    "fields": _texts_of("columnname", "value"),
                                },
                            },
                        ),
                        (
                            "transaction",
                            {
                                "name": "Transaction",
                                "type": "record",
                                "fields": [
                                    *_texts_of("commitlsn", "beginlsn"),
                                    *_fields(("sequencenumber", "int"), ("committime", "string")),
                                ],
                            },
                        ),
                    ),
                ],
            },
        ),
        (
            "eventrow",
            {"name": "EventRow", "type": "record", "fields": _texts_of("old", "current")},
        ),
    ),
}


def ce_attributes(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """CloudEvent attributes among transport headers or properties (binary content mode)."""
    out: dict[str, str] = {}
    if not headers:
        return out
    for k, v in header_map(headers).items():
        for p in CE_PREFIXES:
            if k.startswith(p.lower()):
                out[k[len(p) :]] = v
                break
    return out


def binary_mode(attrs: Mapping[str, Any], body: bytes) -> dict[str, Any]:
    """A CloudEvent in binary content mode as the JSON-shaped CloudEvent: its attributes (from
    :func:`ce_attributes`) as text, numbers and booleans, the body as ``data``."""
    return {**_texts(attrs), **data_fields(body)}


def _texts(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if k in ("segmentindex", "splitindex", "splittotalcnt") and isinstance(v, str):
            # a number too long to be an index stays text, rejected as out of range
            v = int(v) if v.strip().lstrip("-").isdigit() and len(v.strip()) <= 18 else v
        if k == "finalsegment" and isinstance(v, str):
            v = v.strip().lower() == "true"
        out[k] = v
    return out


def from_avro(record: Any) -> Any:
    """A CloudEvent Avro record as the JSON-shaped CloudEvent (``data`` bytes as text, or
    ``data_base64``)."""
    if not isinstance(record, dict):
        return record
    doc: dict[str, Any] = {}
    for k, v in record.items():
        if k == "data" and isinstance(v, bytes):
            doc.update(data_fields(v))
        else:
            doc[k] = bytes(v).decode("utf-8", "replace") if isinstance(v, bytes) else v
    return doc


def _looks_like_json(body: bytes) -> bool:
    """JSON object or array text. (Avro binary of the Data record never starts with ``{`` or
    ``[``: its first byte is a zig-zag string length, always even.)"""
    return body.lstrip(b" \t\r\n")[:1] in (b"{", b"[")


def data_fields(body: bytes) -> dict[str, Any]:
    """``data`` from bytes: text when it is UTF-8 JSON, else ``data_base64`` (the CloudEvents
    JSON member for binary data) — Avro-serialized ``data``, or a segment cut inside a
    character, survives until decoded or joined."""
    if _looks_like_json(body):
        try:
            return {"data": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"data_base64": base64.b64encode(body).decode("ascii")}


def data_member(doc: Mapping[str, Any]) -> Any:
    """``data``, or the bytes of ``data_base64``."""
    if "data" in doc or "data_base64" not in doc:
        return doc.get("data")
    value = doc["data_base64"]
    try:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value
    except (binascii.Error, ValueError):
        raise Dialect.fail("BAD_DATA", "'data_base64' is not base64") from None


def data_document(value: Any) -> Any:
    """``data`` as a document: JSON text (or bytes of it), or — under Avro serialization —
    Avro binary of the spec's Data record."""
    if isinstance(value, bytes | bytearray) and value:
        body = bytes(value)
        if not _looks_like_json(body):
            return _avro_data(body)
        try:
            return json_member(body, "data", "BAD_DATA")
        except DecodeError as e:
            try:
                return _avro_data(body)
            except DecodeError:
                raise e from None
    return json_member(value, "data", "BAD_DATA")


def _avro_data(body: bytes) -> dict[str, Any]:
    try:
        record = read_schemaless(body, DATA_AVRO_SCHEMA)
    except DecodeError as e:
        raise Dialect.fail(
            "BAD_DATA", f"'data' is neither JSON nor an Avro Data record: {e.message}"
        ) from None
    if not isinstance(record, dict):
        raise Dialect.fail("BAD_DATA", "'data' is neither JSON nor an Avro Data record")
    return record


def json_member(value: Any, name: str, code: str) -> Any:
    """A member that is JSON text (CES writes ``data``, ``old`` and ``current`` as strings);
    an already-parsed object is accepted as it is."""
    if value is None or isinstance(value, dict | list):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise Dialect.fail("BAD_UTF8", f"'{name}' is not UTF-8 text") from None
    if not isinstance(value, str):
        raise Dialect.fail(code, f"'{name}' must be JSON text, got {kind(value)}")
    if not value.strip():
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise Dialect.fail(code, f"'{name}' is not JSON: {e}") from None
