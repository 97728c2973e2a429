"""Transports: bytes → messages, with no vendor knowledge.

A transport knows how messages travel — JSON documents, lines and arrays; Avro object-container
files and schemaless records; Confluent-framed Avro; Kafka records written as JSON; Event Hubs
Capture files; length-delimited protobuf; CSV — and yields typed results: a
:class:`~cdcflow.transports.message.RawMessage` with its coordinates, or an
:class:`~cdcflow.transports.message.Unreadable` part of a file with a coded reason. What a
message *means* is a dialect's business (:mod:`cdcflow.dialects`).

A dialect declares the transports that carry it, in its capabilities, with the names below.
"""

from __future__ import annotations

#: JSON documents, JSON lines, JSON arrays of messages, concatenated (pretty-printed) documents.
JSON = "json"
#: Kafka records written as JSON (``key``, ``value``/``value_base64``, ``headers``, ``topic``,
#: ``partition``, ``offset``), Confluent-framed Avro values included.
KAFKA = "kafka"
#: Avro object-container files (one message per record) and schemaless Avro records.
AVRO = "avro"
#: Azure Event Hubs Capture files (Avro records whose ``Body`` is the message).
EVENTHUBS = "eventhubs"
#: Length-delimited protobuf messages (``.pb``/``.protobuf``/``.pbd`` files).
PROTOBUF = "protobuf"
#: CSV files, one message per row.
CSV = "csv"

#: Every transport name.
TRANSPORTS: frozenset[str] = frozenset({JSON, KAFKA, AVRO, EVENTHUBS, PROTOBUF, CSV})

#: File name endings framed by a binary transport instead of JSON.
EXTENSIONS: dict[str, tuple[str, ...]] = {
    AVRO: (".avro",),
    PROTOBUF: (".pb", ".protobuf", ".pbd"),
    CSV: (".csv",),
}


def transport_of_file(origin: str | None) -> str:
    """The transport that frames a file, from its name (JSON unless a binary ending says
    otherwise)."""
    low = (origin or "").lower()
    for transport, endings in EXTENSIONS.items():
        if low.endswith(endings):
            return transport
    return JSON
