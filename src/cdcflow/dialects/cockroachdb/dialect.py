"""The CockroachDB changefeed decoder: one handler per envelope of :mod:`.envelopes`, each
ending in the row event of :mod:`.rows`. See ``docs/dialects/cockroachdb.md``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from cdcflow import positions
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.cockroachdb.context import (
    Context,
    RowChange,
    Where,
    hlc_field,
    json_text,
    message_context,
    wall_time,
)
from cdcflow.dialects.cockroachdb.envelopes import (
    ENRICHED_OPS,
    MESSAGE_ENVELOPES,
    SOURCE_METADATA,
    WRAPPED_FIELDS,
    Console,
    console_line,
    score,
    sinkless,
)
from cdcflow.dialects.cockroachdb.names import parse_object_name, split_topic
from cdcflow.dialects.cockroachdb.rows import row_event, short
from cdcflow.dialects.cockroachdb.types import (
    avro_record_body,
    avro_record_name,
    enriched_schema_types,
    unwrap,
)
from cdcflow.dialects.model import BASE_TRANSPORTS, Batch, Capabilities, Decoded, Item, Order
from cdcflow.errors import DecodeError
from cdcflow.transports import CSV
from cdcflow.transports.json import kind
from cdcflow.transports.message import CsvRow, RawMessage

#: What changefeed messages can express.
CAPABILITIES = Capabilities(
    orders_events=True,
    before_images=True,
    exact_numbers=True,
    transports=BASE_TRANSPORTS | {CSV},
)


class CockroachDbDialect(Dialect):
    """Decoder for CockroachDB changefeed messages."""

    name: ClassVar[str] = "cockroachdb"
    capabilities = CAPABILITIES
    envelopes = MESSAGE_ENVELOPES
    type_sources = ("cockroachdb",)

    # ------------------------------------------------------------------ files

    def frame_file(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """An empty ``<timestamp>.RESOLVED`` file: the resolved message its name carries."""
        if data.strip() or not (origin or "").lower().endswith(".resolved"):
            return None
        parsed = parse_object_name(origin or "")
        if parsed is None or not parsed["resolved"]:
            return None
        wall, logical = parsed["hlc"]
        doc = {"resolved": f"{wall}.{logical:010d}"}
        return [RawMessage(data=orjson.dumps(doc), origin=origin, doc=doc, parsed=True)]

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.form == "csv":
            return 1.0
        if isinstance(doc, dict):
            found = score(doc)
            if found:
                return found
            if msg.key is not None and msg.key.lstrip()[:1] == b"[":
                return 0.6  # a row next to a key array (envelope=row over Kafka)
            return 0.5 if msg.avro is not None and msg.avro.schema.schema_id is not None else 0.0
        if doc is not None or msg.form != "json":
            return 0.0
        if msg.kafka is not None and not msg.data.strip():
            # a tombstone: a key without a value
            return 0.7 if (msg.key or b"").lstrip()[:1] == b"[" else 0.0
        try:
            text = msg.data.decode("utf-8")
        except UnicodeDecodeError:
            return 0.0
        console = console_line(text)
        if console is not None:
            return 0.8 if console[1] is None or isinstance(console[1], dict) else 0.0
        return 0.0

    # ------------------------------------------------------------------ documents

    def document(self, msg: RawMessage) -> Any:
        if msg.form == "csv":
            return msg.csv
        if msg.form != "json":
            return super().document(msg)
        if msg.kafka is not None and not msg.data.strip():
            return None  # a tombstone
        try:
            return self.parse(msg)
        except DecodeError as problem:
            if problem.code == "BAD_UTF8":
                raise
            console = console_line(msg.data.decode("utf-8", "replace"))
            if console is None:
                raise
            return Console(*console)

    def batch(self, doc: Any, msg: RawMessage) -> Batch | None:
        """A webhook body ``{"payload": [...], "length": N}``: one item per message."""
        if not isinstance(doc, dict):
            return None
        payload = doc.get("payload")
        if not isinstance(payload, list) or not set(doc) <= {"payload", "length"}:
            return None
        length = doc.get("length")
        if "length" in doc and (
            isinstance(length, bool) or not isinstance(length, int) or length != len(payload)
        ):
            raise self.fail(
                "LENGTH_MISMATCH",
                f"webhook body says length={length!r} but carries {len(payload)} message(s)",
            )
        return Batch(payload, {"webhook_length": len(payload)})

    # ------------------------------------------------------------------ message shapes

    def event(self, doc: Any, item: Item) -> Decoded | list[Decoded]:
        ctx = message_context(item)
        if isinstance(doc, CsvRow):
            return self._csv_row(doc, ctx)
        if isinstance(doc, Console):
            ctx.key, ctx.transport = doc.key, True
            if doc.value is None:
                return self._empty_value(ctx)
            doc = doc.value
        if doc is None:
            return self._empty_value(ctx)
        if isinstance(doc, list):
            raise self.fail(
                "KEY_ONLY_ENVELOPE",
                "a bare key array: envelope=key_only output says only that the row with this "
                "key changed (no values, inserts and deletes alike): it cannot be applied",
            )
        if not isinstance(doc, dict):
            if item.msg.index is not None:
                raise self.fail(
                    "KEY_ONLY_ENVELOPE",
                    f"element {item.msg.index} of a top-level JSON array ({kind(doc)}): a "
                    "key_only key array cannot be applied",
                )
            raise self.fail(
                "NOT_AN_EVENT", f"a changefeed message is a JSON object, got {kind(doc)}"
            )
        return self.dispatch(doc, ctx)

    # ------------------------------------------------------------------ envelopes

    def _enriched_with_schema(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        """The enriched envelope with its Connect-style ``schema`` beside the ``payload``."""
        ctx.avro_types = {**enriched_schema_types(doc["schema"]), **ctx.avro_types}
        return self._enriched_event(doc["payload"], ctx)

    def _sinkless_message(self, doc: Mapping[str, Any], ctx: Context) -> Decoded | list[Decoded]:
        """A sinkless row; over a transport (which carries key and topic) a ``row`` message."""
        found = sinkless(doc)
        if ctx.transport or found is None:
            return self.unmatched(doc, ctx)
        return self._sinkless_row(found, ctx)

    def _resolved_message(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        return self._resolved(unwrap(doc["resolved"]), ctx, "resolved")

    def _bare_resolved(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        return self._resolved(unwrap(doc["__crdb__"]["resolved"]), ctx, "__crdb__.resolved")

    def _bare_message(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        return self._bare(doc, doc["__crdb__"], ctx)

    def _nested_webhook(self, doc: Mapping[str, Any], ctx: Context) -> Decoded | list[Decoded]:
        """A webhook body inside a message: read as no envelope (batches are split before)."""
        return self.unmatched(doc, ctx)

    def unmatched(self, doc: Mapping[str, Any], ctx: Any) -> Decoded | list[Decoded]:
        """A JSON object of no envelope: an ``envelope=row`` message when a key travels with it
        or the source option says so, else ``UNKNOWN_ENVELOPE`` (and for row images beside
        fields no changefeed option writes, unless the option says ``row``)."""
        envelope = self._envelope(None)
        if envelope in ("row", "bare"):
            return self._bare(doc, {}, ctx, envelope="row")
        if "after" in doc or "before" in doc:
            other = sorted(map(str, doc.keys() - WRAPPED_FIELDS))
            raise self.fail(
                "UNKNOWN_ENVELOPE",
                f"after/before beside fields no changefeed option writes ({other[:8]}): not a "
                "wrapped message",
            )
        if ctx.key is not None:
            return self._bare(doc, {}, ctx, envelope="row")
        raise self.fail(
            "UNKNOWN_ENVELOPE",
            "a JSON object with none of after/before, __crdb__, payload, resolved, op or a "
            "transport key: if the feed uses envelope=row (or is a CDC query's own shape), set "
            "the source option envelope: row — deletes are then not delivered and stay in the "
            "replica",
        )

    def _sinkless_row(self, row: Mapping[str, Any], ctx: Context) -> Decoded | list[Decoded]:
        """A sinkless row ``{key, table, value}`` (JSON, or a CSV line of such output)."""
        ctx.transport = True
        table = row.get("table")
        ctx.topic = table if isinstance(table, str) and table else None
        ctx.meta["sinkless_table"] = table
        key = row.get("key")
        ctx.key = json_text(key, "key") if isinstance(key, str) and key.strip() else key
        value = row.get("value")
        if isinstance(value, str):
            value = json_text(value, "value") if value.strip() else None
        if value is None:
            return self._empty_value(ctx)
        if not isinstance(value, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a changefeed message is a JSON object, got {kind(value)}"
            )
        return self.dispatch(value, ctx)

    def _empty_value(self, ctx: Context) -> Decoded:
        """A key without a value: a delete under envelope row/bare, else key_only output."""
        if ctx.key is None:
            raise self.fail("NOT_AN_EVENT", "a record with neither key nor value")
        table = self._table_hint(ctx)
        envelope = self._envelope(table)
        if envelope not in ("row", "bare"):
            raise self.fail(
                "KEY_ONLY_ENVELOPE",
                f"key {short(ctx.key)} without a value: envelope=key_only output (no values; "
                "inserts and deletes look the same) cannot be applied; if the feed uses "
                "envelope=row or bare, set the source option envelope so an empty value reads "
                "as a delete",
            )
        where = self._where(None, ctx)
        return row_event(self, RowChange(where, "DELETE", key_value=ctx.key), ctx)

    def _wrapped(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        after = avro_record_body(doc.get("after"))
        before = avro_record_body(doc.get("before"))
        record_name = avro_record_name(doc.get("after")) or avro_record_name(doc.get("before"))
        if record_name and not ctx.topic:
            ctx.topic = record_name.removesuffix("_before")
        if after is not None and not isinstance(after, dict):
            raise self.fail("BAD_ROW", f"'after' must be an object or null, got {kind(after)}")
        if before is not None and not isinstance(before, dict):
            raise self.fail("BAD_ROW", f"'before' must be an object or null, got {kind(before)}")
        if after is None:
            op = "DELETE"
        elif "before" in doc:
            op = "INSERT" if before is None else "UPDATE"
        else:
            op = "UPSERT"
        topic = doc.get("topic", doc.get("topic:"))
        where = self._where(topic if isinstance(topic, str) else None, ctx)
        key = doc.get("key", ctx.key)
        hlc, source = hlc_field(doc)
        meta: dict[str, Any] = {"envelope": "wrapped", "diff": "before" in doc}
        if "after" not in doc:
            meta["delete_form"] = "before_only" if before is not None else "key_only"
        change = RowChange(
            where,
            op,
            before,
            after,
            hlc=hlc,
            hlc_source=source,
            key_value=unwrap(key) if key is not None else None,
            extra=meta,
            mvcc=unwrap(doc.get("mvcc_timestamp")),
        )
        return row_event(self, change, ctx)

    def _bare(
        self, doc: Mapping[str, Any], crdb: Mapping[str, Any], ctx: Context, envelope: str = "bare"
    ) -> Decoded:
        row = {k: v for k, v in doc.items() if k != "__crdb__"}
        topic = crdb.get("topic")
        where = self._where(topic if isinstance(topic, str) else None, ctx)
        key = crdb.get("key", ctx.key)
        hlc, source = hlc_field(crdb)
        if not row:
            if key is None:
                raise self.fail("NOT_AN_EVENT", "a bare message with no columns and no key")
            if self._envelope(where[2]) not in ("row", "bare"):
                raise self.fail(
                    "KEY_ONLY_ENVELOPE",
                    "a bare/row message without columns: a delete only when the source option "
                    "envelope says row or bare; as key_only output it cannot be applied",
                )
            op, after = "DELETE", None
        else:
            op, after = "UPSERT", row
        change = RowChange(
            where,
            op,
            None,
            after,
            hlc=hlc,
            hlc_source=source,
            key_value=key,
            extra={"envelope": "bare" if crdb else envelope},
            mvcc=crdb.get("mvcc_timestamp"),
        )
        return row_event(self, change, ctx)

    def _enriched_event(self, doc: Mapping[str, Any], ctx: Context) -> Decoded:
        op_raw = doc.get("op")
        if not isinstance(op_raw, str) or op_raw not in ENRICHED_OPS:
            raise self.fail("UNKNOWN_OP", f"enriched 'op' must be c, u or d, got {op_raw!r}")
        op = ENRICHED_OPS[op_raw]
        source = doc.get("source")
        source = source if isinstance(source, dict) else {}
        after, before = doc.get("after"), doc.get("before")
        if op != "DELETE" and not isinstance(after, dict):
            raise self.fail("BAD_ROW", f"enriched op {op_raw!r} needs an 'after' object")
        if before is not None and not isinstance(before, dict):
            raise self.fail("BAD_ROW", f"'before' must be an object or null, got {kind(before)}")
        topic: str | None = None
        table = source.get("table_name")
        if isinstance(table, str) and table:
            parts = [source.get("database_name"), source.get("schema_name"), table]
            topic = ".".join(str(p) for p in parts) if all(parts) else table
        where = self._where(topic, ctx)
        names = source.get("primary_keys")
        hlc: Any = None
        hlc_source: str | None = None
        for found, src in (
            (doc.get("updated"), "updated"),
            (source.get("ts_hlc"), "ts_hlc"),
            (source.get("mvcc_timestamp"), "mvcc_timestamp"),
            (doc.get("mvcc_timestamp"), "mvcc_timestamp"),
        ):
            if found is not None:
                hlc, hlc_source = found, src
                break
        meta: dict[str, Any] = {"envelope": "enriched", "op": op_raw}
        meta.update({k: source[k] for k in SOURCE_METADATA if source.get(k) not in (None, "")})
        if doc.get("ts_ns") is not None:
            meta["ts_ns"] = doc["ts_ns"]
        commit_ns = source.get("ts_ns")
        change = RowChange(
            where,
            op,
            before if isinstance(before, dict) else None,
            after if op != "DELETE" else None,
            hlc=hlc,
            hlc_source=hlc_source,
            key_value=doc.get("key", ctx.key),
            key_names=tuple(names)
            if isinstance(names, list) and all(isinstance(n, str) for n in names)
            else None,
            extra=meta,
            commit_ns=commit_ns if isinstance(commit_ns, int) else None,
        )
        return row_event(self, change, ctx)

    def _resolved(self, value: Any, ctx: Context, form: str) -> Decoded:
        try:
            wall, logical = positions.crdb_hlc_decimal(value)
        except ValueError as e:
            raise self.fail("BAD_HLC", f"resolved timestamp: {e}") from None
        hlc = f"{wall}.{logical:010d}"
        meta = ctx.meta
        meta["resolved_form"] = form
        topic = ctx.topic
        origin = ctx.msg.origin
        if origin:
            parsed = parse_object_name(origin)
            if parsed is not None and parsed["resolved"]:
                meta["resolved_file"] = True
        if topic:
            meta["topic"] = topic
        if ctx.partition is not None:
            meta["partition"] = ctx.partition
        ident = (
            f"crdb-resolved:{topic or ''}:{'' if ctx.partition is None else ctx.partition}:{hlc}"
        )
        seq = self.sequence_of((wall, logical), ("resolved", "resolved"))
        order = Order(seq, {"hlc": hlc, "resolved": hlc})
        return self.make_event(
            "RESOLVED",
            (None, None, None),
            order._replace(timestamp=wall_time(wall)),
            ctx.item,
            id=ident,
            source="cockroachdb",
        )

    def _csv_row(self, row: CsvRow, ctx: Context) -> Decoded | list[Decoded]:
        """A ``format=csv`` initial-scan row (no header; columns from ``csv_columns``), or a
        line of sinkless ``table,key,value`` output (with that header)."""
        if [c.strip().lower() for c in row.first] == ["table", "key", "value"]:
            if row.number == 0:
                return []
            if len(row.values) != 3:
                raise self.fail(
                    "CSV_COLUMN_COUNT",
                    f"sinkless CSV row {row.number + 1} has {len(row.values)} fields, expected 3 "
                    "(table,key,value)",
                )
            table, key, value = row.values
            return self._sinkless_row({"table": table, "key": key, "value": value}, ctx)
        origin = ctx.msg.origin or ""
        named = parse_object_name(origin)
        columns_by_table = self.options.extra.get("csv_columns") or {}
        if not isinstance(columns_by_table, Mapping):
            raise self.fail("BAD_OPTION", "source option csv_columns must map table → columns")
        topic = named["topic"] if named and named.get("topic") else None
        table_opt = self.options.extra.get("table")
        if topic is None and isinstance(table_opt, str):
            topic = table_opt
        if topic is None and len(columns_by_table) == 1:
            topic = next(iter(columns_by_table))
        if topic is None:
            raise self.fail(
                "MISSING_TABLE",
                "a CSV row names no table: name the file as the cloud-storage sink does, or set "
                "the source option table",
            )
        where = self._where(topic, ctx)
        columns = columns_by_table.get(topic, columns_by_table.get(where[2]))
        if not isinstance(columns, list | tuple) or not columns:
            raise self.fail(
                "CSV_COLUMNS_UNKNOWN",
                f"CSV rows carry no column names: set csv_columns: {{{where[2]}: [...]}} in the "
                "source options",
            )
        if len(row.values) != len(columns):
            raise self.fail(
                "CSV_COLUMN_COUNT",
                f"CSV row has {len(row.values)} field(s); table {where[2]!r} is configured with "
                f"{len(columns)} column(s) {list(columns)}",
            )
        # an empty field is NULL
        values = {
            str(c): (v if v != "" else None) for c, v in zip(columns, row.values, strict=True)
        }
        hlc: Any = None
        if named is not None:
            wall, logical = named["hlc"]
            hlc = f"{wall}.{logical:010d}"
        change = RowChange(
            where,
            "SNAPSHOT",
            None,
            values,
            hlc=hlc,
            hlc_source="file_name" if hlc else None,
            extra={"envelope": "csv"},
            text_values=True,
        )
        return row_event(self, change, ctx)

    # ------------------------------------------------------------------ options and table

    def _envelope(self, table: str | None) -> str:
        opt = self.options.extra.get("envelope", "auto")
        if isinstance(opt, Mapping):
            value = opt.get(table or "", opt.get("*", "auto"))
        else:
            value = opt
        return str(value or "auto").lower()

    def _table_hint(self, ctx: Context) -> str | None:
        try:
            return self._where(None, ctx)[2]
        except DecodeError:
            return None

    def _where(self, topic: str | None, ctx: Context) -> Where:
        """(database, schema, table, family, topic) of a message, from the first that names
        it: the message, the transport, the file name, the source option ``table``."""
        found = topic or ctx.topic
        if not found and ctx.msg.origin:
            named = parse_object_name(ctx.msg.origin)
            if named is not None and named.get("topic"):
                found = named["topic"]
                ctx.meta.setdefault("file_timestamp", named["timestamp"])
                ctx.meta.setdefault("schema_id", named["schema_id"])
        if not found:
            opt = self.options.extra.get("table")
            if isinstance(opt, str) and opt:
                found = opt
        if not found:
            raise self.fail(
                "MISSING_TABLE",
                "no topic in the message, its transport or its file name, and no source option "
                "table",
            )
        database, schema, table, family = split_topic(found)
        ctx.item.table = table
        return database, schema, table, family, found
