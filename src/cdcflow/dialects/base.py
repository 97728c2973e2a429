"""The dialect base: the skeleton every dialect runs, and the helpers vendor modules share.

A dialect module holds vendor knowledge only — how its messages are recognised, where the
table, key, row images and position live, its operation map, its ordering tuple, how split
messages are joined. Everything else is here: reading the message's document from whatever
transport carried it, the per-item loop of batch messages with one rejection per bad item,
typed (or wire) values with ``BAD_VALUE`` errors, declared column types, key resolution, the
delivery-order fallback, lineage metadata from the transport.

Writing a dialect (see ``docs/dialects/README.md``)::

    class MyDialect(Dialect):
        name = "mine"
        orders_events = True          # every capability flag below is set explicitly
        ...
        def recognise(self, msg, doc): ...     # 0..1
        def event(self, doc, item): ...        # one canonical event (or a list, a Segment)

in ``cdcflow/dialects/mine/dialect.py``, and one line in :data:`cdcflow.dialects.DIALECTS`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from cdcflow import sequence
from cdcflow.errors import DecodeError
from cdcflow.event import event_id, new_event
from cdcflow.transports import AVRO, EVENTHUBS, JSON, KAFKA, transport_of_file
from cdcflow.transports import avro as avro_transport
from cdcflow.transports.json import (
    JsonLines,
    dumps,
    has_inexact_numbers,
    kind,
    parse,
    parse_exact,
)
from cdcflow.transports.limits import Limits
from cdcflow.transports.message import AvroValue, RawMessage
from cdcflow.types import (
    CANONICAL_TYPES_TEXT,
    ValueTypeError,
    convert,
    parse_timestamp,
    source_type,
    to_wire,
    wire_json,
    wire_value,
)
from cdcflow.types.vendors import vendors

__all__ = [
    "BASE_TRANSPORTS",
    "Batch",
    "Capabilities",
    "Columnar",
    "Decoded",
    "Dialect",
    "DialectOptions",
    "Envelope",
    "Item",
    "Order",
    "RawMessage",
    "Rejection",
    "Segment",
    "Skipped",
    "Where",
    "kind",
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
    :meth:`Dialect.reassemble` reads it back.
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
    """Messages may arrive split into segments (:meth:`Dialect.event` returns a
    :class:`Segment`, :meth:`Dialect.reassemble` joins them)."""
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
    order, wire strings in the maps); every other line is left to :meth:`Dialect.decode`."""

    lines: JsonLines
    rows: Any  # numpy int64 array
    columns: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message shape of a dialect, declared once: recognition (auto-detection) and dispatch
    both walk a dialect's :attr:`Dialect.envelopes` in order and take the first whose
    ``match`` holds, so the two can never classify a document differently.

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


