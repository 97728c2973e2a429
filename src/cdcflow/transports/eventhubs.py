"""Azure Event Hubs Capture files: Avro records whose ``Body`` is the message and whose
``Properties`` travel as its headers."""

from __future__ import annotations

from typing import Any

from cdcflow.transports.json import header_bytes
from cdcflow.transports.message import AvroSchema, CaptureCoordinates, RawMessage

#: Fields every Capture record has.
CAPTURE_FIELDS = frozenset({"SequenceNumber", "Offset", "EnqueuedTimeUtc", "Body"})

#: The Avro schema Event Hubs Capture writes its files with.
CAPTURE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "EventData",
    "namespace": "Microsoft.ServiceBus.Messaging",
    "fields": [
        {"name": "SequenceNumber", "type": "long"},
        {"name": "Offset", "type": "string"},
        {"name": "EnqueuedTimeUtc", "type": "string"},
        {
            "name": "SystemProperties",
            "type": {"type": "map", "values": ["long", "double", "string", "bytes"]},
        },
        {
            "name": "Properties",
            "type": {"type": "map", "values": ["long", "double", "string", "bytes", "null"]},
        },
        {"name": "Body", "type": ["null", "bytes"]},
    ],
}


def is_capture(schema: AvroSchema) -> bool:
    """Whether an Avro file's writer schema is the Event Hubs Capture record."""
    return CAPTURE_FIELDS <= schema.field_names()


def message(record: Any, schema: AvroSchema, origin: str | None, number: int) -> RawMessage:
    """One Capture record as the message it carries."""
    if not isinstance(record, dict):
        record = {}
    body = record.get("Body") or b""
    if isinstance(body, str):
        body = body.encode("utf-8")
    return RawMessage(
        data=bytes(body),
        origin=origin,
        offset=number,
        index=number,
        headers=header_bytes(record.get("Properties") or {}),
        form="json" if bytes(body).lstrip(b" \t\r\n")[:1] in (b"{", b"[") else "bytes",
        capture=CaptureCoordinates(
            sequence_number=record.get("SequenceNumber"),
            offset=record.get("Offset"),
            enqueued_time=record.get("EnqueuedTimeUtc"),
        ),
    )
