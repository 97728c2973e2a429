"""Debezium message shapes: the envelope table that recognition and dispatch both walk.

A message is ``{"schema", "payload"}`` (the JSON converter with schemas) or the payload alone;
the table reads the payload, the schema's name where there is one. In order (the first match
decides): heartbeats and key messages (skipped), transaction markers, schema changes,
flattened rows (``ExtractNewRecordState``: no ``op``, no ``source``), a ``source`` without
``op`` (not a change event), and change events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcflow.dialects.model import Envelope

#: ``op`` → canonical operation (``m``, a logical decoding message, is skipped).
OPS: dict[str, str] = {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "SNAPSHOT"}
#: Transaction metadata ``status`` → marker operation.
STATUS: dict[str, str] = {"BEGIN": "BEGIN", "END": "COMMIT"}
#: Schema names that say "Debezium" whatever the payload holds.
_NAMED = (".Envelope", ".Key", "Heartbeat", ".SchemaChangeValue")
#: Fields a flattened row's ``add.fields`` and ``delete.handling.mode`` write.
_FLAT_FIELDS = ("__op", "__deleted", "__table", "__source_ts_ms", "__lsn", "__db")


def unwrap(doc: Mapping[str, Any]) -> tuple[Any, Any]:
    """(schema, payload) of a ``{"schema", "payload"}`` envelope, else (None, doc)."""
    if (
        len(doc) == 2
        and "schema" in doc
        and "payload" in doc
        and (doc["schema"] is None or isinstance(doc["schema"], dict))
    ):
        return doc["schema"], doc["payload"]
    return None, doc


def schema_name(doc: Mapping[str, Any]) -> str:
    """The name of a message's Connect schema ("" without one)."""
    schema, _ = unwrap(doc)
    return str(schema.get("name") or "") if isinstance(schema, dict) else ""


def text(value: Any) -> str | None:
    """A scalar field as text (``None`` for null, objects and arrays)."""
    return None if value is None or isinstance(value, dict | list) else str(value)


def _payload(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = unwrap(doc)[1]
    return payload if isinstance(payload, dict) else {}


def _heartbeat(doc: Mapping[str, Any]) -> bool:
    return schema_name(doc).endswith("Heartbeat")


def _key(doc: Mapping[str, Any]) -> bool:
    return schema_name(doc).endswith(".Key")


def _marker(doc: Mapping[str, Any]) -> bool:
    return text(_payload(doc).get("status")) in STATUS


def _schema_change(doc: Mapping[str, Any]) -> bool:
    payload = _payload(doc)
    return "historyRecord" in payload or "ddl" in payload or "tableChanges" in payload


def _flattened(doc: Mapping[str, Any]) -> bool:
    payload = _payload(doc)
    return "op" not in payload and "source" not in payload


def _source_without_op(doc: Mapping[str, Any]) -> bool:
    return "op" not in _payload(doc)


def _change(doc: Mapping[str, Any]) -> bool:
    return True  # any other payload: an ``op`` is read (and checked) by the handler


def _score(doc: Mapping[str, Any]) -> float:
    """Recognition's score of a payload of any shape: a Debezium schema name, a Debezium
    ``source`` (not CockroachDB's enriched envelope, which looks alike), a transaction marker,
    a flattened row's ``__`` fields."""
    if schema_name(doc).endswith(_NAMED):
        return 0.95
    payload = _payload(doc)
    source = payload.get("source")
    if isinstance(source, dict):
        if source.get("origin") == "cockroachdb" or "ts_hlc" in source:
            return 0.0
        if text(payload.get("op")) in (*OPS, "t", "m") or "historyRecord" in payload:
            return 0.95
        return 0.8 if "ddl" in payload or "tableChanges" in payload else 0.0
    if text(payload.get("status")) in STATUS and "data_collections" in payload:
        return 0.95
    flat = any(str(k).startswith("__") for k in payload) and _flat_row(payload)
    return 0.85 if flat else 0.0


def _flat_row(payload: Mapping[str, Any]) -> bool:
    """A payload carrying the fields a flattened row's transform adds."""
    return any(k in payload for k in _FLAT_FIELDS)


#: The Debezium envelopes, in the order recognition and dispatch try them.
MESSAGE_ENVELOPES: tuple[Envelope, ...] = (
    Envelope("heartbeat", _heartbeat, "_heartbeat", 0.95),
    Envelope("key", _key, "_key_message", 0.95),
    Envelope("transaction", _marker, "_marker", _score),
    Envelope("schema_change", _schema_change, "_schema_change", _score),
    Envelope("flattened", _flattened, "_flattened", _score),
    Envelope("source_without_op", _source_without_op, "_source_without_op", _score),
    Envelope("change", _change, "_change", _score),
)
