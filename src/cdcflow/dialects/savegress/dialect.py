"""The ``savegress`` decoder: unified-format events (JSON, Kafka form, protobuf) → canonical
events (``docs/dialects/savegress.md``)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from functools import partial
from typing import Any, ClassVar

from cdcflow import positions, sequence
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.common import epoch_instant
from cdcflow.dialects.model import BASE_TRANSPORTS, Batch, Capabilities, Columnar, Item, Order
from cdcflow.errors import DecodeError
from cdcflow.event import MARKER_OPERATIONS, OPERATIONS, ROW_OPERATIONS, event_id
from cdcflow.transports import PROTOBUF
from cdcflow.transports.json import header_map, kind, known_schema, read_lines
from cdcflow.transports.message import RawMessage
from cdcflow.types import (
    ValueTypeError,
    convert,
    infer_type,
    source_type,
    wire_json,
    wire_value,
)

_HEADER_PREFIX = "savegress-"
#: Headers of the Kafka message form, kept in metadata as ``header_<name>``.
_HEADERS = ("event-id", "operation", "table", "timestamp")
_SPEC_OPERATIONS = ("INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT")
#: Operations cdcflow's own unified stream adds to the spec's.
_EXTRA_OPERATIONS = ("TRUNCATE", "UPSERT", "SNAPSHOT", "RESOLVED")
_NEEDS_AFTER = ROW_OPERATIONS - {"DELETE"}
_ADD_COLUMN = re.compile(
    r"\bADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(\"[^\"]+\"|`[^`]+`|[A-Za-z_][\w$]*)\s+"
    r"(.+?)(?=,\s*ADD\b|;|$)",
    re.IGNORECASE | re.DOTALL,
)
_COLUMN_CONSTRAINTS = re.compile(
    r"\s+(NOT\s+NULL|NULL|DEFAULT\b.*|PRIMARY\s+KEY.*|UNIQUE.*|REFERENCES.*|CHECK\b.*|"
    r"COLLATE\b.*|CONSTRAINT\b.*|GENERATED\b.*|COMMENT\b.*|AFTER\b.*|FIRST\b.*)$",
    re.IGNORECASE | re.DOTALL,
)
_NOT_COLUMNS = frozenset({"CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "INDEX", "KEY", "CHECK"})
#: Fields of the events :meth:`SavegressDialect.columnar` reads in bulk, and its text fields.
_BULK_TEXT = ("id", "operation", "table", "schema", "source", "timestamp", "transaction_id")
_BULK_FIELDS = frozenset({*_BULK_TEXT, "position", "before", "after"})
_BULK_DAY = (
    r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(0[1-9]|1[0-2])-"
    r"(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
)
_BULK_UTC = "^" + _BULK_DAY + r"(\.[0-9]{6})?Z$"
_BULK_LSN = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"


#: What the unified format can express.
CAPABILITIES = Capabilities(
    orders_events=True, before_images=True, transports=BASE_TRANSPORTS | {PROTOBUF}
)


class SavegressDialect(Dialect):
    """Decoder for the unified CDC event format (``savegress``)."""

    name: ClassVar[str] = "savegress"
    capabilities = CAPABILITIES
    #: Transport headers named so (in any case) change what a message decodes to: a Kafka
    #: record carrying one is decoded one by one, never in bulk.
    header_prefix: ClassVar[str] = _HEADER_PREFIX
    #: The schema of the last file read in bulk (the next one is likely alike).
    _bulk_schema: Any = None

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.headers and any(k.lower().startswith(_HEADER_PREFIX) for k in msg.headers):
            return 1.0
        if msg.form == "protobuf":
            return 0.6
        return _score(doc) if isinstance(doc, dict) else 0.0

    # ------------------------------------------------------------------ shapes

    def document(self, msg: RawMessage) -> Any:
        if msg.form == "protobuf":
            from cdcflow.dialects.savegress.proto import event_from_proto

            return event_from_proto(msg.data)
        doc = super().document(msg)
        if not isinstance(doc, dict | list):
            raise self.fail("NOT_AN_EVENT", f"expected a JSON object, got {kind(doc)}")
        return doc

    def batch(self, doc: Any, msg: RawMessage) -> Batch | None:
        if isinstance(doc, list):
            return Batch(doc)
        if "events" not in doc or ("batch_id" not in doc and "batch_size" not in doc):
            return None
        events = doc.get("events")
        if not isinstance(events, list):
            raise self.fail("BAD_BATCH", f"batch 'events' must be an array, got {kind(events)}")
        size = doc.get("batch_size")
        if size is not None and (not isinstance(size, int) or size != len(events)):
            raise self.fail(
                "BATCH_SIZE_MISMATCH",
                f"batch {doc.get('batch_id')!r} says batch_size={size!r} but carries "
                f"{len(events)} events",
            )
        meta: dict[str, Any] = {"batch_id": doc.get("batch_id")}
        if doc.get("batch_timestamp") is not None:
            meta["batch_timestamp"] = doc["batch_timestamp"]
        return Batch(events, meta)

    def lineage(self, msg: RawMessage) -> dict[str, Any]:
        meta = super().lineage(msg)
        if msg.form == "protobuf":
            meta["format"] = "protobuf"
        if msg.key is not None:
            meta["kafka_key"] = msg.key.decode("utf-8", "replace")
        if msg.headers:
            headers = header_map(msg.headers)
            for h in _HEADERS:
                if _HEADER_PREFIX + h in headers:
                    meta[f"header_{h.replace('-', '_')}"] = headers[_HEADER_PREFIX + h]
        return meta

    # ------------------------------------------------------------------ the event

    def event(self, doc: Any, item: Item) -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise self.fail("NOT_AN_EVENT", f"expected a JSON object, got {kind(doc)}")
        msg = item.msg
        headers = header_map(msg.headers) if msg.headers else {}
        metadata = item.meta
        raw_meta = doc.get("metadata")
        if raw_meta is not None:
            if not isinstance(raw_meta, dict):
                raise self.fail("BAD_FIELD", f"'metadata' must be an object, got {kind(raw_meta)}")
            # the transport's and batch's metadata win over the event's own
            item.meta = metadata = {**raw_meta, **metadata}

        op = self._operation(doc, headers, metadata)
        kafka_key = msg.key.decode("utf-8", "replace") if msg.key is not None else None
        table = _text(doc, "table") or headers.get(_HEADER_PREFIX + "table")
        if table is None and kafka_key and ":" in kafka_key:
            table = kafka_key.split(":", 1)[0]
        schema = _text(doc, "schema")
        if table and schema is None and "." in table:
            schema, table = table.rsplit(".", 1)
        if op not in MARKER_OPERATIONS and not table:
            raise self.fail("MISSING_TABLE", f"{op} event has no 'table'")
        item.table = table

        before = _image(doc, "before")
        after = _image(doc, "after")
        if op in _NEEDS_AFTER and after is None:
            raise self.fail("MISSING_AFTER", f"{op} event has no 'after' row image")

        position = doc.get("position")
        if position is not None and not isinstance(position, dict):
            raise self.fail("BAD_POSITION", f"'position' must be an object, got {kind(position)}")
        seq, inferred_source = self._sequence(position, item)
        source = _text(doc, "source") or inferred_source

        declared = self.declared_types(
            table,
            schema,
            lambda native: source_type(source or "postgres", native),
            mapper=source or "",
        )
        types: dict[str, str] = {}
        typed_after = self._typed(after, declared, types)
        typed_before = self._typed(before, declared, types)
        key = self._key(doc, op, (schema, table), typed_before, typed_after, declared, types, item)

        ddl_command = _text(doc, "ddl_command")
        if op == "DDL" and ddl_command:
            try:
                types.update(_ddl_columns(ddl_command, source))
            except ValueTypeError as e:
                metadata["ddl_unparsed"] = str(e)

        database = metadata.get("database")
        order = Order(seq, position, self._timestamp(doc, headers), _text(doc, "transaction_id"))
        return self.make_event(
            op,
            (database if isinstance(database, str) else None, schema, table),
            order,
            item,
            id=_text(doc, "id") or headers.get(_HEADER_PREFIX + "event-id"),
            source=source,
            key=key,
            before=typed_before,
            after=typed_after,
            partial=bool(doc.get("partial")) if op in ROW_OPERATIONS else False,
            ddl_type=_text(doc, "ddl_type"),
            ddl_command=ddl_command,
            types=types,
        )

    def _operation(
        self, doc: Mapping[str, Any], headers: Mapping[str, str], metadata: dict[str, Any]
    ) -> str:
        op = doc.get("operation")
        if op is None and "type" in doc:
            # the DataWatch add-on writes "type"
            op = doc.get("type")
            metadata["operation_field"] = "type"
        if op is None:
            op = headers.get(_HEADER_PREFIX + "operation")
        if op is None:
            raise self.fail(
                "MISSING_OPERATION",
                "event has no 'operation' (expected one of " + ", ".join(_SPEC_OPERATIONS) + ")",
            )
        if not isinstance(op, str) or op.upper() not in OPERATIONS:
            raise self.fail(
                "UNKNOWN_OPERATION",
                f"unknown operation {op!r}; expected one of {', '.join(_SPEC_OPERATIONS)} "
                f"(or {', '.join(_EXTRA_OPERATIONS)})",
            )
        return op.upper()

    def _sequence(self, position: Mapping[str, Any] | None, item: Item) -> tuple[str, str | None]:
        """(sequence, source engine the position shows)."""
        try:
            if position:
                if "lsn" in position:
                    n = position.get("sequence", 0)
                    if not isinstance(n, int) or isinstance(n, bool):
                        raise ValueError(f"position.sequence must be an integer, got {n!r}")
                    lsn = positions.pg_lsn(position["lsn"])
                    fields = ("position.lsn", "position.sequence")
                    return self.sequence_of((lsn, n), fields), "postgres"
                if "file" in position and "position" in position:
                    binlog = positions.mysql_binlog(position["file"], position["position"])
                    fields = ("position.file", "position.position")
                    return self.sequence_of(binlog, fields), "mysql"
                if "cluster_time" in position:
                    t_i = positions.mongodb_cluster_time(position["cluster_time"])
                    fields = ("position.cluster_time.t", "position.cluster_time.i")
                    return self.sequence_of(t_i, fields), "mongodb"
                if isinstance(position.get("resume_token"), str):
                    # MongoDB resume tokens (hex '_data') sort in event order
                    return sequence.encode(("resume", position["resume_token"])), "mongodb"
                if "gtid" in position:
                    why = "delivery (gtid has no total order)"
                    return self.delivery_order(item, why), "mysql"
        except ValueError as e:
            raise self.fail("BAD_POSITION", f"'position': {e}") from None
        return self.delivery_order(item), None

    def _timestamp(self, doc: Mapping[str, Any], headers: Mapping[str, str]) -> dt.datetime | None:
        ts = doc.get("timestamp")
        if ts is not None:
            return self.instant(ts, "'timestamp'")
        ms = headers.get(_HEADER_PREFIX + "timestamp")
        if ms is None:
            return None
        try:
            count = int(ms)
        except ValueError:
            raise self.fail(
                "BAD_TIMESTAMP", f"savegress-timestamp header {ms!r} is not epoch ms"
            ) from None
        return epoch_instant(count, "ms", "savegress-timestamp header")

    def _typed(
        self, image: Mapping[str, Any] | None, declared: Mapping[str, str], types: dict[str, str]
    ) -> dict[str, Any] | None:
        """A row image with typed values; ``types`` gains each column's type (declared, else
        inferred from the first non-null value)."""
        if image is None:
            return None
        out: dict[str, Any] = {}
        for col, value in image.items():
            t = types.get(col)
            if t is None:
                t = declared.get(col) or infer_type(value)
                if t is None:
                    out[col] = None if value is None else self.keep(value)
                    continue
                types[col] = t
            if value is None:
                out[col] = None
                continue
            try:
                out[col] = wire_value(value, t) if self.wire else convert(value, t)
            except ValueTypeError as e:
                if col in declared:
                    raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None
                # inferred types can disagree between images (a number, then text): the value
                # is kept as text, which the engine's schema check judges
                types[col] = "string"
                out[col] = self.value(col, value, "string")
        return out

    def _key(
        self,
        doc: Mapping[str, Any],
        op: str,
        where: tuple[str | None, str | None],
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        declared: Mapping[str, str],
        types: dict[str, str],
        item: Item,
    ) -> dict[str, Any] | None:
        explicit = doc.get("key")
        if explicit is not None:
            # cdcflow's extension: the key with its names
            if not isinstance(explicit, dict) or not explicit:
                raise self.fail(
                    "BAD_KEY", f"'key' must be a non-empty object, got {kind(explicit)}"
                )
            return self._typed(explicit, declared, types)
        if op not in ROW_OPERATIONS:
            return None
        schema, table = where
        names = self.key_names(table, schema)
        if op == "DELETE" and before is None:
            kafka_key = item.msg.key.decode("utf-8", "replace") if item.msg.key else ""
            if ":" not in kafka_key:
                return self.image_key(names, before, after, op, table)
            # the Kafka message form's key is "table:primary_key"
            raw = kafka_key.split(":", 1)[1]
            if names and len(names) == 1:
                col = names[0]
                return {col: self.value(col, raw, types.get(col) or declared.get(col) or "string")}
            self.unnamed_key([raw], item)
            return None
        return self.image_key(names, before, after, op, table)

    # ------------------------------------------------------------------ bulk

    def columnar(self, data: bytes) -> Columnar | None:
        """Plain events of a JSON-lines file in bulk: the fields of :data:`_BULK_FIELDS` only,
        no ``null`` anywhere in the line (so an absent column is absent), an ``operation``
        of :data:`~cdcflow.event.ROW_OPERATIONS`, a Postgres position (``lsn``, ``sequence``), a
        plain UTC ``timestamp`` and values whose wire string is their text. Every other line
        goes through :meth:`decode`."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from cdcflow.wire import BulkImages, encoded_sequences, mask, pg_lsn_numbers

        lines = read_lines(data, ("timestamp",), self._bulk_schema)
        if lines is None:
            return None
        t = lines.table
        self._bulk_schema = known_schema(t.schema)
        n = t.num_rows
        # a field of the known schema that no line holds is absent (not a field of these lines)
        names = {name for name in t.column_names if t.column(name).null_count < n}
        if not names <= _BULK_FIELDS or not {"operation", "table", "position"} <= names:
            return None

        def column(name: str) -> pa.Array:
            return t.column(name).combine_chunks() if name in names else pa.nulls(n)

        def text_column(name: str) -> pa.Array:
            found = column(name)
            return pa.nulls(n, pa.string()) if pa.types.is_null(found.type) else found

        texts = {f: text_column(f) for f in _BULK_TEXT}
        if not all(pa.types.is_string(a.type) for a in texts.values()):
            return None
        position = t.column("position").combine_chunks()
        if not pa.types.is_struct(position.type):
            return None
        parts = {position.type.field(i).name: i for i in range(position.type.num_fields)}
        if "lsn" not in parts or not set(parts) <= {"lsn", "sequence"}:
            return None
        lsn = position.field(parts["lsn"])
        number = position.field(parts["sequence"]) if "sequence" in parts else pa.nulls(n)
        if not pa.types.is_string(lsn.type) or not (
            pa.types.is_int64(number.type) or pa.types.is_null(number.type)
        ):
            return None
        images = {i: column(i) for i in ("after", "before")}
        if not all(pa.types.is_struct(a.type) or pa.types.is_null(a.type) for a in images.values()):
            return None

        def text(name: str) -> pa.Array:
            found = texts[name]
            return pc.if_else(pc.equal(found, ""), pa.scalar(None, pa.string()), found)

        op, table, schema = texts["operation"], texts["table"], text("schema")
        timestamp = texts["timestamp"]
        is_delete = pc.fill_null(pc.equal(op, "DELETE"), False)
        checks = [
            pc.is_in(op, pa.array(sorted(ROW_OPERATIONS))),
            pc.greater(pc.utf8_length(table), 0),
            pc.or_(pc.invert(pc.match_substring(table, ".")), pc.is_valid(schema)),
            pc.if_else(is_delete, pc.is_valid(images["before"]), pc.is_valid(images["after"])),
            pc.is_valid(position),
            pc.match_substring_regex(lsn, _BULK_LSN),
            pc.or_(pc.is_null(number), pc.greater_equal(number, 0)),
            pc.or_(pc.is_null(timestamp), pc.match_substring_regex(timestamp, _BULK_UTC)),
        ]
        if b"null" in data:
            # a null value or an absent one look alike in Arrow's columns: such lines are read
            # one by one
            checks.append(pc.invert(pc.match_substring(lines.texts, "null")))
        ok = np.ones(n, dtype=bool)
        for check in checks:
            ok &= mask(check)
        # the ordering tuple (LSN as one number, sequence) and the position's JSON text
        lsn = pc.if_else(pa.array(ok), lsn, "0/0")
        number_digits = pc.cast(pc.fill_null(number, 0), pa.string())
        seq = encoded_sequences(pg_lsn_numbers(lsn), number_digits)
        written = pc.if_else(
            pc.is_null(number),
            pc.binary_join_element_wise('{"lsn":"', lsn, '"}', ""),
            pc.binary_join_element_wise('{"lsn":"', lsn, '","sequence":', number_digits, "}", ""),
        )
        source = pc.fill_null(text("source"), "postgres")
        columns: dict[str, list[Any]] = {}
        rows: list[Any] = []
        groups = pa.table({"t": table, "s": schema, "src": source, "i": pa.array(np.arange(n))})
        groups = groups.filter(pa.array(ok))
        grouped = groups.group_by(["t", "s", "src"]).aggregate([("i", "list")]).to_pylist()
        for group in grouped:
            # one table (the usual file) is read on the whole arrays, several one by one
            index = None if len(grouped) == 1 else pa.array(group["i_list"], pa.int64())
            try:
                declared = self.declared_types(
                    group["t"], group["s"], partial(source_type, group["src"]), mapper=group["src"]
                )
            except DecodeError:
                continue
            bulk = BulkImages(
                {k: v if index is None else v.take(index) for k, v in images.items()},
                declared,
                self.key_names(group["t"], group["s"]),
                is_delete if index is None else is_delete.take(index),
            )
            if index is None:
                keep = pa.array(ok & bulk.ok)
                picked = pa.array(np.flatnonzero(ok & bulk.ok))
            else:
                keep = pa.array(bulk.ok)
                picked = index.filter(keep)
            part = {
                "operation": op,
                "table": table,
                "schema": schema,
                "source": source,
                "id": text("id"),
                "transaction_id": text("transaction_id"),
                "timestamp": timestamp,
                "sequence": seq,
                "position": written,
            }
            every = bool(np.all(bulk.ok)) and (index is not None or bool(np.all(ok)))
            for name, values in part.items():
                if index is None:
                    values = values if every else values.filter(keep)
                else:
                    values = values.take(picked)
                columns.setdefault(name, []).append(values)
            for name, values in (*bulk.maps.items(), ("key", bulk.key), ("types", bulk.types)):
                columns.setdefault(name, []).append(values if every else values.filter(keep))
            rows.append(picked.to_numpy())
        if not rows or not sum(len(r) for r in rows):
            return None
        out = {name: pa.concat_arrays(parts) for name, parts in columns.items()}
        out["timestamp"] = pc.cast(out["timestamp"], pa.timestamp("us", tz="UTC"))
        out["id"] = self._bulk_ids(out)
        return Columnar(lines, np.concatenate(rows), out)

    def _bulk_ids(self, columns: dict[str, Any]) -> Any:
        """Event ids: the message's ``id``, else the hash of the event's identity."""
        import pyarrow as pa

        if columns["id"].null_count == 0:
            return columns["id"]
        ids = columns["id"].to_pylist()
        key = columns["key"].to_pylist()
        types = columns["types"].to_pylist()
        table, seqs, ops = (columns[c].to_pylist() for c in ("table", "sequence", "operation"))
        for i, found in enumerate(ids):
            if not found:
                kinds = dict(types[i] or [])
                hashed = (
                    None if key[i] is None else {c: wire_json(v, kinds.get(c)) for c, v in key[i]}
                )
                ids[i] = event_id(self.name, table[i], hashed, seqs[i], ops[i])
        return pa.array(ids, pa.string())


