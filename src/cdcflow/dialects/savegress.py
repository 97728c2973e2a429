"""The ``savegress`` dialect: the unified CDC event format (JSON, Kafka form, protobuf).

The mapping to canonical fields, the shapes read and the format's gaps:
``docs/dialects/savegress.md``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from cdcflow import positions, sequence
from cdcflow.dialects.base import BASE_TRANSPORTS, Batch, Capabilities, Dialect, Item, Order
from cdcflow.event import MARKER_OPERATIONS, OPERATIONS, ROW_OPERATIONS
from cdcflow.transports import PROTOBUF
from cdcflow.transports.json import header_map, kind
from cdcflow.transports.message import RawMessage
from cdcflow.types import ValueTypeError, convert, infer_type, source_type, wire_value

_HEADER_PREFIX = "savegress-"
#: Headers of the Kafka message form, kept in metadata as ``header_<name>``.
_HEADERS = ("event-id", "operation", "table", "timestamp")
_SPEC_OPERATIONS = ("INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT")
#: Operations cdcflow's own unified stream adds to the spec's.
_EXTRA_OPERATIONS = ("TRUNCATE", "UPSERT", "SNAPSHOT", "RESOLVED")
_NEEDS_AFTER = frozenset({"INSERT", "UPDATE", "UPSERT", "SNAPSHOT"})
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


#: What the unified format can express.
CAPABILITIES = Capabilities(
    orders_events=True, before_images=True, transports=BASE_TRANSPORTS | {PROTOBUF}
)


class SavegressDialect(Dialect):
    """Decoder for the unified CDC event format (``savegress``)."""

    name: ClassVar[str] = "savegress"
    capabilities = CAPABILITIES

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
            from cdcflow.dialects.savegress_proto import event_from_proto

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
                    return sequence.encode((positions.pg_lsn(position["lsn"]), n)), "postgres"
                if "file" in position and "position" in position:
                    binlog = positions.mysql_binlog(position["file"], position["position"])
                    return sequence.encode(binlog), "mysql"
                if "cluster_time" in position:
                    t_i = positions.mongodb_cluster_time(position["cluster_time"])
                    return sequence.encode(t_i), "mongodb"
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
            return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC)
        except ValueError:
            raise self.fail(
                "BAD_TIMESTAMP", f"savegress-timestamp header {ms!r} is not epoch ms"
            ) from None

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
                raise self.fail(
                    "DELETE_WITHOUT_KEY",
                    "DELETE event has neither a 'key' nor a 'before' image, so the deleted row "
                    "cannot be identified",
                )
            # the Kafka message form's key is "table:primary_key"
            raw = kafka_key.split(":", 1)[1]
            if names and len(names) == 1:
                col = names[0]
                return {col: self.value(col, raw, types.get(col) or declared.get(col) or "string")}
            self.unnamed_key([raw], item)
            return None
        if not names:
            return None
        return self.key_from_image(names, before if op == "DELETE" else after, op, table)


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
