"""What a dialect declares, is given and hands back — the plain data of the decoding skeleton
(:class:`~cdcflow.dialects.base.Dialect` runs it).

Declared once per dialect: its :class:`Capabilities` and its :class:`Envelope` table. Given:
the source's :class:`DialectOptions`; per message, a :class:`Batch` of items, each an
:class:`Item`. Handed back per item: a canonical event (placed by its :class:`Order`), a
:class:`Rejection`, a :class:`Segment` of a split message or a :class:`Skipped` message; per
JSON-lines file read in bulk, a :class:`Columnar`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cdcflow.transports import AVRO, EVENTHUBS, JSON, KAFKA
from cdcflow.transports.json import JsonLines
from cdcflow.transports.message import RawMessage

__all__ = [
    "BASE_TRANSPORTS",
    "Batch",
    "Capabilities",
    "Columnar",
    "Decoded",
    "DialectOptions",
    "Envelope",
    "Item",
    "Order",
    "Rejection",
    "Segment",
    "Skipped",
    "Where",
    "classify",
]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A message (or one item of a batch message) that could not be decoded."""

    code: str
    message: str
    raw: bytes
    item: int | None = None
    dialect: str | None = None
    #: the table the message was about, when the dialect had read it before the problem
    table: str | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a message the producer split (e.g. a CES event over the stream group's
    ``max_message_size_kb``). Segments sharing ``group`` are reassembled in ``index`` order
    (:mod:`cdcflow.decode.segments`) before the whole message is decoded.

    ``final`` marks the last segment (``None`` when the producer does not say); ``total`` is the
    segment count when the producer gives one instead. ``raw`` is the segment as the dialect's
    :meth:`~cdcflow.dialects.base.Dialect.reassemble` reads it back.
    """

    group: str
    index: int
    final: bool | None
    total: int | None
    raw: bytes
    dialect: str
    item: int | None = None


@dataclass(frozen=True)
class DialectOptions:
    """Per-source decoding options (from configuration).

    ``table_keys``: table → key column names, for producers that send none.
    ``column_types``: table → column → native or canonical type, for producers that send none.
    ``extra``: dialect-specific options (and ``schema_dir``, the folder of Avro schemas that
    Confluent-framed messages name by id, for every dialect).
    """

    table_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    column_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def keys_for(self, table: str | None, schema: str | None = None) -> tuple[str, ...] | None:
        """Configured key columns for a table (``schema.table`` or ``table``)."""
        if table is None:
            return None
        if schema and f"{schema}.{table}" in self.table_keys:
            return tuple(self.table_keys[f"{schema}.{table}"])
        found = self.table_keys.get(table)
        return tuple(found) if found is not None else None

    def types_for(
        self, table: str | None, schema: str | None = None, database: str | None = None
    ) -> Mapping[str, str]:
        """Declared column types for a table (``schema.table``, ``table``, then
        ``database.table``)."""
        if table is None:
            return {}
        if schema and f"{schema}.{table}" in self.column_types:
            return self.column_types[f"{schema}.{table}"]
        found = self.column_types.get(table)
        if not found and database:
            found = self.column_types.get(f"{database}.{table}")
        return found or {}

    @property
    def schema_dir(self) -> str | None:
        """The folder of ``<id>.avsc`` schemas for Confluent-framed Avro messages."""
        found = self.extra.get("schema_dir")
        return str(found) if found else None


@dataclass(frozen=True, slots=True)
class Skipped:
    """A message that carries no change on purpose (a Kafka tombstone, a key message, a
    heartbeat): no event and no error, counted by ``why``."""

    why: str
    dialect: str


Decoded = dict[str, Any] | Rejection | Segment | Skipped

#: Transports every dialect gets from the base.
BASE_TRANSPORTS: frozenset[str] = frozenset({JSON, KAFKA, AVRO, EVENTHUBS})


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a dialect's producer can express. Every dialect declares its own (what it does
    not claim is false); the contract suite checks each claim against the dialect's rendered
    messages."""

    orders_events: bool = False
    """The producer gives a commit order: row events get a ``sequence`` from a native
    position, never from delivery order, when the producer is set up as the dialect's docs
    say."""
    before_images: bool = False
    """UPDATE events can carry the row's previous image (``before``)."""
    names_keys: bool = False
    """Every message names its key columns; otherwise some need names from configuration or
    the engine (key values without names travel in ``metadata.key_values``)."""
    carries_types: bool = False
    """Messages carry column types; otherwise types come from declarations or inference."""
    splits_messages: bool = False
    """Messages may arrive split into segments (the dialect's
    :meth:`~cdcflow.dialects.base.Dialect.event` returns a :class:`Segment`,
    :meth:`~cdcflow.dialects.base.Dialect.reassemble` joins them)."""
    exact_numbers: bool = False
    """JSON numbers with a fraction or more than 19 digits are read exactly (``Decimal``, big
    integers): the format's JSON numbers carry exact decimals."""
    transports: frozenset[str] = BASE_TRANSPORTS
    """Transports that carry the messages (:mod:`cdcflow.transports`): JSON, Kafka records,
    Avro and Event Hubs Capture come with the base; a dialect adds its own formats (protobuf,
    CSV)."""


