"""The Debezium decoder: one handler per envelope of :mod:`.envelopes`, ordering per
connector, keys and typed images (types from :mod:`.connect`). See ``docs/dialects/debezium.md``."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import orjson

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.debezium.connect import (
    DECLARE,
    Field,
    as_list,
    avro_fields,
    connect_value,
    declared_canonical,
    declared_field,
    declared_fields,
    ejson,
    json_text,
    schema_fields,
    schemaless_hint,
)
from cdcflow.dialects.debezium.connectors import (
    CONNECTORS,
    ORDER,
    ORDER_FIELDS,
    POSITION_FIELDS,
    REQUIRED,
    SNAPSHOT_READS,
    TYPE_SOURCES,
    connector_of,
    transaction_of,
    ts_ms_instant,
)
from cdcflow.dialects.debezium.ddl import ddl_target
from cdcflow.dialects.debezium.envelopes import (
    MESSAGE_ENVELOPES,
    OPS,
    STATUS,
    schema_name,
    text,
    unwrap,
)
from cdcflow.dialects.model import Capabilities, Decoded, DialectOptions, Item, Order, Where
from cdcflow.errors import DecodeError
from cdcflow.transports.json import kind, parse_exact
from cdcflow.transports.message import RawMessage
from cdcflow.types import ValueTypeError, decimal_text, infer_type

#: PostgreSQL's placeholder for an unchanged TOAST column.
UNAVAILABLE = "__debezium_unavailable_value"
#: The placeholder as text, as base64 text (bytea in JSON) and as bytes (bytea in Avro).
UNAVAILABLE_FORMS = (
    UNAVAILABLE,
    base64.b64encode(UNAVAILABLE.encode()).decode(),
    UNAVAILABLE.encode(),
)


class DebeziumDialect(Dialect):
    """Decoder for Debezium change events."""

    name: ClassVar[str] = "debezium"
    capabilities = Capabilities(orders_events=True, before_images=True, exact_numbers=True)
    envelopes = MESSAGE_ENVELOPES
    type_sources = TYPE_SOURCES

    def __init__(self, options: DialectOptions | None = None, *, wire: bool = False) -> None:
        super().__init__(options, wire=wire)
        self._encoded: dict[tuple[str | None, ...], dict[str, Field]] = {}

    @classmethod
    def declared_type(cls, native: str) -> str:
        """A Debezium or Connect semantic type, an epoch count by its unit, else a type of
        the connectors' databases (see :func:`~.connect.declared_field`)."""
        field = declared_field(native)
        if field is not None:
            return field[0]
        try:
            return super().declared_type(native)
        except ValueTypeError as e:
            raise ValueTypeError(f"{e}; {DECLARE}") from None

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if doc is None:
            return 0.6 if msg.kafka is not None and not msg.data.strip() else 0.0
        if not isinstance(doc, dict):
            return 0.0
        payload = unwrap(doc)[1]
        if not isinstance(payload, dict):
            return 0.9 if payload is None and "schema" in doc else 0.0
        return self.envelope_score(doc)

    def document(self, msg: RawMessage) -> Any:
        if msg.kafka is not None and msg.form == "json" and not msg.data.strip():
            return None  # a Kafka tombstone
        return super().document(msg)

    # ------------------------------------------------------------------ messages

    def event(self, doc: Any, item: Item) -> Decoded | list[Decoded]:
        if doc is None:
            return self.skip("tombstone")
        if not isinstance(doc, dict):
            raise self.fail("NOT_AN_EVENT", f"a Debezium message is an object, got {kind(doc)}")
        payload = unwrap(doc)[1]
        if payload is None:
            return self.skip("tombstone")
        if not isinstance(payload, dict):
            raise self.fail("NOT_AN_EVENT", f"'payload' must be an object, got {kind(payload)}")
        topic = item.msg.kafka.topic if item.msg.kafka is not None else None
        if (topic or "").startswith("__debezium-heartbeat"):
            return self.skip("heartbeat")
        return self.dispatch(doc, item)

    # ------------------------------------------------------------------ envelopes

    def _heartbeat(self, doc: Mapping[str, Any], item: Item) -> list[Decoded]:
        return self.skip("heartbeat")

    def _key_message(self, doc: Mapping[str, Any], item: Item) -> list[Decoded]:
        return self.skip("key")

    def _source_without_op(self, doc: Mapping[str, Any], item: Item) -> Decoded:
        raise self.fail(
            "NOT_AN_EVENT",
            "not a Debezium change event: it has 'source' but no 'op' (an envelope names "
            "its operation in 'op'; a flattened row has neither)",
        )

    def _change(self, doc: Mapping[str, Any], item: Item) -> Decoded | list[Decoded]:
        """A change event: ``op``, ``source``, ``before``/``after``."""
        schema, payload = unwrap(doc)
        name = schema_name(doc)
        op = text(payload.get("op"))
        if op == "m":
            return self.skip("message")
        if op not in OPS and op != "t":
            raise self.fail("UNKNOWN_OPERATION", f"op {op!r} is not one of c, u, d, r, t, m")
        source = payload.get("source")
        if not isinstance(source, dict):
            raise self.fail("BAD_SOURCE", f"'source' must be an object, got {kind(source)}")
        parts = name.split(".")
        if not (source.get("table") or source.get("collection")) and name.endswith(".Envelope"):
            if len(parts) >= 3:
                # Oracle's source names no table: the envelope is <prefix>.<schema>.<table>.Envelope
                source = {**source, "schema": source.get("schema") or parts[-3], "table": parts[-2]}
        avro = item.msg.avro
        fields = avro.schema.memo("debezium", avro_fields) if avro else schema_fields(schema)
        return self._row(op, payload, source, fields, item)

    def _row(
        self,
        op: str,
        payload: Mapping[str, Any],
        src: Mapping[str, Any],
        fields: Mapping[str, Field],
        item: Item,
    ) -> Decoded | list[Decoded]:
        connector = connector_of(src)
        where = self._where(src, item)
        order = self._order(connector, src, payload, item)
        if op == "t":
            return self.make_event(
                "TRUNCATE", where, order, item, source=CONNECTORS.get(connector or "")
            )
        if op == "r" and str(src.get("snapshot", "")).lower() == "last" and order.transaction_id:
            row = self._row_event(op, payload, where, order, fields, connector, item)
            return [row, self._snapshot_commit(order, item)]
        return self._row_event(op, payload, where, order, fields, connector, item)

    def _snapshot_commit(self, order: Order, item: Item) -> Decoded:
        """The ``COMMIT`` of an initial snapshot, after its last read: with ``consistency:
        transactions`` no replica shows a snapshot half read."""
        marker = Item(item.msg, item.number, self.lineage(item.msg))
        marker.meta["snapshot"] = True
        commit = Order(self.delivery_order(marker), order.position, order.timestamp,
                       order.transaction_id)  # fmt: skip
        return self.make_event("COMMIT", (None, None, None), commit, marker)

    def _row_event(
        self,
        op: str,
        payload: Mapping[str, Any],
        where: Where,
        order: Order,
        fields: Mapping[str, Field],
        connector: str | None,
        item: Item,
    ) -> Decoded:
        before, after = payload.get("before"), payload.get("after")
        if connector == "mongodb":
            before, after = _mongo(before, "before"), _mongo(after, "after")
            patch = payload.get("updateDescription")
            if after is None and op == "u" and isinstance(patch, dict):
                after = _mongo(patch.get("updatedFields"), "updateDescription") or {}
                removed = as_list(patch.get("removedFields"))
                after.update(dict.fromkeys(str(f) for f in removed if f is not None))
                item.meta["patch"] = True
        for what, image in (("before", before), ("after", after)):
            if image is not None and not isinstance(image, dict):
                raise self.fail("BAD_IMAGE", f"'{what}' must be an object, got {kind(image)}")
        return self._image_event(OPS[op], where, order, before, after, fields, connector, item)

    def _image_event(
        self,
        op: str,
        where: Where,
        order: Order,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        fields: Mapping[str, Field],
        connector: str | None,
        item: Item,
    ) -> Decoded:
        database, schema, table = where
        source = CONNECTORS.get(connector or "")
        declared = self.declared_types(
            table, schema, lambda n: declared_canonical(source or "postgres", n), database=database,
            mapper=source or "",
        )  # fmt: skip
        encodings = self._encoded.get((table, schema, database))
        if encodings is None:
            declared_here = self.options.types_for(table, schema, database)
            encodings = self._encoded[table, schema, database] = declared_fields(declared_here)
        if encodings:
            # a message's schema that names a column's semantic type says how it was sent
            named = {c: f for c, f in fields.items() if f[1]}
            fields = {**fields, **{c: e for c, e in encodings.items() if c not in named}}
        types: dict[str, str] = {}
        unavailable: list[str] = []
        mismatch: list[str] = []
        typed_before = self._typed(before, fields, declared, types, unavailable, mismatch)
        typed_after = self._typed(after, fields, declared, types, unavailable, mismatch)
        if mismatch and item.msg.avro is None:  # Avro decodes its decimals itself
            item.meta["payload_disagrees_with_schema"] = sorted(set(mismatch))
        partial = bool(unavailable) or bool(item.meta.get("patch"))
        if unavailable:
            item.meta["unavailable_columns"] = sorted(set(unavailable))
        key = self._key(where, connector, op, typed_before, typed_after, types, item)
        if partial and typed_after is not None and key is not None:
            typed_after = {**key, **typed_after}
        return self.make_event(
            op, where, order, item, source=source, key=key, before=typed_before,
            after=typed_after, partial=partial and op != "DELETE", types=types,
        )  # fmt: skip

    def _flattened(self, doc: Mapping[str, Any], item: Item) -> Decoded:
        """An ``ExtractNewRecordState`` row: columns plus ``__``-prefixed metadata."""
        schema, row = unwrap(doc)
        meta = {k[2:]: row.pop(k) for k in list(row) if isinstance(k, str) and k.startswith("__")}
        src = {k.removeprefix("source_"): v for k, v in meta.items() if k != "op"}
        deleted = str(meta.get("deleted", "")).lower() == "true"
        op = "d" if deleted else text(meta.get("op"))
        if op is None and "deleted" in meta:
            op = "UPSERT"  # rewrite mode without __op: the row exists, insert or update
        elif op is None:
            op = self.options.extra.get("operation")
            if op not in ("INSERT", "UPSERT", "SNAPSHOT"):
                if not meta and not schema_name(doc).endswith(".Value"):
                    # nothing of Debezium's in it: not a row that lacks its operation
                    raise self.fail(
                        "NOT_AN_EVENT",
                        f"not a change event of {self.name}: an object without 'op' and without "
                        f"the '__' fields of a flattened row (fields {sorted(map(str, row))[:8]}); "
                        "rows flattened by ExtractNewRecordState without add.fields are read "
                        "with the source option operation (INSERT, UPSERT or SNAPSHOT)",
                    )
                raise self.fail(
                    "OPERATION_UNKNOWN",
                    "a flattened row without __op or __deleted: add 'op' to the transform's "
                    "add.fields, or set the source option operation (INSERT, UPSERT or SNAPSHOT)",
                )
        elif op in ("m", "t") or op not in OPS:
            raise self.fail("UNKNOWN_OPERATION", f"__op {op!r} is not one of c, u, d, r")
        else:
            op = OPS[op]
        item.meta["flattened"] = True
        connector = connector_of(src)
        where = self._where(src, item)
        order = self._order(connector, src, src, item)
        before, after = (row, None) if op == "DELETE" else (None, row)
        fields = schema_fields(schema)
        return self._image_event(op, where, order, before, after, fields, connector, item)

    def _marker(self, message: Mapping[str, Any], item: Item) -> Decoded:
        doc = unwrap(message)[1]
        op = STATUS[str(doc["status"])]
        collections = doc.get("data_collections")
        if op == "COMMIT":
            item.meta["event_count"] = doc.get("event_count")
            if isinstance(collections, list):
                item.meta["data_collections"] = {
                    str(c.get("data_collection")): c.get("event_count")
                    for c in collections
                    if isinstance(c, dict)
                }
        ts = ts_ms_instant(doc.get("ts_ms"))
        txid, position = transaction_of(doc.get("id"), item)
        order = Order(self.delivery_order(item), position, ts, txid)
        return self.make_event(op, (None, None, None), order, item)

    def _schema_change(self, message: Mapping[str, Any], item: Item) -> Decoded | list[Decoded]:
        doc = unwrap(message)[1]
        record = doc.get("historyRecord")
        if isinstance(record, str):
            try:
                record = parse_exact(record.encode())
            except DecodeError:
                raise self.fail("BAD_DDL", "historyRecord is not JSON text") from None
        body = {**doc, **record} if isinstance(record, dict) else doc
        ddl = body.get("ddl")
        found = doc.get("source")
        src: Mapping[str, Any] = found if isinstance(found, dict) else {}
        connector = connector_of(src)
        ident, ddl_type, types = ddl_target(body, CONNECTORS.get(connector or "", "mysql"))
        if not ident:
            return self.skip("schema_change")
        database = (
            body.get("databaseName") or src.get("db") or (ident[0] if len(ident) > 1 else None)
        )
        schema = body.get("schemaName") or (ident[-2] if len(ident) == 3 else None)
        where = (text(database), text(schema), ident[-1])
        order = self._order(connector, src, doc, item)
        return self.make_event(
            "DDL", where, order, item, source=CONNECTORS.get(connector or ""),
            ddl_type=ddl_type, ddl_command=text(ddl), types=types,
        )  # fmt: skip

    # ------------------------------------------------------------------ fields

    def _where(self, src: Mapping[str, Any], item: Item) -> Where:
        table = src.get("table") or src.get("collection")
        if not table and item.msg.kafka is not None and item.msg.kafka.topic:
            table = item.msg.kafka.topic.rsplit(".", 1)[-1]
        table = table or self.options.extra.get("table")
        if not isinstance(table, str) or not table:
            raise self.fail(
                "MISSING_TABLE",
                "no source.table, Kafka topic or source option table names the table",
            )
        schema = src.get("schema")
        item.table = table
        return text(src.get("db")), text(schema), table

    def _order(
        self, connector: str | None, src: Mapping[str, Any], payload: Mapping[str, Any], item: Item
    ) -> Order:
        position = {k: src[k] for k in POSITION_FIELDS if src.get(k) is not None}
        ts = ts_ms_instant(src.get("ts_ms") or payload.get("ts_ms"))
        tx = payload.get("transaction")
        txid = transaction_of(tx.get("id"), item)[0] if isinstance(tx, dict) else None
        native = ORDER.get(connector or "")
        if native is None or not any(src.get(f) for f in REQUIRED[connector or ""]):
            return Order(self.delivery_order(item), position or None, ts, txid)
        try:
            parts = native(src)
        except (ValueError, TypeError) as e:
            raise self.fail("BAD_POSITION", f"{connector} source position: {e}") from None
        # snapshot reads sort below streamed changes of the same key
        snapshot = str(src.get("snapshot", "false")).lower() in SNAPSHOT_READS
        if snapshot and txid is None and payload.get("op") == "r":
            # the snapshot's position names it: one started again after a crash is another
            txid = "snapshot:" + ":".join(str(p) for p in parts)
        item.meta["sequence_source"] = f"source.{connector}"
        fields = ORDER_FIELDS[connector or ""]
        if connector == "postgresql" and not src.get("sequence"):
            fields = ("lsn", "lsn")
        seq = self.sequence_of(
            (0 if snapshot else 1, *parts), ["source.snapshot", *(f"source.{f}" for f in fields)]
        )
        return Order(seq, position or None, ts, txid)

    def _typed(
        self,
        image: Mapping[str, Any] | None,
        fields: Mapping[str, Field],
        declared: Mapping[str, str],
        types: dict[str, str],
        unavailable: list[str],
        mismatch: list[str],
    ) -> dict[str, Any] | None:
        if image is None:
            return None
        out: dict[str, Any] = {}
        for col, v in image.items():
            col = str(col)
            if (isinstance(v, str | bytes) and v in UNAVAILABLE_FORMS) or (
                isinstance(v, list) and UNAVAILABLE in v
            ):
                unavailable.append(col)
                continue
            field = fields.get(col)
            # a declared type wins over the schema's (an unconstrained numeric kept as text)
            t = declared.get(col) or (field[0] if field is not None else None)
            if t is None:
                t = "timestamp" if isinstance(v, dt.datetime) else infer_type(v)
                if t is not None:
                    types.setdefault(col, t)
                out[col] = self.keep(json_text(v) if isinstance(v, dict | list) else v)
                continue
            types.setdefault(col, t)
            if field is not None and field[2] == "bytes" and not isinstance(v, str | None):
                # the payload disagrees with its schema (a number where bytes are declared):
                # the value is taken as written
                mismatch.append(col)
            try:
                connect = connect_value(v, field, field[0] if field is not None else t)
            except (ValueError, ArithmeticError) as e:  # bad base64, a date out of range
                raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None
            if isinstance(connect, Decimal) and t == "string":
                connect = decimal_text(connect)
            try:
                out[col] = self.value(col, connect, t)
            except DecodeError as e:
                if field is not None:
                    raise
                raise self.fail(e.code, e.message + schemaless_hint(t, v)) from None
        return out

    def _key(
        self,
        where: Where,
        connector: str | None,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        types: dict[str, str],
        item: Item,
    ) -> dict[str, Any] | None:
        database, schema, table = where
        kafka_key = self._kafka_key(item)
        if kafka_key is not None:
            fields = schema_fields(kafka_key[0])
            values = kafka_key[1]
            if connector == "mongodb" and set(values) == {"id"}:
                raw = values["id"]
                try:
                    values = {"_id": ejson(orjson.loads(raw)) if isinstance(raw, str) else raw}
                except orjson.JSONDecodeError:
                    raise self.fail(
                        "BAD_KEY", "the MongoDB key's id is not Extended JSON"
                    ) from None
            key: dict[str, Any] = {}
            for col, v in values.items():
                t = fields[col][0] if col in fields else types.get(col) or infer_type(v)
                if t is None:
                    key[col] = self.keep(v)
                    continue
                try:
                    connect = connect_value(v, fields.get(col), t)
                except (ValueError, ArithmeticError) as e:
                    raise self.fail("BAD_KEY", f"key column {col!r} ({t}): {e}") from None
                key[col] = self.value(col, connect, t)
            return key
        names = self.key_names(table, schema, database)
        if names is None and connector == "mongodb":
            names = ("_id",)
        return self.image_key(
            names,
            before,
            after,
            op,
            table,
            " (REPLICA IDENTITY DEFAULT or no pre-images, and no Kafka key: read the topic with "
            "its keys)",
        )

    def _kafka_key(self, item: Item) -> tuple[Any, dict[str, Any]] | None:
        msg = item.msg
        if msg.key_avro is not None and isinstance(msg.key_avro.value, dict):
            return None, dict(msg.key_avro.value)
        if not msg.key or msg.key.strip() in (b"", b"null"):
            return None
        try:
            doc = parse_exact(msg.key)
        except DecodeError:
            raise self.fail("BAD_KEY", "the Kafka key is not JSON") from None
        schema, payload = unwrap(doc) if isinstance(doc, dict) else (None, doc)
        if not isinstance(payload, dict):
            raise self.fail("BAD_KEY", f"a Debezium key is an object, got {kind(payload)}")
        return schema, payload


# ---------------------------------------------------------------------- helpers


def _mongo(image: Any, what: str) -> dict[str, Any] | None:
    """A MongoDB image (Extended JSON text, or an object) → plain values; nested documents and
    arrays as JSON text."""
    if image is None:
        return None
    if isinstance(image, str):
        try:
            image = orjson.loads(image)
        except orjson.JSONDecodeError:
            raise Dialect.fail("BAD_IMAGE", f"'{what}' is not Extended JSON text") from None
    if not isinstance(image, dict):
        raise Dialect.fail("BAD_IMAGE", f"'{what}' must be a document, got {kind(image)}")
    out = ejson(image)
    return {k: json_text(v) if isinstance(v, dict | list) else v for k, v in out.items()}
