"""The ``sqlserver_ces`` decoder: SQL Server 2025 change event streaming CloudEvents →
canonical events (``docs/dialects/sqlserver_ces.md``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from cdcflow import positions
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.common import hex_bytes, present_types
from cdcflow.dialects.model import Capabilities, Item, Order, Segment
from cdcflow.dialects.sqlserver_ces.cloudevent import (
    CLOUDEVENT_AVRO_SCHEMA,
    binary_mode,
    ce_attributes,
    data_document,
    data_member,
    from_avro,
    json_member,
)
from cdcflow.errors import DecodeError
from cdcflow.transports.json import dumps, kind
from cdcflow.transports.message import RawMessage
from cdcflow.types import ValueTypeError, json_bytes, source_type

#: CES ``operation`` → canonical operation.
OPERATIONS: dict[str, str] = {"INS": "INSERT", "UPD": "UPDATE", "DEL": "DELETE"}
#: Required CloudEvent attributes.
CE_ATTRIBUTES = ("specversion", "type", "source", "id")
#: CloudEvent attributes kept in ``metadata``.
METADATA_ATTRIBUTES = (
    "specversion",
    "type",
    "source",
    "logicalid",
    "datacontenttype",
    "segmentindex",
    "finalsegment",
    "splitindex",
    "splittotalcnt",
)
_LOGICAL_ID = re.compile(r"^\s*([^:]*):([0-9A-Fa-f:x]+?):(\d+)\s*$")
_SEGMENT_FIELDS = frozenset(
    {"segmentindex", "finalsegment", "splitindex", "splittotalcnt", "data", "data_base64"}
)
_UNPARSED = object()


#: What change event streaming can express.
CAPABILITIES = Capabilities(
    orders_events=True,
    before_images=True,
    names_keys=True,
    carries_types=True,
    splits_messages=True,
)


class SqlServerCesDialect(Dialect):
    """Decoder for SQL Server 2025 change event streaming CloudEvents."""

    name: ClassVar[str] = "sqlserver_ces"
    capabilities = CAPABILITIES
    type_sources = ("sqlserver",)

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        attrs = ce_attributes(msg.headers)
        if attrs:
            return 1.0 if ".SQL.CES." in str(attrs.get("type", "")).upper() else 0.8
        if msg.form == "bytes":
            try:
                record = self.schemaless(msg)
            except DecodeError:
                return 0.0
            return 0.9 if record is not None else 0.0
        if not isinstance(doc, dict):
            return 0.0
        typ = doc.get("type")
        if "specversion" in doc and isinstance(typ, str) and ".SQL.CES." in typ.upper():
            return 1.0
        operation = doc.get("operation")
        if "specversion" in doc and isinstance(operation, str) and operation in OPERATIONS:
            return 0.9 if "data" in doc else 0.0
            return 0.9
        return 0.0

    # ------------------------------------------------------------------ serializations

    def schemaless_schema(self) -> Any:
        """The spec's CloudEvent record, or the source option ``avro_schema`` (a schema, its
        JSON text, or a file)."""
        given = self.options.extra.get("avro_schema")
        if isinstance(given, dict):
            return given
        if isinstance(given, str) and given.lstrip().startswith("{"):
            return orjson.loads(given)
        if isinstance(given, str):
            try:
                with open(given, "rb") as f:
                    return orjson.loads(f.read())
            except (OSError, orjson.JSONDecodeError) as e:
                raise self.fail("BAD_SCHEMA", f"cannot read avro_schema {given!r}: {e}") from None
        return CLOUDEVENT_AVRO_SCHEMA

    def document(self, msg: RawMessage) -> Any:
        attrs = ce_attributes(msg.headers)
        if "specversion" in attrs:
            # binary content mode: the attributes travel as headers, the body is `data`
            return binary_mode(attrs, msg.data)
        if msg.form == "bytes":
            try:
                record = self.schemaless(msg)
            except DecodeError as e:
                raise self.fail(
                    e.code,
                    f"{e.message} (a schemaless CloudEvent: set the source option avro_schema)",
                ) from None
            assert record is not None
            return from_avro(record.value)
        if msg.form == "avro" and msg.avro is not None:
            return from_avro(msg.avro.value)
        return super().document(msg)

    # ------------------------------------------------------------------ the event

    def event(self, doc: Any, item: Item) -> dict[str, Any] | Segment:
        if not isinstance(doc, dict):
            raise self.fail("NOT_AN_EVENT", f"a CloudEvent must be a JSON object, got {kind(doc)}")
        missing = [a for a in CE_ATTRIBUTES if a not in doc]
        if missing:
            raise self.fail("NOT_AN_EVENT", f"CloudEvent lacks required attribute(s) {missing}")
        ce_type = str(doc.get("type"))
        if ".DML." not in ce_type.upper():
            raise self.fail(
                "UNSUPPORTED_EVENT_TYPE",
                f"CloudEvent type {ce_type!r} is not a CES DML event; only DML events carry rows",
            )
        item.meta = metadata = {
            **{k: doc[k] for k in METADATA_ATTRIBUTES if k in doc},
            **item.meta,
        }
        segment, data = self._segment(doc, item)
        if segment is not None:
            return segment

        op_value = doc.get("operation")
        if op_value is None:
            raise self.fail("MISSING_OPERATION", "CloudEvent has no 'operation' (INS, UPD, DEL)")
        if not isinstance(op_value, str) or op_value.upper() not in OPERATIONS:
            raise self.fail(
                "UNKNOWN_OPERATION", f"unknown operation {op_value!r}; expected INS, UPD or DEL"
            )
        op = OPERATIONS[op_value.upper()]

        if data is _UNPARSED:
            data = data_document(data_member(doc))
        if not isinstance(data, dict):
            raise self.fail("BAD_DATA", f"'data' must hold a JSON object, got {kind(data)}")
        source = data.get("eventsource")
        if not isinstance(source, dict):
            raise self.fail("BAD_DATA", "'data' has no 'eventsource' object")
        # the spec calls the member both eventrow and eventdata
        row = data.get("eventrow", data.get("eventdata"))
        if not isinstance(row, dict):
            raise self.fail("BAD_DATA", "'data' has no 'eventrow' (or 'eventdata') object")
        table = source.get("tbl")
        if not isinstance(table, str) or not table:
            raise self.fail("MISSING_TABLE", "'eventsource' has no 'tbl'")
        item.table = table
        schema = source.get("schema") if isinstance(source.get("schema"), str) else None
        database = source.get("db") if isinstance(source.get("db"), str) else None

        types, indexes = self._column_types(source.get("cols"), metadata)
        types.update(self.declared_types(table, schema, _sqlserver_type, mapper="sqlserver"))

        before = self._image(row.get("old"), "old", types)
        after = self._image(row.get("current"), "current", types)
        if op in ("INSERT", "UPDATE") and after is None:
            raise self.fail("MISSING_AFTER", f"{op} event has an empty 'current' row image")
        key = self._key(source.get("pkkey"), types, op, before, after, table, schema)
        # a table streamed without all columns lists only some, with their original indexes
        gaps = bool(indexes) and sorted(indexes) != list(range(len(indexes)))
        partial = op == "UPDATE" and (gaps or bool(self.options.extra.get("partial_updates")))

        return self.make_event(
            op,
            (database, schema, table),
            self._order(doc, source, item),
            item,
            id=str(doc["id"]),
            source="sqlserver",
            key=key,
            before=before,
            after=after,
            partial=partial,
            types=present_types(types, before, after, key),
        )

    # ------------------------------------------------------------------ split messages

    def _segment(self, doc: Mapping[str, Any], item: Item) -> tuple[Segment | None, Any]:
        """``(None, data)`` for a whole message (one segment), else ``(Segment, _UNPARSED)``.
        ``data`` is the parsed ``data`` member when telling the two apart needed it."""
        total: int | None = None
        final: bool | None = None
        if "segmentindex" in doc or "finalsegment" in doc:
            index = _seg_int(doc.get("segmentindex"), "segmentindex")
            self.segment_numbers(index, None)
            final = _seg_bool(doc.get("finalsegment"))
            # one segment: final at index 0 (the docs' numbering)
            if final is True and index in (0, None):
                return None, _UNPARSED
            # final at index 1: a lone segment numbered from 1 (captured output) or the last of
            # two numbered from 0 — a lone segment's data is a whole JSON document, a piece
            # of a split one is not
            if final is True and index == 1:
                try:
                    data = data_document(data_member(doc))
                except DecodeError:
                    data = _UNPARSED
                if isinstance(data, dict):
                    return None, data
        elif "splitindex" in doc or "splittotalcnt" in doc:
            index = _seg_int(doc.get("splitindex"), "splitindex")
            total = _seg_int(doc.get("splittotalcnt"), "splittotalcnt")
            self.segment_numbers(index, total)
            if total in (0, 1, None) and index in (0, 1, None):
                return None, _UNPARSED
            if total is not None and index is not None and not 0 <= index <= total:
                raise self.fail(
                    "SEGMENT_OUT_OF_RANGE",
                    f"split index {index} out of range for a message of {total} segment(s)",
                )
        else:
            return None, _UNPARSED
        if index is None or index < 0:
            raise self.fail("SEGMENT_OUT_OF_RANGE", f"segment index {index!r} out of range")
        group = doc.get("logicalid")
        if not isinstance(group, str) or not group.strip():
            raise self.fail(
                "BAD_SEGMENT", "a segment of a split message needs 'logicalid' to be reassembled"
            )
        msg = item.msg
        raw = msg.data if msg.doc is doc and msg.form == "json" else dumps(doc)
        return Segment(group, index, final, total, raw, self.name, item.number), _UNPARSED

    def reassemble(self, segments: list[bytes], origin: str | None) -> RawMessage:
        """Segments (in order) → one CloudEvent: the first segment's attributes with ``data``
        the concatenation of every segment's ``data`` (text, or ``data_base64`` bytes).

        The spec does not say how an event is cut; each segment is read as a CloudEvent
        carrying the next piece of the ``data`` payload."""
        docs: list[Any] = []
        for i, raw in enumerate(segments):
            try:
                docs.append(orjson.loads(raw))
            except orjson.JSONDecodeError as e:
                raise self.fail("BAD_SEGMENT", f"segment {i} is not JSON: {e}") from None
        pieces: list[bytes] = []
        for i, d in enumerate(docs):
            value = data_member(d) if isinstance(d, dict) else None
            if isinstance(value, str):
                pieces.append(value.encode("utf-8"))
            elif isinstance(value, bytes | bytearray):
                pieces.append(bytes(value))
            else:
                raise self.fail(
                    "BAD_SEGMENT", f"segment {i} carries no text or bytes 'data' to join"
                )
        data = data_document(b"".join(pieces))
        if not isinstance(data, dict):
            raise self.fail("BAD_DATA", f"reassembled 'data' is {kind(data)}, not an object")
        whole = {k: v for k, v in docs[0].items() if k not in _SEGMENT_FIELDS}
        whole["data"] = data
        return RawMessage(
            data=json_bytes(whole), origin=origin, doc=whole, parsed=True, segments=len(docs)
        )

    # ------------------------------------------------------------------ parts

    def _column_types(
        self, cols: Any, metadata: dict[str, Any]
    ) -> tuple[dict[str, str], list[int]]:
        if cols is None:
            return {}, []
        if not isinstance(cols, list):
            raise self.fail("BAD_DATA", f"'cols' must be an array, got {kind(cols)}")
        types: dict[str, str] = {}
        indexes: list[int] = []
        unknown: dict[str, str] = {}
        for c in cols:
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise self.fail("BAD_DATA", f"'cols' entry without a name: {c!r}")
            native = c.get("type")
            try:
                types[c["name"]] = _sqlserver_type(str(native))
            except ValueTypeError:
                # kept as text and named, never rejected: the row is still readable
                types[c["name"]] = "string"
                unknown[c["name"]] = str(native)
            if isinstance(c.get("index"), int) and not isinstance(c.get("index"), bool):
                indexes.append(c["index"])
        if unknown:
            metadata["unknown_types"] = unknown
        return types, indexes

    def _image(self, value: Any, name: str, types: Mapping[str, str]) -> dict[str, Any] | None:
        image = json_member(value, name, "BAD_ROW_IMAGE")
        if image is None or image == {}:
            # "{}" is how CES writes "no image"
            return None
        if not isinstance(image, dict):
            raise self.fail("BAD_ROW_IMAGE", f"'{name}' must be a JSON object, got {kind(image)}")
        return {col: self._value(col, v, types) for col, v in image.items()}

    def _value(self, col: str, value: Any, types: Mapping[str, str]) -> Any:
        if value is None:
            return None
        t = types.get(col, "string")
        if t == "binary" and isinstance(value, str) and value[:2].lower() == "0x":
            value = hex_bytes(col, value[2:])
        return self.value(col, value, t)

    def _key(
        self,
        pkkey: Any,
        types: Mapping[str, str],
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        table: str,
        schema: str | None,
    ) -> dict[str, Any] | None:
        if isinstance(pkkey, list) and pkkey:
            key: dict[str, Any] = {}
            for entry in pkkey:
                if not isinstance(entry, dict) or not isinstance(entry.get("columnname"), str):
                    raise self.fail("BAD_KEY", f"'pkkey' entry without a columnname: {entry!r}")
                col = entry["columnname"]
                if types and col not in types:
                    raise self.fail(
                        "KEY_COLUMN_MISSING",
                        f"'pkkey' names column {col!r}, which 'cols' does not list",
                    )
                key[col] = self._value(col, entry.get("value"), types)
            return key
        return self.image_key(self.key_names(table, schema), before, after, op, table)

    def _order(self, doc: Mapping[str, Any], source: Mapping[str, Any], item: Item) -> Order:
        """``(commitlsn, sequencenumber)``, else the ``logicalid``'s LSN and sequence, else
        delivery order; the commit time, else the event's ``time``."""
        tx = source.get("transaction")
        position: dict[str, Any] = {}
        ts_text: Any = doc.get("time")
        tx_id: str | None = None
        try:
            if isinstance(tx, dict) and tx.get("commitlsn") is not None:
                commit = positions.mssql_lsn(str(tx["commitlsn"]))
                n = _int(tx.get("sequencenumber", 0), "transaction.sequencenumber")
                position = {
                    k: tx[k] for k in ("commitlsn", "beginlsn", "sequencenumber") if k in tx
                }
                if tx.get("committime") is not None:
                    ts_text = tx["committime"]
                fields = ("transaction.commitlsn", "transaction.sequencenumber")
                seq = self.sequence_of((commit, n), fields)
                tx_id = str(tx["commitlsn"])
            else:
                logical = doc.get("logicalid")
                m = _LOGICAL_ID.match(logical) if isinstance(logical, str) else None
                if m is None:
                    seq = self.delivery_order(item)
                else:
                    commit = positions.mssql_lsn(m.group(2))
                    n = int(m.group(3))
                    position = {"logicalid_lsn": m.group(2), "logicalid_sequence": n}
                    seq = self.sequence_of((commit, n), ("logicalid", "logicalid"))
                    tx_id = m.group(2)
        except ValueError as e:
            raise self.fail("BAD_POSITION", str(e)) from None
        ts = None if ts_text is None else self.instant(ts_text, "commit time")
        return Order(seq, position, ts, tx_id)


# ---------------------------------------------------------------------- helpers


def _sqlserver_type(native: str) -> str:
    return source_type("sqlserver", native)


def _seg_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        if len(value.strip()) > 18:
            raise Dialect.fail("SEGMENT_OUT_OF_RANGE", f"'{name}' {value[:40]!r} is out of range")
        return int(value)
    raise Dialect.fail("BAD_SEGMENT", f"'{name}' must be an integer, got {value!r}")


def _seg_bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise Dialect.fail("BAD_SEGMENT", f"'finalsegment' must be a boolean, got {value!r}")


def _int(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ValueError(f"{name} must be an integer, got {value!r}")
