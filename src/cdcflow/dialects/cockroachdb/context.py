"""What one CockroachDB message is decoded with: where it came from (:class:`Context`, read
from the message and its transport), what its envelope read about the row (:class:`RowChange`),
how its columns are typed (:class:`Columns`), and the HLC fields every envelope reads."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.cockroachdb.types import avro_schema_types, unwrap
from cdcflow.dialects.common import epoch_instant
from cdcflow.dialects.model import Item
from cdcflow.transports.json import loads_exact
from cdcflow.transports.message import RawMessage


@dataclass
class Context:
    """Where a message came from: the key and topic that travelled beside it, Avro types."""

    item: Item
    key: Any = None
    topic: str | None = None
    partition: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    avro_types: dict[str, str] = field(default_factory=dict)
    bit_columns: frozenset[str] = frozenset()
    transport: bool = False

    @property
    def msg(self) -> RawMessage:
        return self.item.msg


Where = tuple[str | None, str | None, str, str | None, str]
"""(database, schema, table, column family, topic) of a changefeed message."""


@dataclass(frozen=True, slots=True)
class RowChange:
    """What an envelope read from a message about one row change: the part of the row event
    that differs between envelopes (the rest comes from the message's :class:`Context`)."""

    where: Where
    op: str
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    hlc: Any = None
    hlc_source: str | None = None
    key_value: Any = None
    key_names: tuple[str, ...] | None = None
    extra: Mapping[str, Any] | None = None
    mvcc: Any = None
    commit_ns: int | None = None
    text_values: bool = False


@dataclass
class Columns:
    """How the columns of one row are typed: known ``types`` (declared, Avro), ``bits`` (BIT
    columns in Avro's word arrays), ``text_values`` (CSV: untyped columns stay text), and the
    ``row_types`` the event records."""

    types: Mapping[str, str]
    bits: frozenset[str]
    text_values: bool
    row_types: dict[str, str] = field(default_factory=dict)


def message_context(item: Item) -> Context:
    """The :class:`Context` of an item: the Kafka topic and partition, the record's key (Avro,
    or JSON text), the Avro schema's column types."""
    msg = item.msg
    ctx = Context(item=item, meta=item.meta)
    if msg.kafka is not None:
        ctx.transport = True
        ctx.topic = msg.kafka.topic or None
        ctx.partition = msg.kafka.partition
    if msg.key_avro is not None:
        ctx.key, ctx.transport = msg.key_avro.value, True
    elif msg.key is not None:
        ctx.transport = True
        ctx.key = json_text(msg.key.decode("utf-8", "replace"), "key")
    if msg.avro is not None:
        ctx.avro_types, ctx.bit_columns = msg.avro.schema.memo(
            "cockroachdb.types", avro_schema_types
        )
    return ctx


def json_text(text: str, what: str) -> Any:
    """JSON text the message carries as a string (a record key, a sinkless value), parsed;
    ``None`` for blank text, ``NOT_JSON`` naming ``what`` when it is not JSON."""
    if not text.strip():
        return None
    try:
        return loads_exact(text)
    except (orjson.JSONDecodeError, ValueError):
        raise Dialect.fail("NOT_JSON", f"the record's {what} is not JSON: {text[:60]!r}") from None


def hlc_field(doc: Mapping[str, Any]) -> tuple[Any, str | None]:
    if doc.get("updated") is not None:
        return unwrap(doc["updated"]), "updated"
    if doc.get("mvcc_timestamp") is not None:
        return unwrap(doc["mvcc_timestamp"]), "mvcc_timestamp"
    return None, None


def wall_time(wall_ns: int) -> dt.datetime:
    """The instant of an HLC's wall time (nanoseconds since the epoch); ``BAD_HLC`` when it is
    out of range."""
    return epoch_instant(wall_ns, "ns", "HLC wall time", "BAD_HLC")