def _score(doc: Mapping[str, Any]) -> float:
    if "batch_id" in doc and isinstance(doc.get("events"), list):
        return 0.95
    op = doc.get("operation")
    if isinstance(op, str) and op.upper() in OPERATIONS:
        # CloudEvents and Debezium carry other markers; the unified format is flat
        return 0.1 if "specversion" in doc or "payload" in doc else 0.9
    typ = doc.get("type")
    if isinstance(typ, str) and typ.upper() in OPERATIONS and "table" in doc:
        return 0.7 if "specversion" not in doc else 0.0
    return 0.0


def _text(doc: Mapping[str, Any], name: str) -> str | None:
    v = doc.get(name)
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return str(v)
    raise Dialect.fail("BAD_FIELD", f"'{name}' must be text, got {kind(v)}")


def _image(doc: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    v = doc.get(name)
    if v is None or isinstance(v, dict):
        return v
    raise Dialect.fail("BAD_ROW_IMAGE", f"'{name}' must be an object or null, got {kind(v)}")


def _ddl_columns(command: str, source: str | None) -> dict[str, str]:
    """Columns added by an ``ALTER TABLE ... ADD [COLUMN] name type`` command."""
    found: dict[str, str] = {}
    if not re.match(r"\s*ALTER\s+TABLE\b", command, re.IGNORECASE):
        return found
    for m in _ADD_COLUMN.finditer(command):
        name = m.group(1).strip('"`')
        if name.upper() in _NOT_COLUMNS:
            continue
        native = _COLUMN_CONSTRAINTS.sub("", m.group(2).strip()).strip()
        last_error: ValueTypeError | None = None
        for src in ([source] if source else []) + ["postgres", "mysql"]:
            try:
                found[name] = source_type(src, native)
                break
            except ValueTypeError as e:
                last_error = e
        else:
            raise ValueTypeError(f"cannot map type of added column {name!r}: {last_error}")
    return found
