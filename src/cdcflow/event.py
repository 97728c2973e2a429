"""The canonical change event: cdcflow's data contract.

In Python a canonical event is a plain ``dict`` with the fields of :data:`FIELDS` (hot paths use
dicts and tuples, not objects). Its JSON form (``cdcflow inspect``, the unified stream) uses the
same names with typed values: exact decimals as JSON numbers, timestamps as ISO-8601 text with
``Z``, binary as base64. Inside Spark the same names are columns of :func:`spark_schema`, where
row images are ``map<string,string>`` of wire strings (:func:`cdcflow.types.to_wire`) and
``types`` gives each column's canonical type.

``types`` is the one field beyond the contract's core list: row images are typed, and a
column's type must travel with the event for formats whose values carry none (it is ``{}``
when nothing is known).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from cdcflow.types import json_bytes

FIELDS: tuple[str, ...] = (
    "id",
    "dialect",
    "source",
    "database",
    "schema",
    "table",
    "operation",
    "timestamp",
    "transaction_id",
    "sequence",
    "position",
    "key",
    "before",
    "after",
    "partial",
    "metadata",
    "ddl_type",
    "ddl_command",
    "types",
)

#: Operations of the canonical event.
OPERATIONS: frozenset[str] = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "UPSERT",
        "SNAPSHOT",
        "TRUNCATE",
        "DDL",
        "BEGIN",
        "COMMIT",
        "RESOLVED",
    }
)
#: Operations that carry a row and a key.
ROW_OPERATIONS: frozenset[str] = frozenset({"INSERT", "UPDATE", "DELETE", "UPSERT", "SNAPSHOT"})
#: Operations that concern one table.
TABLE_OPERATIONS: frozenset[str] = ROW_OPERATIONS | {"TRUNCATE", "DDL"}
#: Markers without a table.
MARKER_OPERATIONS: frozenset[str] = frozenset({"BEGIN", "COMMIT", "RESOLVED"})

#: Transport columns added to each decoded row inside Spark (not part of the JSON form).
TRANSPORT_FIELDS: tuple[str, ...] = ("origin", "offset", "line", "item")
#: Error columns: set on rows that are rejections instead of events.
ERROR_FIELDS: tuple[str, ...] = ("error_code", "error_message", "raw")


def new_event(**fields: Any) -> dict[str, Any]:
    """A canonical event with every field present (absent ones ``None``; ``partial`` False).

    ``id`` defaults to :func:`event_id` when the producer gives none.
    """
    ev: dict[str, Any] = dict.fromkeys(FIELDS)
    ev["partial"] = False
    ev["types"] = {}
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise TypeError(f"not canonical event fields: {sorted(unknown)}")
    ev.update(fields)
    if ev["metadata"] is None:
        ev["metadata"] = {}
    if not ev["id"]:
        ev["id"] = event_id(ev["dialect"], ev["table"], ev["key"], ev["sequence"], ev["operation"])
    return ev


#: How the ids :func:`event_id` derives begin (a producer's own id may begin otherwise).
DERIVED_ID_PREFIX = "cdc-"


def event_id(
    dialect: str | None,
    table: str | None,
    key: Mapping[str, Any] | None,
    sequence: str | None,
    operation: str | None,
) -> str:
    """Deterministic identity for events whose producer gives none: a hash of
    (dialect, table, key, sequence, operation), stable across runs and machines."""
    payload = json_bytes([dialect, table, key, sequence, operation], orjson.OPT_SORT_KEYS)
    return DERIVED_ID_PREFIX + hashlib.blake2b(payload, digest_size=16).hexdigest()


def to_json_dict(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form's field order and names, for display and the unified stream."""
    return {f: ev.get(f) for f in FIELDS}


def dumps(ev: Mapping[str, Any]) -> bytes:
    """One canonical event as compact JSON (typed values, exact decimals)."""
    return json_bytes(to_json_dict(ev), orjson.OPT_UTC_Z)


def loads(data: bytes | str) -> dict[str, Any]:
    """Parse the JSON form back (values stay JSON-native; use ``types`` to retype)."""
    doc = orjson.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("a canonical event is a JSON object")
    return new_event(**{k: v for k, v in doc.items() if k in FIELDS})


def format_timestamp(ts: dt.datetime | None) -> str | None:
    """UTC ISO-8601 text with ``Z`` for an event timestamp."""
    if ts is None:
        return None
    return ts.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


# --------------------------------------------------------------------------- Spark / Arrow


_MAP = "map<string,string>"
#: Spark types of the canonical fields that are not strings.
_FIELD_TYPES: dict[str, str] = {
    "timestamp": "timestamp",
    "key": _MAP,
    "before": _MAP,
    "after": _MAP,
    "partial": "boolean",
    "metadata": _MAP,
    "types": _MAP,
}

#: The decoded-events columns inside Spark as (name, Spark type): the canonical fields, then
#: the transport and error columns — the one definition of that schema.
SPARK_COLUMNS: tuple[tuple[str, str], ...] = (
    *((f, _FIELD_TYPES.get(f, "string")) for f in FIELDS),
    ("origin", "string"),
    ("offset", "bigint"),
    ("line", "bigint"),
    ("item", "int"),
    ("error_code", "string"),
    ("error_message", "string"),
    ("raw", "binary"),
)


def spark_schema_ddl(with_transport: bool = True) -> str:
    """The decoded-events schema as a Spark DDL string (no pyspark import needed)."""
    columns = SPARK_COLUMNS if with_transport else SPARK_COLUMNS[: len(FIELDS)]
    return ", ".join(f"`{name}` {t}" for name, t in columns)


def spark_schema(with_transport: bool = True) -> Any:
    """The decoded-events schema as a ``pyspark.sql.types.StructType``."""
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(spark_schema_ddl(with_transport))


def iter_fields(events: Iterable[Mapping[str, Any]], field: str) -> Iterable[Any]:
    """Values of one field across events (helper for columnar builders)."""
    return (e.get(field) for e in events)
