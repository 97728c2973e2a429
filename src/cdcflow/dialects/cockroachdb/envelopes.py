"""CockroachDB changefeed message shapes: the envelope table that recognition and dispatch both
walk, and the predicates it is made of.

Order matters (the first match decides): the enriched envelope with its Connect-style
``schema``, sinkless rows, resolved timestamps (plain and bare), the enriched envelope, the
bare envelope (``__crdb__``), the wrapped envelope and its key-only delete; a webhook body
(``{"payload": [...], "length": N}``) is split into items before dispatch and only scored here.
A JSON object of no shape is the ``row`` envelope when the transport carries a key or the
source option says so (:meth:`CockroachDbDialect.unmatched`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdcflow.dialects.model import Envelope, classify
from cdcflow.errors import DecodeError
from cdcflow.transports.json import exact_decoder
from cdcflow.transports.limits import check_depth

#: Source option values of ``envelope``.
ENVELOPES: tuple[str, ...] = ("auto", "wrapped", "bare", "row", "key_only", "enriched")

#: Enriched ``op`` → canonical operation.
ENRICHED_OPS: dict[str, str] = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}
#: Enriched ``source`` fields kept in ``metadata``.
SOURCE_METADATA: tuple[str, ...] = (
    "changefeed_sink",
    "cluster_id",
    "cluster_name",
    "db_version",
    "job_id",
    "node_id",
    "node_name",
    "origin",
    "source_node_locality",
)

#: Top-level fields of a wrapped message.
WRAPPED_FIELDS: frozenset[str] = frozenset(
    {"after", "before", "key", "updated", "mvcc_timestamp", "topic", "topic:"}
)
#: Fields of a sinkless row (``EXPERIMENTAL CHANGEFEED FOR`` output).
SINKLESS_FIELDS: frozenset[str] = frozenset({"key", "table", "value"})
#: Fields of a wrapped message that carries only a key (a delete without a diff).
_KEY_FIELDS: frozenset[str] = frozenset({"key", "updated", "mvcc_timestamp"})


@dataclass(frozen=True, slots=True)
class Console:
    """A console line: the key printed before the value (``None`` for an empty value)."""

    key: Any
    value: Any


# ---------------------------------------------------------------------- predicates


def is_enriched(doc: Mapping[str, Any]) -> bool:
    """An enriched-envelope message (``op``, ``source`` naming CockroachDB, or ``ts_ns``)."""
    op = doc.get("op")
    if not isinstance(op, str) or op not in ENRICHED_OPS:
        return False
    source = doc.get("source")
    if isinstance(source, dict):
        return (
            source.get("origin") == "cockroachdb"
            or "ts_hlc" in source
            or ("primary_keys" in source and "table_name" in source)
        )
    return "ts_ns" in doc and ("after" in doc or "before" in doc)


def sinkless(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A sinkless row's fields (lower-cased), or None."""
    lower = {str(k).lower(): v for k, v in doc.items()}
    if len(lower) != len(doc) or not lower.keys() <= SINKLESS_FIELDS:
        return None
    return lower if "table" in lower and "value" in lower else None


def is_webhook(doc: Mapping[str, Any]) -> bool:
    """A webhook body ``{"payload": [...], "length": N}``."""
    return isinstance(doc.get("payload"), list) and set(doc) <= {"payload", "length"}


def _with_schema(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("payload"), dict) and isinstance(doc.get("schema"), dict)


def _resolved(doc: Mapping[str, Any]) -> bool:
    return set(doc) == {"resolved"}


def _bare_resolved(doc: Mapping[str, Any]) -> bool:
    crdb = doc.get("__crdb__")
    return isinstance(crdb, dict) and "resolved" in crdb


def _enriched_like(doc: Mapping[str, Any]) -> bool:
    op = doc.get("op")
    return is_enriched(doc) or (isinstance(op, str) and ("source" in doc or "ts_ns" in doc))