#: Where a change happened: (database, schema, table).
Where = tuple[str | None, str | None, str | None]


class Order(NamedTuple):
    """Where an event stands in its source: the comparable ``sequence``, the producer's native
    ``position``, the commit ``timestamp`` and ``transaction_id`` when known."""

    sequence: str
    position: dict[str, Any] | None = None
    timestamp: dt.datetime | None = None
    transaction_id: str | None = None


@dataclass(slots=True)
class Batch:
    """A message that holds several items (a batch envelope, a webhook body, a JSON array):
    each item is decoded, or rejected, on its own. ``meta`` goes into every item's metadata."""

    items: Sequence[Any]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Item:
    """One item being decoded: its message, its number in the message, and the metadata every
    event of it starts from (transport coordinates, batch fields)."""

    msg: RawMessage
    number: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    #: the item's table, once the dialect has read it (a rejection after that names it)
    table: str | None = None


@dataclass(frozen=True)
class Columnar:
    """Events of a JSON-lines file read in bulk: of the file's ``lines``, the ``rows``
    (indexes) decoded here, with ``columns`` their canonical fields (Arrow arrays in ``rows``
    order, wire strings in the maps); every other line is left to
    :meth:`~cdcflow.dialects.base.Dialect.decode`."""

    lines: JsonLines
    rows: Any  # numpy int64 array
    columns: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message shape of a dialect, declared once: recognition (auto-detection) and dispatch
    both walk a dialect's :attr:`~cdcflow.dialects.base.Dialect.envelopes` in order and take
    the first whose ``match`` holds, so the two can never classify a document differently.

    ``match`` reads the parsed document (a JSON object or Avro record); ``handler`` names the
    dialect method that decodes it (called with the document and the dialect's context);
    ``confidence`` is recognition's score (0..1) for a document of this shape — a number, or a
    function of the document where the shape alone does not settle it (0 says "this shape, but
    not this dialect's").
    """

    name: str
    match: Callable[[Mapping[str, Any]], bool]
    handler: str
    confidence: float | Callable[[Mapping[str, Any]], float] = 1.0

    def score(self, doc: Mapping[str, Any]) -> float:
        """Recognition's score for ``doc`` (a document this envelope matches)."""
        c = self.confidence
        return c if isinstance(c, float | int) else c(doc)


def classify(envelopes: Sequence[Envelope], doc: Mapping[str, Any]) -> Envelope | None:
    """The first envelope of ``envelopes`` that matches ``doc``, else ``None``."""
    for envelope in envelopes:
        if envelope.match(doc):
            return envelope
    return None