class Dialect:
    """Base class of dialects: runs the decoding skeleton over vendor hooks.

    Subclasses set :attr:`name` and :attr:`capabilities`, and implement :meth:`recognise` and
    :meth:`event`; they override :meth:`document`, :meth:`batch`, :meth:`frame_file`,
    :meth:`schemaless_schema` and :meth:`reassemble` where their format needs it.
    """

    #: Registry name, also the canonical events' ``dialect``.
    name: ClassVar[str] = ""
    #: What the producer can express (declared by every dialect).
    capabilities: ClassVar[Capabilities]
    #: The dialect's message shapes, in the order both recognition and dispatch try them.
    envelopes: ClassVar[tuple[Envelope, ...]] = ()
    #: The vendor type tables (:mod:`cdcflow.types.vendors`) declared column types are read
    #: with, by the source a message names; empty: any of them.
    type_sources: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "capabilities" not in cls.__dict__:
            raise TypeError(f"dialect {cls.__name__} must declare its capabilities")
        for envelope in cls.envelopes:
            if not callable(getattr(cls, envelope.handler, None)):
                raise TypeError(
                    f"dialect {cls.__name__}: envelope {envelope.name!r} names no method "
                    f"{envelope.handler!r}"
                )

    def __init__(self, options: DialectOptions | None = None, *, wire: bool = False) -> None:
        self.options = options or DialectOptions()
        #: Values are produced as wire strings (:func:`cdcflow.types.wire_value`) for Spark
        #: instead of typed Python values.
        self.wire = wire
        #: What one message may hold (``options.extra["limits"]`` overrides the defaults).
        self.limits = Limits.from_options(self.options.extra.get("limits"))
        self._declared: dict[tuple[Any, ...], dict[str, str]] = {}

    # ------------------------------------------------------------------ vendor hooks

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        """How sure (0..1) this dialect is that ``msg`` is one of its messages. ``doc`` is the
        parsed JSON value or Avro record, ``None`` when the message is neither."""
        raise NotImplementedError

    def score(self, msg: RawMessage, doc: Any) -> float:
        """:meth:`recognise`, and for a message that is a JSON array its first element's score
        (a little less sure) when the dialect reads arrays as batches."""
        if not isinstance(doc, list):
            return self.recognise(msg, doc)
        if not doc or not isinstance(doc[0], dict) or self.batch(doc, msg) is None:
            return 0.0
        return 0.9 * self.recognise(msg, doc[0])

    def event(self, doc: Any, item: Item) -> Decoded | list[Decoded]:
        """The canonical event(s) of one item (or a :class:`Segment` of a split message).
        Raises :class:`DecodeError` when the item is unusable."""
        raise NotImplementedError

    def document(self, msg: RawMessage) -> Any:
        """The vendor document of a message: the parsed JSON, or the Avro record."""
        if msg.form == "avro" and msg.avro is not None:
            return msg.avro.value
        if msg.form == "bytes":
            record = self.schemaless(msg)
            if record is not None:
                return record.value
            code = "CORRUPT_AVRO" if transport_of_file(msg.origin) == AVRO else "NOT_JSON"
            raise self.fail(code, "a binary message that is neither JSON nor Avro of this dialect")
        if msg.form != "json":
            raise self.fail("NOT_AN_EVENT", f"{self.name} messages do not travel as {msg.form}")
        return self.parse(msg)

    def batch(self, doc: Any, msg: RawMessage) -> Batch | None:
        """The items of a message holding several (by default a JSON array), else ``None``."""
        return Batch(doc) if isinstance(doc, list) else None

    def frame_file(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """Messages of a file form this dialect owns beyond its transports (e.g. an empty file
        whose name is the message), else ``None``."""
        return None

    def schemaless_schema(self) -> Any:
        """The Avro schema (JSON form) of this dialect's schemaless Avro messages, if any."""
        return None

    def columnar(self, data: bytes) -> Columnar | None:
        """Events of a JSON-lines file read in bulk (Arrow columns of wire strings), for the
        plain shapes of the dialect's messages — the row decoder is the reference: the same
        lines must give the same events; ``None`` when the dialect reads none in bulk."""
        return None

    def reassemble(self, segments: list[bytes], origin: str | None) -> RawMessage:
        """The whole message from the ``raw`` of its segments, in segment order (only for
        :attr:`splits_messages` dialects)."""
        raise NotImplementedError(f"dialect {self.name!r} does not split messages")

    # ------------------------------------------------------------------ the skeleton

    def decode(self, msg: RawMessage) -> list[Decoded]:
        """Canonical events (and rejections of single items, and segments) of one message.

        Raises :class:`DecodeError` when the message as a whole is unusable.
        """
        doc = self.document(msg)
        batch = self.batch(doc, msg)
        if batch is None:
            item = Item(msg, 0, self.lineage(msg))
            try:
                return _as_list(self.event(doc, item))
            except DecodeError as e:
                if item.table is None:
                    raise
                return [self.reject(e.code, e.message, msg.data, table=item.table)]
        base = {**self.lineage(msg), **batch.meta}
        out: list[Decoded] = []
        for i, element in enumerate(batch.items):
            item = Item(msg, i, dict(base))
            try:
                out.extend(_as_list(self.event(element, item)))
            except DecodeError as e:
                message = f"item {i}: {e.message}"
                out.append(self.reject(e.code, message, dumps(element), i, item.table))
        return out

    # ------------------------------------------------------------------ shared helpers

    def parse(self, msg: RawMessage) -> Any:
        """The message's JSON value (exact numbers when the dialect's capabilities say so)."""
        if self.capabilities.exact_numbers:
            if msg.parsed and not has_inexact_numbers(msg.data):
                return msg.doc
            return parse_exact(msg.data, self.limits)
        if not msg.parsed:
            msg.doc = parse(msg.data, self.limits)
            msg.parsed = True
        return msg.doc

    def schemaless(self, msg: RawMessage) -> AvroValue | None:
        """A binary message read as one schemaless Avro record of :meth:`schemaless_schema`
        (cached on the message), or ``None`` when the dialect has no such schema."""
        if msg.avro is not None:
            return msg.avro
        schema = self.schemaless_schema()
        if schema is None:
            return None
        value = avro_transport.read_schemaless(msg.data, schema)
        msg.avro = AvroValue(value, avro_transport.AvroSchema(schema))
        return msg.avro

    def lineage(self, msg: RawMessage) -> dict[str, Any]:
        """Metadata every event of a message carries about its transport: Kafka coordinates
        (``kafka_topic``, ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``), Event
        Hubs Capture coordinates (``eventhubs_*``), Confluent schema ids, the number of
        ``segments`` of a reassembled message."""
        meta: dict[str, Any] = {}
        k = msg.kafka
        if k is not None:
            for name, value in (
                ("topic", k.topic),
                ("partition", k.partition),
                ("offset", k.offset),
                ("timestamp", k.timestamp),
            ):
                if value is not None:
                    meta[f"kafka_{name}"] = value
        c = msg.capture
        if c is not None:
            meta["eventhubs_sequence_number"] = c.sequence_number
            meta["eventhubs_offset"] = c.offset
            meta["eventhubs_enqueued_time"] = c.enqueued_time
        if msg.avro is not None and msg.avro.schema.schema_id is not None:
            meta["schema_id"] = msg.avro.schema.schema_id
        if msg.key_avro is not None and msg.key_avro.schema.schema_id is not None:
            meta["key_schema_id"] = msg.key_avro.schema.schema_id
        if msg.segments is not None:
            meta["segments"] = msg.segments
        return meta

    def make_event(
        self, operation: str, where: Where, order: Order, item: Item, **fields: Any
    ) -> dict[str, Any]:
        """A canonical event of this dialect (see :func:`cdcflow.event.new_event`); its
        ``metadata`` is the item's unless given."""
        database, schema, table = where
        if self.wire and not fields.get("id"):
            # the id hashes the key as its JSON form: the same from wire strings as from values
            key = fields.get("key")
            if key is not None:
                types = fields.get("types") or {}
                key = {c: wire_json(v, types.get(c)) for c, v in key.items()}
            fields["id"] = event_id(self.name, table, key, order.sequence, operation)
        return new_event(
            dialect=self.name,
            operation=operation,
            database=database,
            schema=schema,
            table=table,
            sequence=order.sequence,
            position=order.position,
            timestamp=order.timestamp,
            transaction_id=order.transaction_id,
            metadata=fields.pop("metadata", item.meta),
            **fields,
        )

    def value(self, col: str, value: Any, t: str) -> Any:
        """``value`` read as canonical type ``t`` — typed, or as its wire string in
        :attr:`wire` mode — or ``BAD_VALUE`` naming the column, type and value."""
        try:
            return wire_value(value, t) if self.wire else convert(value, t)
        except ValueError as e:  # ValueTypeError, and the parsers' own ValueErrors
            raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None

    def sequence_of(self, parts: Sequence[sequence.Element], fields: Sequence[str]) -> str:
        """The ``sequence`` of an ordering tuple, ``fields`` naming the message's field each
        element comes from: ``POSITION_OUT_OF_RANGE`` naming the field of a number the
        encoding cannot hold (see :mod:`cdcflow.sequence`)."""
        try:
            return sequence.encode(parts)
        except sequence.OutOfRange as e:
            field = fields[e.index] if e.index < len(fields) else f"element {e.index}"
            raise self.fail("POSITION_OUT_OF_RANGE", f"position field {field!r}: {e}") from None

    def segment_numbers(self, index: int | None, total: int | None) -> None:
        """``SEGMENT_OUT_OF_RANGE`` when a split message's segment index or count is over
        :attr:`~cdcflow.transports.limits.Limits.max_segments` (they size what is held)."""
        limit = self.limits.max_segments
        for what, n in (("index", index), ("count", total)):
            if n is not None and not -limit <= n <= limit:
                raise self.fail(
                    "SEGMENT_OUT_OF_RANGE",
                    f"segment {what} {n} is over the limit of {limit} segments (max_segments)",
                )

    def keep(self, value: Any) -> Any:
        """A value kept as the message has it (no type known): typed, or its wire string."""
        return to_wire(value) if self.wire else value

    def instant(self, value: Any, what: str) -> dt.datetime:
        """An ISO-8601 instant (``BAD_TIMESTAMP`` naming ``what`` when it is not one)."""
        try:
            return parse_timestamp(value)
        except ValueTypeError as e:
            raise self.fail("BAD_TIMESTAMP", f"{what}: {e}") from None

    def declared_types(
        self,
        table: str | None,
        schema: str | None,
        to_canonical: Callable[[str], str],
        *,
        database: str | None = None,
        mapper: str = "",
    ) -> dict[str, str]:
        """Configured column types of a table as canonical types (through ``to_canonical``, the
        source's type table), computed once per table. A type the table cannot read is
        ``BAD_TYPE``. ``mapper`` names ``to_canonical`` in the cache (e.g. the source)."""
        cache_key = (table, schema, database, mapper)
        found = self._declared.get(cache_key)
        if found is not None:
            return found
        declared = self.options.types_for(table, schema, database)
        out: dict[str, str] = {}
        for col, native in declared.items():
            try:
                out[col] = to_canonical(native)
            except ValueTypeError as e:
                raise self.fail(
                    "BAD_TYPE", f"declared type of {table}.{col} ({native!r}): {e}"
                ) from None
        self._declared[cache_key] = out
        return out

    @classmethod
    def declared_type(cls, native: str) -> str:
        """The canonical type a declared column type reads as — checked when a configuration
        is read, before any message: ``ValueTypeError`` with what to declare instead when
        none of the dialect's type tables (:attr:`type_sources`) reads it."""
        sources = cls.type_sources or tuple(vendors())
        first: ValueTypeError | None = None
        for source in sources:
            try:
                return source_type(source, native)
            except ValueTypeError as e:
                first = first or e
        raise ValueTypeError(
            f"no type {cls.name or 'any dialect'} reads: {first} (type tables: "
            f"{', '.join(sources)}); declare a type as the source database names it "
            f"(numeric(10,2), varchar(20), …) or a canonical one ({CANONICAL_TYPES_TEXT})"
        )

    def key_names(
        self, table: str | None, schema: str | None = None, database: str | None = None
    ) -> tuple[str, ...] | None:
        """Configured key columns of a table (``schema.table``, ``table``, then
        ``database.table``)."""
        names = self.options.keys_for(table, schema)
        if names is None and database:
            names = self.options.keys_for(table, database)
        return names or None

    def image_key(
        self,
        names: Sequence[str] | None,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        op: str,
        table: str | None,
        why: str = "",
    ) -> dict[str, Any] | None:
        """The one rule for the key of a row event whose message carries no key of its own: the
        configured key columns' values from the operation's row image (``before`` of a delete,
        ``after`` otherwise; the other image when that one lacks them).

        ``DELETE_WITHOUT_KEY`` for a delete without a before image (the deleted row cannot be
        named; ``why`` adds the producer's reason). ``None`` when no key columns are known (the
        engine infers them from the images or dead-letters the events ``KEY_UNKNOWN``) or no
        image holds them all (a projection, a partial image: the engine judges the key values,
        ``KEY_MISSING``)."""
        if op == "DELETE" and before is None:
            raise self.fail(
                "DELETE_WITHOUT_KEY",
                f"a delete of table {table!r} carries neither a key nor a before image: the "
                f"deleted row cannot be named{why}",
            )
        if not names:
            return None
        for image in (before, after) if op == "DELETE" else (after, before):
            if image is not None and all(n in image for n in names):
                return {n: image[n] for n in names}
        return None

    @staticmethod
    def unnamed_key(values: Sequence[Any], item: Item) -> None:
        """Key values whose column names the message does not give: kept, in primary-key
        order, as wire strings in the item's ``metadata.key_values`` (the event's ``key``
        stays null; names come from configuration or the replica)."""
        item.meta["key_values"] = [to_wire(v) for v in values]

    @staticmethod
    def delivery_order(item: Item, why: str = "delivery") -> str:
        """The delivery-order ``sequence`` (file, offset, item) for a message without a native
        position, noted in the item's metadata as ``sequence_source``."""
        item.meta["sequence_source"] = why
        msg = item.msg
        return sequence.delivery_sequence(msg.origin or "", msg.position, item.number)

    def skip(self, why: str) -> list[Decoded]:
        """No event for a message that carries no change on purpose (a Kafka tombstone, a key
        message, a heartbeat): a :class:`Skipped` saying ``why``, never an error."""
        return [Skipped(why, self.name)]

    def envelope_score(self, doc: Mapping[str, Any]) -> float:
        """Recognition's score of a document: that of the first envelope matching it, else 0."""
        envelope = classify(self.envelopes, doc)
        return envelope.score(doc) if envelope is not None else 0.0

    def dispatch(self, doc: Mapping[str, Any], context: Any) -> Decoded | list[Decoded]:
        """The events of a document, from the handler of the first envelope matching it (in
        the order recognition scores them), else from :meth:`unmatched`."""
        envelope = classify(self.envelopes, doc)
        if envelope is None:
            return self.unmatched(doc, context)
        handler: Callable[[Mapping[str, Any], Any], Decoded | list[Decoded]]
        handler = getattr(self, envelope.handler)
        return handler(doc, context)

    def unmatched(self, doc: Mapping[str, Any], context: Any) -> Decoded | list[Decoded]:
        """A document no envelope matches (by default ``UNKNOWN_ENVELOPE``)."""
        raise self.fail(
            "UNKNOWN_ENVELOPE",
            f"a {self.name} message of none of its shapes (fields {sorted(map(str, doc))[:8]})",
        )

    def reject(
        self,
        code: str,
        message: str,
        raw: bytes,
        item: int | None = None,
        table: str | None = None,
    ) -> Rejection:
        """A rejection attributed to this dialect (``table``: the one the message is about,
        when known)."""
        return Rejection(code, message, raw, item, self.name, table)

    @staticmethod
    def fail(code: str, message: str) -> DecodeError:
        """A decode error with a stable code."""
        return DecodeError(message, code=code)


def present_types(types: Mapping[str, str], *images: Mapping[str, Any] | None) -> dict[str, str]:
    """The types of the columns present in any of the images."""
    return {c: t for c, t in types.items() if any(i is not None and c in i for i in images)}


def _as_list(result: Decoded | list[Decoded]) -> list[Decoded]:
    return result if isinstance(result, list) else [result]
