"""The ``savegress`` dialect: the unified CDC event format.

Spec: ``specs/unified-cdc-event-format.txt`` (the Savegress event format).

========================================  ==================================================
unified format                            canonical event
========================================  ==================================================
``id``                                    ``id`` (else a deterministic hash)
``source``                                ``source`` (else inferred from ``position``)
``metadata.database``                     ``database``
``schema`` / ``table``                    ``schema`` / ``table``
``operation`` (or ``type``, see below)    ``operation``
``timestamp`` (ISO-8601 UTC)              ``timestamp``
``transaction_id``                        ``transaction_id``
``position`` postgres ``lsn``+``sequence``  ``sequence`` = (LSN as one integer, sequence)
``position`` mysql ``file``+``position``    ``sequence`` = (binlog file number, position)
``position`` mongodb ``cluster_time``       ``sequence`` = (t, i); else ``resume_token`` text
no usable position                        ``sequence`` = delivery order, marked in metadata
``before`` / ``after``                    ``before`` / ``after`` (typed, see below)
``metadata``                              ``metadata`` (plus batch and Kafka coordinates)
``ddl_type`` / ``ddl_command``            ``ddl_type`` / ``ddl_command``; ``ADD COLUMN``
                                          clauses give the new columns' ``types``
``key`` (cdcflow extension)               ``key``
========================================  ==================================================

Shapes accepted: a single event; a batch envelope (``batch_id``, ``batch_size``,
``batch_timestamp``, ``events``) whose ``batch_size`` must equal the number of events; a JSON
array of events; the Kafka message form (key ``table:primary_key``, headers
``savegress-event-id``/``-operation``/``-table``/``-timestamp``), either as real Kafka key and
headers or as a JSON record ``{"key", "value", "headers"}``; the gRPC ``CDCEvent`` protobuf
message, length-delimited in ``.pb`` files.

Quirks handled:

- The format carries no key column names and no column types. Key names come from an explicit
  ``key`` object (cdcflow writes one), else from the source's configured ``keys``; values come
  from ``after`` (``before`` for deletes). Types come from configured column types (native
  names through the per-source type table, e.g. Postgres ``numeric(10,2)``), else are inferred
  from JSON values (integers → bigint, fractions → double, text → string, objects → json).
- Operations beyond the spec's INSERT/UPDATE/DELETE/DDL/BEGIN/COMMIT (``TRUNCATE``,
  ``UPSERT``, ``SNAPSHOT``, ``RESOLVED``) are accepted: cdcflow's own unified stream uses them.
- The DataWatch add-on writes ``"type"`` instead of ``"operation"``: both are accepted, and the
  variant is noted in ``metadata.operation_field``.
- A DELETE needs a key or a before image; INSERT/UPDATE need an ``after`` image.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from cdcflow import positions, sequence
from cdcflow.dialects.base import Decoded, Dialect, RawMessage, Rejection
from cdcflow.errors import DecodeError
from cdcflow.event import MARKER_OPERATIONS, OPERATIONS, ROW_OPERATIONS, new_event
from cdcflow.framing import header_map, parse_json
from cdcflow.types import (
    ValueTypeError,
    convert,
    infer_type,
    parse_timestamp,
    source_type,
)

_HEADER_PREFIX = "savegress-"
_SPEC_OPERATIONS = ("INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT")
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


class SavegressDialect(Dialect):
    """Decoder for the unified CDC event format (``savegress``)."""

    name: ClassVar[str] = "savegress"
    binary_extensions: ClassVar[tuple[str, ...]] = (".pb", ".protobuf", ".pbd")

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.headers and any(k.lower().startswith(_HEADER_PREFIX) for k in msg.headers):
            return 1.0
        if doc is None:
            name = (msg.origin or "").lower()
            return 0.6 if name.endswith(self.binary_extensions) else 0.0
        if isinstance(doc, list):
            first = doc[0] if doc else None
            return 0.8 * self._score_object(first) if isinstance(first, dict) else 0.0
        if isinstance(doc, dict):
            return self._score_object(doc)
        return 0.0

    @staticmethod
    def _score_object(doc: Mapping[str, Any]) -> float:
        if "batch_id" in doc and isinstance(doc.get("events"), list):
            return 0.95
        headers = doc.get("headers")
        if "value" in doc and isinstance(headers, (dict, list)):
            names = (
                headers.keys()
                if isinstance(headers, dict)
                else (h.get("key", "") for h in headers if isinstance(h, dict))
            )
            if any(str(n).lower().startswith(_HEADER_PREFIX) for n in names):
                return 0.95
        op = doc.get("operation")
        if isinstance(op, str) and op.upper() in OPERATIONS:
            # CloudEvents and Debezium carry other markers; the unified format is flat.
            if "specversion" in doc or "payload" in doc:
                return 0.1
            return 0.9
        typ = doc.get("type")
        if isinstance(typ, str) and typ.upper() in OPERATIONS and "table" in doc:
            return 0.7 if "specversion" not in doc else 0.0
        return 0.0

    # ------------------------------------------------------------------ framing

    def frame(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        name = (origin or "").lower()
        if not name.endswith(self.binary_extensions):
            return None
        from cdcflow.dialects.savegress_proto import split_delimited

        try:
            parts = split_delimited(data)
        except DecodeError as e:
            # the stream is unusable from the bad prefix on: one message carries the error
            return [
                RawMessage(data=data, origin=origin, offset=0, headers={"x-error": e.code.encode()})
            ]
        return [
            RawMessage(data=body, origin=origin, offset=off, headers={"content-type": b"protobuf"})
            for off, body in parts
        ]

    # ------------------------------------------------------------------ decoding

    def decode(self, msg: RawMessage) -> list[Decoded]:
        headers = header_map(msg.headers)
        if "x-error" in headers:
            raise self.fail(headers["x-error"], "corrupt length-delimited protobuf stream")
        if headers.get("content-type") == "protobuf":
            from cdcflow.dialects.savegress_proto import event_from_proto

            return [self._event(event_from_proto(msg.data), msg, 0, {"format": "protobuf"})]
        doc = parse_json(msg)
        kafka_key = msg.key.decode("utf-8", "replace") if msg.key is not None else None
        extra: dict[str, Any] = {}
        if (
            isinstance(doc, dict)
            and "value" in doc
            and ("headers" in doc or "key" in doc)
            and ("operation" not in doc)
        ):
            # Kafka message form written as a JSON record
            kafka_key = doc.get("key") if isinstance(doc.get("key"), str) else kafka_key
            headers = {**headers, **header_map(doc.get("headers"))}
            value = doc.get("value")
            if isinstance(value, str):
                try:
                    value = orjson.loads(value)
                except orjson.JSONDecodeError:
                    raise self.fail("NOT_JSON", "Kafka record value is not JSON") from None
            doc = value
            for k in ("topic", "partition", "offset"):
                if k in (msg.doc or {}):
                    extra[f"kafka_{k}"] = msg.doc[k]
        if headers or kafka_key is not None:
            extra.update(self._kafka_meta(headers, kafka_key))
        if isinstance(doc, list):
            return [self._safe_event(e, msg, i, extra) for i, e in enumerate(doc)]
        if not isinstance(doc, dict):
            raise self.fail("NOT_AN_EVENT", f"expected a JSON object, got {_kind(doc)}")
        if "events" in doc and ("batch_id" in doc or "batch_size" in doc):
            return self._batch(doc, msg, extra)
        return [self._event(doc, msg, 0, extra, headers=headers, kafka_key=kafka_key)]

    def _batch(
        self, doc: Mapping[str, Any], msg: RawMessage, extra: dict[str, Any]
    ) -> list[Decoded]:
        events = doc.get("events")
        if not isinstance(events, list):
            raise self.fail("BAD_BATCH", f"batch 'events' must be an array, got {_kind(events)}")
        size = doc.get("batch_size")
        if size is not None and (not isinstance(size, int) or size != len(events)):
            raise self.fail(
                "BATCH_SIZE_MISMATCH",
                f"batch {doc.get('batch_id')!r} says batch_size={size!r} but carries "
                f"{len(events)} events",
            )
        meta = dict(extra)
        meta["batch_id"] = doc.get("batch_id")
        if doc.get("batch_timestamp") is not None:
            meta["batch_timestamp"] = doc.get("batch_timestamp")
        return [self._safe_event(e, msg, i, meta) for i, e in enumerate(events)]

    def _safe_event(
        self, doc: Any, msg: RawMessage, item: int, extra: Mapping[str, Any]
    ) -> Decoded:
        try:
            if not isinstance(doc, dict):
                raise self.fail("NOT_AN_EVENT", f"item {item} is {_kind(doc)}, not an event object")
            return self._event(doc, msg, item, extra)
        except DecodeError as e:
            return Rejection(
                code=e.code,
                message=f"item {item}: {e.message}",
                raw=orjson.dumps(doc),
                item=item,
                dialect=self.name,
            )

    @staticmethod
    def _kafka_meta(headers: Mapping[str, str], kafka_key: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if kafka_key is not None:
            meta["kafka_key"] = kafka_key
        for h in ("event-id", "operation", "table", "timestamp"):
            if _HEADER_PREFIX + h in headers:
                meta[f"header_{h.replace('-', '_')}"] = headers[_HEADER_PREFIX + h]
        return meta

    def _event(
        self,
        doc: Mapping[str, Any],
        msg: RawMessage,
        item: int,
        extra: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        kafka_key: str | None = None,
    ) -> dict[str, Any]:
        headers = headers or {}
        metadata: dict[str, Any] = {}
        raw_meta = doc.get("metadata")
        if raw_meta is not None:
            if not isinstance(raw_meta, dict):
                raise self.fail("BAD_FIELD", f"'metadata' must be an object, got {_kind(raw_meta)}")
            metadata.update(raw_meta)
        metadata.update(extra)

        op_value = doc.get("operation")
        if op_value is None and "type" in doc:
            op_value = doc.get("type")
            metadata["operation_field"] = "type"
        if op_value is None:
            op_value = headers.get(_HEADER_PREFIX + "operation")
        if op_value is None:
            raise self.fail(
                "MISSING_OPERATION",
                "event has no 'operation' (expected one of " + ", ".join(_SPEC_OPERATIONS) + ")",
            )
        if not isinstance(op_value, str) or op_value.upper() not in OPERATIONS:
            raise self.fail(
                "UNKNOWN_OPERATION",
                f"unknown operation {op_value!r}; expected one of "
                + ", ".join(_SPEC_OPERATIONS)
                + " (or TRUNCATE, UPSERT, SNAPSHOT, RESOLVED)",
            )
        op = op_value.upper()

        table = _opt_str(doc, "table") or headers.get(_HEADER_PREFIX + "table")
        if table is None and kafka_key and ":" in kafka_key:
            table = kafka_key.split(":", 1)[0]
        schema = _opt_str(doc, "schema")
        if table and schema is None and "." in table:
            schema, table = table.rsplit(".", 1)
        if op not in MARKER_OPERATIONS and not table:
            raise self.fail("MISSING_TABLE", f"{op} event has no 'table'")

        before = _image(doc, "before")
        after = _image(doc, "after")
        if op in ("INSERT", "UPDATE", "UPSERT", "SNAPSHOT") and after is None:
            raise self.fail("MISSING_AFTER", f"{op} event has no 'after' row image")

        position = doc.get("position")
        if position is not None and not isinstance(position, dict):
            raise self.fail("BAD_POSITION", f"'position' must be an object, got {_kind(position)}")
        source = _opt_str(doc, "source")
        seq, inferred_source = self._sequence(position, msg, item, metadata)
        source = source or inferred_source

        ts = doc.get("timestamp")
        timestamp: dt.datetime | None = None
        if ts is not None:
            try:
                timestamp = parse_timestamp(ts)
            except ValueTypeError as e:
                raise self.fail("BAD_TIMESTAMP", f"'timestamp': {e}") from None
        elif _HEADER_PREFIX + "timestamp" in headers:
            try:
                ms = int(headers[_HEADER_PREFIX + "timestamp"])
                timestamp = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
            except ValueError:
                raise self.fail(
                    "BAD_TIMESTAMP", "savegress-timestamp header is not epoch ms"
                ) from None

        declared = self.options.types_for(table, schema)
        types: dict[str, str] = {}
        try:
            typed_after = _typed(after, declared, source, types)
            typed_before = _typed(before, declared, source, types)
        except ValueTypeError as e:
            raise self.fail("BAD_VALUE", str(e)) from None

        key = self._key(
            doc, op, table, schema, typed_before, typed_after, declared, source, types, kafka_key
        )

        ddl_type = _opt_str(doc, "ddl_type")
        ddl_command = _opt_str(doc, "ddl_command")
        if op == "DDL" and ddl_command:
            try:
                types.update(_ddl_columns(ddl_command, source))
            except ValueTypeError as e:
                metadata["ddl_unparsed"] = str(e)

        database = metadata.get("database") if isinstance(metadata.get("database"), str) else None
        event_id = _opt_str(doc, "id") or headers.get(_HEADER_PREFIX + "event-id")
        return new_event(
            id=event_id,
            dialect=self.name,
            source=source,
            database=database,
            schema=schema,
            table=table,
            operation=op,
            timestamp=timestamp,
            transaction_id=_opt_str(doc, "transaction_id"),
            sequence=seq,
            position=position,
            key=key,
            before=typed_before,
            after=typed_after,
            partial=bool(doc.get("partial")) if op in ROW_OPERATIONS else False,
            metadata=metadata,
            ddl_type=ddl_type,
            ddl_command=ddl_command,
            types=types,
        )

    def _sequence(
        self,
        position: Mapping[str, Any] | None,
        msg: RawMessage,
        item: int,
        metadata: dict[str, Any],
    ) -> tuple[str, str | None]:
        try:
            if position:
                if "lsn" in position:
                    lsn = positions.pg_lsn(position["lsn"])
                    n = position.get("sequence", 0)
                    if not isinstance(n, int) or isinstance(n, bool):
                        raise ValueError(f"position.sequence must be an integer, got {n!r}")
                    return sequence.encode((lsn, n)), "postgres"
                if "file" in position and "position" in position:
                    return sequence.encode(
                        positions.mysql_binlog(position["file"], position["position"])
                    ), "mysql"
                if "cluster_time" in position:
                    return sequence.encode(
                        positions.mongodb_cluster_time(position["cluster_time"])
                    ), "mongodb"
                if isinstance(position.get("resume_token"), str):
                    # MongoDB resume tokens (hex '_data') sort in event order
                    return sequence.encode(("resume", position["resume_token"])), "mongodb"
                if "gtid" in position:
                    metadata["sequence_source"] = "delivery (gtid has no total order)"
                    return self._delivery(msg, item), "mysql"
        except ValueError as e:
            raise self.fail("BAD_POSITION", f"'position': {e}") from None
        metadata["sequence_source"] = "delivery"
        return self._delivery(msg, item), None

    @staticmethod
    def _delivery(msg: RawMessage, item: int) -> str:
        offset = msg.offset if msg.index is None else msg.index
        return sequence.delivery_sequence(msg.origin or "", offset, item)

    def _key(
        self,
        doc: Mapping[str, Any],
        op: str,
        table: str | None,
        schema: str | None,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        declared: Mapping[str, str],
        source: str | None,
        types: dict[str, str],
        kafka_key: str | None,
    ) -> dict[str, Any] | None:
        explicit = doc.get("key")
        if explicit is not None:
            if not isinstance(explicit, dict) or not explicit:
                raise self.fail(
                    "BAD_KEY", f"'key' must be a non-empty object, got {_kind(explicit)}"
                )
            try:
                return _typed(explicit, declared, source, types)
            except ValueTypeError as e:
                raise self.fail("BAD_VALUE", f"key: {e}") from None
        if op not in ROW_OPERATIONS:
            return None
        names = self.options.keys_for(table, schema)
        image = before if op == "DELETE" else after
        if op == "DELETE" and before is None:
            if names and kafka_key and len(names) == 1 and ":" in kafka_key:
                raw = kafka_key.split(":", 1)[1]
                col = names[0]
                try:
                    return {
                        col: convert(
                            raw, types.get(col) or _declared(declared, col, source) or "string"
                        )
                    }
                except ValueTypeError as e:
                    raise self.fail("BAD_VALUE", f"key from Kafka key: {e}") from None
            raise self.fail(
                "DELETE_WITHOUT_KEY",
                "DELETE event has neither a 'key' nor a 'before' image, so the deleted row "
                "cannot be identified",
            )
        if not names or image is None:
            return None
        missing = [n for n in names if n not in image]
        if missing:
            raise self.fail(
                "KEY_COLUMN_MISSING",
                f"{op} row image lacks key column(s) {missing} configured for table {table!r}",
            )
        return {n: image[n] for n in names}


# ---------------------------------------------------------------------- helpers


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def _opt_str(doc: Mapping[str, Any], name: str) -> str | None:
    v = doc.get(name)
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    raise DecodeError(f"'{name}' must be text, got {_kind(v)}", code="BAD_FIELD")


def _image(doc: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    v = doc.get(name)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise DecodeError(
            f"'{name}' must be an object or null, got {_kind(v)}", code="BAD_ROW_IMAGE"
        )
    return v


def _declared(declared: Mapping[str, str], col: str, source: str | None) -> str | None:
    native = declared.get(col)
    if native is None:
        return None
    return source_type(source or "postgres", native)


def _typed(
    image: Mapping[str, Any] | None,
    declared: Mapping[str, str],
    source: str | None,
    types: dict[str, str],
) -> dict[str, Any] | None:
    if image is None:
        return None
    out: dict[str, Any] = {}
    for col, value in image.items():
        t = types.get(col)
        if t is None:
            t = _declared(declared, col, source) if declared else None
            if t is None:
                t = infer_type(value)
            if t is not None:
                types[col] = t
        if t is None or value is None:
            out[col] = value
            continue
        try:
            out[col] = convert(value, t)
        except ValueTypeError as e:
            if col in declared:
                raise ValueTypeError(f"column {col!r} ({declared[col]}): {e}") from None
            # inferred types can disagree between images (e.g. a number then text): keep the
            # value as text, which the engine's schema check will judge
            types[col] = "string"
            out[col] = convert(value, "string")
    return out


def _ddl_columns(command: str, source: str | None) -> dict[str, str]:
    """Columns added by an ``ALTER TABLE ... ADD [COLUMN] name type`` command."""
    found: dict[str, str] = {}
    if not re.match(r"\s*ALTER\s+TABLE\b", command, re.IGNORECASE):
        return found
    for m in _ADD_COLUMN.finditer(command):
        name = m.group(1).strip('"`')
        if name.upper() in ("CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "INDEX", "KEY", "CHECK"):
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