def _sinkless(doc: Mapping[str, Any]) -> bool:
    return sinkless(doc) is not None


def _bare(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("__crdb__"), dict)


def _wrapped(doc: Mapping[str, Any]) -> bool:
    # a field no changefeed option writes says another producer's shape (GoldenGate's op_type)
    return ("after" in doc or "before" in doc) and doc.keys() <= WRAPPED_FIELDS


def _key_only(doc: Mapping[str, Any]) -> bool:
    return "key" in doc and set(doc) <= _KEY_FIELDS


# ---------------------------------------------------------------------- recognition scores


def _webhook_score(doc: Mapping[str, Any]) -> float:
    payload = doc["payload"]
    first = payload[0] if payload else None
    if first is None:
        return 0.95
    return 0.95 if isinstance(first, dict) and score(first) > 0 else 0.0


def _with_schema_score(doc: Mapping[str, Any]) -> float:
    name = str(doc["schema"].get("name", ""))
    return 0.95 if name.startswith("cockroachdb") or is_enriched(doc["payload"]) else 0.0


def _sinkless_score(doc: Mapping[str, Any]) -> float:
    key = (sinkless(doc) or {}).get("key")
    return 0.7 if isinstance(key, str) and key.lstrip().startswith("[") else 0.0


def _enriched_score(doc: Mapping[str, Any]) -> float:
    return 0.9 if is_enriched(doc) else 0.0  # an ``op`` and a ``source`` of another vendor


def _key_only_score(doc: Mapping[str, Any]) -> float:
    return 0.8 if "updated" in doc and isinstance(doc.get("key"), list) else 0.0


#: The changefeed envelopes, in the order recognition and dispatch try them.
MESSAGE_ENVELOPES: tuple[Envelope, ...] = (
    Envelope("webhook", is_webhook, "_nested_webhook", _webhook_score),
    Envelope("enriched_schema", _with_schema, "_enriched_with_schema", _with_schema_score),
    Envelope("sinkless", _sinkless, "_sinkless_message", _sinkless_score),
    Envelope("resolved", _resolved, "_resolved_message", 0.9),
    Envelope("bare_resolved", _bare_resolved, "_bare_resolved", 0.95),
    Envelope("enriched", _enriched_like, "_enriched_event", _enriched_score),
    Envelope("bare", _bare, "_bare_message", 0.95),
    Envelope("wrapped", _wrapped, "_wrapped", 0.9),
    Envelope("key_only", _key_only, "_wrapped", _key_only_score),
)


def score(doc: Mapping[str, Any]) -> float:
    """Recognition's score of a changefeed JSON object (its envelope's)."""
    envelope = classify(MESSAGE_ENVELOPES, doc)
    return envelope.score(doc) if envelope is not None else 0.0


def console_line(text: str) -> tuple[Any, Any] | None:
    """A console/sinkless line ``<key> <value>`` (the key a JSON array, or an Avro key object
    as the spec prints it) → (key, value or None), else None."""
    decoder = exact_decoder()
    s = text.strip()
    if not s.startswith(("[", "{")):
        return None
    try:
        key, end = decoder.raw_decode(s, 0)
        check_depth(key)
    except (json.JSONDecodeError, RecursionError, ValueError, DecodeError):
        return None
    rest = s[end:]
    if not isinstance(key, list | dict):
        return None
    if not rest.strip():
        return (key, None) if isinstance(key, list) else None
    gap = rest[: len(rest) - len(rest.lstrip())]
    if "\n" in gap or (not gap and not rest.startswith("->")):
        return None  # key and value share one line
    rest = rest.strip().removeprefix("->").strip()
    if not rest:
        return key, None
    try:
        value, end = decoder.raw_decode(rest, 0)
        check_depth(value)
    except (json.JSONDecodeError, RecursionError, ValueError, DecodeError):
        return None
    if rest[end:].strip() or not isinstance(value, dict):
        return None
    return key, value
