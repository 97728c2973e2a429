"""The dialect base: the skeleton every dialect runs, and the methods vendor modules share.

A dialect module holds vendor knowledge only — how its messages are recognised, where the
table, key, row images and position live, its operation map, its ordering tuple, how split
messages are joined. Everything else is here: reading the message's document from whatever
transport carried it, the per-item loop of batch messages with one rejection per bad item,
typed (or wire) values with ``BAD_VALUE`` errors, declared column types, key resolution, the
delivery-order fallback, lineage metadata from the transport. The data it trades in (options,
items, orders, rejections, envelopes, capabilities) is :mod:`cdcflow.dialects.model`; plain
helpers more than one vendor module needs are :mod:`cdcflow.dialects.common`.

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
from typing import Any, ClassVar

from cdcflow import sequence
from cdcflow.dialects.model import (
    Batch,
    Capabilities,
    Columnar,
    Decoded,
    DialectOptions,
    Envelope,
    Item,
    Order,
    Rejection,
    Skipped,
    Where,
    classify,
)
from cdcflow.errors import DecodeError
from cdcflow.event import event_id, new_event
from cdcflow.transports import AVRO, transport_of_file
from cdcflow.transports import avro as avro_transport
from cdcflow.transports.json import dumps, has_inexact_numbers, parse, parse_exact
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

__all__ = ["Dialect"]


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


def _as_list(result: Decoded | list[Decoded]) -> list[Decoded]:
    return result if isinstance(result, list) else [result]
