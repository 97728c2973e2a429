"""Kafka records: written as JSON (``{"topic", "partition", "offset", "key", "value",
"headers", "timestamp"}``, names in any case, so Pulsar's ``Key``/``Value``/``Topic`` too, with
the key and value as JSON, JSON text, or bytes in ``key_base64``/``value_base64``), or as rows
of Spark's Kafka source (:func:`record_message`).

A binary value that starts with the Confluent magic byte is Avro, decoded with the schema
directory. A null or empty value is a tombstone: the message's ``data`` is empty.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from cdcflow.errors import DecodeError
from cdcflow.transports import avro
from cdcflow.transports.json import dumps, has_inexact_numbers, header_bytes, loads_exact
from cdcflow.transports.message import KafkaCoordinates, RawMessage

#: Field names of a Kafka record written as JSON (lower case).
RECORD_FIELDS: frozenset[str] = frozenset(
    {
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "timestamp",
        "timestamptype",
        "key_base64",
        "value_base64",
    }
)
_COORDINATES = frozenset({"topic", "partition", "offset", "key", "key_base64", "headers"})


def record_fields(doc: Any) -> dict[str, Any] | None:
    """A Kafka record's fields under lower-case names, or ``None`` when ``doc`` is not one: an
    object of record fields only, with a value and at least one coordinate beside it."""
    if not isinstance(doc, dict) or not doc:
        return None
    lower: dict[str, Any] = {}
    for k, v in doc.items():
        name = k.lower() if isinstance(k, str) else k
        if name not in RECORD_FIELDS or name in lower:
            return None
        lower[name] = v
    if "value" not in lower and "value_base64" not in lower:
        return None
    if not lower.keys() & _COORDINATES:
        return None
    return lower


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise DecodeError(f"Kafka record '{what}' must be base64 text", code="BAD_DATA")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise DecodeError(f"Kafka record '{what}' is not base64", code="BAD_DATA") from None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unwrap(carrier: RawMessage, record: Mapping[str, Any], schema_dir: str | None) -> RawMessage:
    """The message a Kafka record carries, with the record's key, headers and coordinates, and
    the carrier's place in its file."""
    exact: dict[str, Any] | None = None
    if has_inexact_numbers(carrier.data) and any(
        isinstance(record.get(k), dict | list) for k in ("key", "value")
    ):
        # embedded JSON: keep its numbers exactly as written
        whole = loads_exact(carrier.data)
        exact = {str(k).lower(): v for k, v in whole.items()} if isinstance(whole, dict) else None
    msg = RawMessage(
        data=b"",
        origin=carrier.origin,
        offset=carrier.offset,
        line=carrier.line,
        index=carrier.index,
        headers=header_bytes(record.get("headers")) or None,
        kafka=KafkaCoordinates(
            topic=record.get("topic") if isinstance(record.get("topic"), str) else None,
            partition=_int(record.get("partition")),
            offset=_int(record.get("offset")),
            timestamp=record.get("timestamp"),
        ),
    )
    key = record.get("key")
    if isinstance(key, str):
        msg.key = key.encode("utf-8")
    elif key is not None:
        msg.key = dumps((exact or record).get("key"))
    elif "key_base64" in record and record["key_base64"] is not None:
        _binary_key(msg, _b64(record["key_base64"], "key_base64"), schema_dir)
    if "value_base64" in record and record["value_base64"] is not None:
        read_value(msg, _b64(record["value_base64"], "value_base64"), schema_dir)
        return msg
    value = record.get("value")
    if isinstance(value, str):
        msg.data = value.encode("utf-8")
    elif isinstance(value, bytes):
        msg.data = value
    elif value is not None:
        if exact is not None:
            msg.data = dumps(exact.get("value"))
        else:
            msg.data, msg.doc, msg.parsed = dumps(value), value, True
    return msg


def _binary_key(msg: RawMessage, key: bytes, schema_dir: str | None) -> None:
    msg.key = key
    if avro.is_confluent(key):
        msg.key_avro = avro.read_confluent(key, schema_dir)


def read_value(msg: RawMessage, body: bytes, schema_dir: str | None) -> None:
    """Set ``msg.data`` to a binary value and say what it holds: Confluent-framed Avro (read
    with the schema directory), JSON, or other bytes (a dialect's schemaless record, a
    CloudEvent's binary data). Raises :class:`DecodeError` for unreadable Confluent Avro."""
    msg.data = body
    if avro.is_confluent(body):
        msg.avro = avro.read_confluent(body, schema_dir)
        msg.form = "avro"
    elif body.lstrip(b" \t\r\n")[:1] not in (b"{", b"[", b""):
        msg.form = "bytes"


def origin(topic: str | None, partition: int | None) -> str | None:
    """Where a record of a Kafka topic was read, as a message origin:
    ``kafka://<topic>/<partition>`` (``None`` without a topic)."""
    if topic is None:
        return None
    return f"kafka://{topic}/{'' if partition is None else partition}"


def record_message(
    value: bytes | None,
    key: bytes | None = None,
    headers: Any = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    timestamp: Any = None,
    schema_dir: str | None = None,
) -> RawMessage:
    """A record as Spark's Kafka source gives it (binary key and value, headers as
    ``{"key", "value"}`` records) as a raw message: its origin is the topic and partition,
    its position the record's offset, so delivery order is Kafka's order within a partition.
    A null or empty value is a tombstone (empty ``data``). Raises :class:`DecodeError` for a
    Confluent-framed key or value that cannot be read."""
    msg = RawMessage(
        data=b"",
        origin=origin(topic, partition),
        offset=offset or 0,
        headers=header_bytes(headers) or None,
        kafka=KafkaCoordinates(
            topic=topic, partition=partition, offset=offset, timestamp=timestamp
        ),
    )
    if key is not None:
        _binary_key(msg, key, schema_dir)
    read_value(msg, value or b"", schema_dir)
    return msg
