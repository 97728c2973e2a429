"""SQL Server 2025 change event streaming (CES): CloudEvents in structured JSON mode.

Spec: ``specs/sqlserver-2025-ces-cloudevents.txt`` (the message-format page of SQL Server 2025
change event streaming), checked against the GA examples of the same documentation and a
captured event.

Vendor → canonical:

==============================================  ===============================================
CloudEvent / ``data``                           canonical field
==============================================  ===============================================
``id``                                          ``id``
``operation`` ``INS``/``UPD``/``DEL``           ``operation`` INSERT/UPDATE/DELETE
``data.eventsource.db``/``schema``/``tbl``      ``database``/``schema``/``table``
``data.eventsource.cols[].type``                ``types`` (through the SQL Server type table)
``data.eventsource.pkkey[]``                    ``key`` (typed like its column)
``data.eventrow.old``/``current`` (JSON text)   ``before``/``after``; ``"{}"`` means no image
``transaction.commitlsn`` + ``sequencenumber``  ``sequence`` (commit LSN, then order in it)
``logicalid`` ``<guid>:<lsn>:<seq>``            ``sequence`` when ``transaction`` is absent
``transaction.committime``, else ``time``       ``timestamp``
``transaction.commitlsn``                       ``transaction_id``
everything else                                 ``position`` / ``metadata``
==============================================  ===============================================

``source`` is always ``sqlserver``. Every value arrives as text; ``cols`` gives each column's
SQL Server type, which :data:`cdcflow.types.SQLSERVER` turns into a canonical type (e.g.
``datetime`` → timestamp without zone, ``datetimeoffset`` → timestamp, ``decimal(10,2)`` →
decimal(10,2)). A type the table does not know is kept as text and named in
``metadata.unknown_types``. ``binary``/``varbinary`` values written ``0x…`` are read as hex.

Contradictions of the spec, all accepted:

* the attribute list names ``segmentindex``/``finalsegment``; the spec's own examples carry
  ``splitindex``/``splittotalcnt`` (the preview shape). GA output uses ``segmentindex``, and a
  captured single-segment event has ``segmentindex`` 1 (one-based) where the docs show 0.
* the data member is called both ``eventrow`` and ``eventdata``.
* ``pkkey[].value`` is typed "string" in the schema and "string/int/etc." in the text.
* commit LSNs are written ``0000002C:00000300:017C`` in ``transaction`` and without colons in
  ``logicalid``; both parse to the same number.
* ``datacontenttype`` is ``application/json`` in the docs and ``application/avro-json`` in
  captured output; both carry JSON ``data``.

Partial rows: a table streamed without all columns (``include_all_columns = 0``) lists only the
key and the changed columns in ``cols``, with the original column ``index`` values. When those
indexes are not ``0..n-1`` an UPDATE is a *partial* event: the absent columns are unknown, not
NULL. When the changed columns happen to be the first ones nothing in the message tells, so a
source streaming such tables sets the option ``partial_updates: true`` (every UPDATE is then
read as partial, which is also right for updates that list every column).

Split messages: an event over the stream group's ``max_message_size_kb`` arrives as segments
sharing ``logicalid`` (``segmentindex``/``finalsegment``, or ``splitindex``/``splittotalcnt``).
The decoder returns each as a :class:`~cdcflow.dialects.base.Segment`; :mod:`cdcflow.segments`
decides when a group is whole (across files, batches and runs in the pipeline) and
:meth:`SqlServerCesDialect.reassemble` joins the ``data`` pieces in segment order. The spec does
not say where an event is cut; segments are read as CloudEvents each carrying the next piece
of ``data``.

Serializations: JSON (one event, JSON lines, or a JSON array — a CloudEvents batch); Avro
object-container files of CloudEvent records and single schemaless Avro CloudEvents (the spec's
record, or the source option ``avro_schema``), whose ``data`` bytes hold JSON or, under Avro
serialization, Avro binary of the spec's Data record (bytes that are neither are kept as
``data_base64`` until joined or decoded); Event Hubs Capture files (structured bodies, or
binary content mode with ``ce_`` properties); Kafka records written as JSON (``headers``,
``value``/``value_base64``), structured or in binary content mode; and binary content mode
over transport headers (``ce-*``) given with the message.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from cdcflow import positions, sequence
from cdcflow.dialects.base import Decoded, Dialect, RawMessage, Segment
from cdcflow.errors import DecodeError
from cdcflow.event import new_event
from cdcflow.framing import header_map, parse_json
from cdcflow.types import ValueTypeError, convert, parse_timestamp, source_type

OPERATIONS: dict[str, str] = {"INS": "INSERT", "UPD": "UPDATE", "DEL": "DELETE"}
_LOGICAL_ID = re.compile(r"^\s*([^:]*):([0-9A-Fa-f:x]+?):(\d+)\s*$")
_CE_ATTRIBUTES = ("specversion", "type", "source", "id")


class SqlServerCesDialect(Dialect):
    """Decoder for SQL Server 2025 change event streaming CloudEvents (JSON)."""

    name: ClassVar[str] = "sqlserver_ces"
    binary_extensions: ClassVar[tuple[str, ...]] = (".avro",)

    # ------------------------------------------------------------------ Avro files

    def frame(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """``.avro`` files: object-container files of CES CloudEvent records (``data`` as
        bytes) or of Event Hubs Capture records (the CloudEvent in ``Body``; binary content
        mode's ``ce_*`` attributes in ``Properties``), one message per record with ``offset``
        = record number; a file without the container header is one schemaless Avro
        CloudEvent (the spec's record, or the source option ``avro_schema``)."""
        if not (origin or "").lower().endswith(self.binary_extensions):
            return None
        import fastavro

        if not data.startswith(_OCF_MAGIC):
            try:
                record = self._schemaless(data)
            except DecodeError as e:
                return [_error_message(data, origin, 0, e.code, e.message)]
            return [_avro_message(record, origin, 0)]
        out: list[RawMessage] = []
        try:
            for i, record in enumerate(fastavro.reader(io.BytesIO(data))):
                out.append(_avro_message(record, origin, i))
        except Exception as e:  # fastavro raises many types for corrupt input
            problem = f"corrupt Avro file after {len(out)} record(s): {type(e).__name__}: {e}"
            out.append(_error_message(data, origin, len(out), "CORRUPT_AVRO", problem))
        return out

    def _schemaless(self, data: bytes) -> Any:
        """One schemaless Avro CloudEvent record (the whole body must be consumed)."""
        import fastavro

        schema = self._avro_schema()
        buf = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(buf, schema)
        except Exception as e:  # fastavro raises many types for corrupt input
            raise self.fail(
                "CORRUPT_AVRO", f"not a schemaless Avro CloudEvent: {type(e).__name__}: {e}"
            ) from None
        if buf.tell() != len(data):
            raise self.fail(
                "CORRUPT_AVRO",
                f"schemaless Avro CloudEvent ends at byte {buf.tell()} of {len(data)}: not this "
                "schema (set the source option avro_schema)",
            )
        return record

    def _avro_schema(self) -> Any:
        cached = getattr(self, "_parsed_schema", None)
        if cached is not None:
            return cached
        import fastavro

        given = self.options.extra.get("avro_schema")
        schema: Any = CLOUDEVENT_AVRO_SCHEMA
        if isinstance(given, dict):
            schema = given
        elif isinstance(given, str) and given.lstrip().startswith("{"):
            schema = orjson.loads(given)
        elif isinstance(given, str):
            try:
                with open(given, "rb") as f:
                    schema = orjson.loads(f.read())
            except (OSError, orjson.JSONDecodeError) as e:
                raise self.fail("BAD_SCHEMA", f"cannot read avro_schema {given!r}: {e}") from None
        parsed = fastavro.parse_schema(schema)
        self._parsed_schema = parsed
        return parsed

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.headers and _ce_attributes(header_map(msg.headers)):
            return 1.0 if _is_ces_type(header_map(msg.headers)) else 0.8
        if isinstance(doc, dict) and _is_kafka_record(doc):
            attrs = _ce_attributes(header_map(doc.get("headers")))
            if attrs:
                return 1.0 if ".SQL.CES." in str(attrs.get("type", "")).upper() else 0.8
            value = doc.get("value")
            if isinstance(value, dict):
                return self.recognise(RawMessage(b""), value)
            if isinstance(value, str):
                return 0.95 if "specversion" in value and ".SQL.CES." in value.upper() else 0.0
            return 0.5 if "value_base64" in doc else 0.0
        if doc is None:
            # an unreadable record of an .avro file this dialect framed
            return 0.6 if (msg.origin or "").lower().endswith(self.binary_extensions) else 0.0
        if isinstance(doc, list):
            first = doc[0] if doc else None
            return 0.9 * self.recognise(msg, first) if isinstance(first, dict) else 0.0
        if not isinstance(doc, dict):
            return 0.0
        typ = doc.get("type")
        if "specversion" in doc and isinstance(typ, str) and ".SQL.CES." in typ.upper():
            return 1.0
        if "specversion" in doc and doc.get("operation") in OPERATIONS and "data" in doc:
            return 0.9
        return 0.0

    # ------------------------------------------------------------------ decoding

    def decode(self, msg: RawMessage) -> list[Decoded]:
        headers = dict(msg.headers or {})
        if "x-error" in headers:
            raise self.fail(
                headers["x-error"].decode(), headers.get("x-error-message", b"").decode()
            )
        transport = header_map(msg.headers) if msg.headers else {}
        attrs = _ce_attributes(transport)
        if "specversion" in attrs:
            # binary content mode over a transport with headers: the body is `data`
            doc: Any = {**_texts(attrs), **_data_fields(msg.data)}
        else:
            doc = parse_json(msg)
        if isinstance(doc, dict) and _is_kafka_record(doc):
            doc = self._from_kafka_record(doc, transport)
        if isinstance(doc, list):
            # a JSON array / application/cloudevents-batch+json body: one event per item
            out: list[Decoded] = []
            for i, item in enumerate(doc):
                try:
                    out.append(self._event(item, msg, i))
                except DecodeError as e:
                    out.append(self.reject(e.code, e.message, orjson.dumps(item), i))
            return out
        return [self._event(doc, msg, 0)]

    def _from_kafka_record(self, doc: Mapping[str, Any], transport: Mapping[str, str]) -> Any:
        """A Kafka record written as JSON (``key``, ``value`` or ``value_base64``,
        ``headers``, ``topic``/``partition``/``offset``/``timestamp``) → its CloudEvent: binary
        content mode when the headers carry ``ce_`` attributes (the value is ``data``),
        otherwise the value is a structured CloudEvent (JSON, or schemaless Avro bytes)."""
        headers = {**transport, **header_map(doc.get("headers"))}
        if "value" in doc:
            value = doc["value"]
        else:
            encoded = doc.get("value_base64")
            try:
                value = (
                    base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
                )
            except (binascii.Error, ValueError):
                raise self.fail("BAD_DATA", "Kafka record 'value_base64' is not base64") from None
        kafka = {
            k: doc[k] for k in ("topic", "partition", "offset", "key", "timestamp") if k in doc
        }
        attrs = _ce_attributes(headers)
        if "specversion" in attrs:
            if isinstance(value, dict | list):
                body = orjson.dumps(value)
            elif isinstance(value, str):
                body = value.encode("utf-8")
            else:
                body = value or b""
            event: Any = {**_texts(attrs), **_data_fields(body)}
        elif isinstance(value, dict):
            event = value
        elif isinstance(value, str):
            try:
                event = orjson.loads(value)
            except orjson.JSONDecodeError as e:
                raise self.fail("NOT_JSON", f"Kafka record value is not JSON: {e}") from None
        elif isinstance(value, bytes):
            if _looks_like_json(value):
                try:
                    event = orjson.loads(value)
                except orjson.JSONDecodeError as e:
                    raise self.fail("NOT_JSON", f"Kafka record value is not JSON: {e}") from None
            else:
                event = _avro_message(self._schemaless(value), None, 0).doc
        else:
            raise self.fail("NOT_AN_EVENT", "Kafka record without a value")
        if isinstance(event, dict) and kafka:
            event = {**event, "_kafka": kafka}
        return event

    def _event(self, doc: Any, msg: RawMessage, item: int) -> dict[str, Any] | Segment:
        if not isinstance(doc, dict):
            raise self.fail("NOT_AN_EVENT", f"a CloudEvent must be a JSON object, got {_kind(doc)}")
        missing = [a for a in _CE_ATTRIBUTES if a not in doc]
        if missing:
            raise self.fail("NOT_AN_EVENT", f"CloudEvent lacks required attribute(s) {missing}")
        ce_type = str(doc.get("type"))
        if ".DML." not in ce_type.upper():
            raise self.fail(
                "UNSUPPORTED_EVENT_TYPE",
                f"CloudEvent type {ce_type!r} is not a CES DML event; only DML events carry rows",
            )
        metadata: dict[str, Any] = {
            k: doc[k]
            for k in (
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
            if k in doc
        }
        if isinstance(doc.get("_eventhubs"), dict):
            metadata["eventhubs"] = doc["_eventhubs"]
        if isinstance(doc.get("_kafka"), dict):
            metadata["kafka"] = doc["_kafka"]
        if isinstance(doc.get("_segments"), int):
            metadata["segments"] = doc["_segments"]
        segment, data = self._segment(doc, msg, item)
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
            data = _data_document(_data_member(doc))
        if not isinstance(data, dict):
            raise self.fail("BAD_DATA", f"'data' must hold a JSON object, got {_kind(data)}")
        source = data.get("eventsource")
        if not isinstance(source, dict):
            raise self.fail("BAD_DATA", "'data' has no 'eventsource' object")
        row = data.get("eventrow", data.get("eventdata"))
        if not isinstance(row, dict):
            raise self.fail("BAD_DATA", "'data' has no 'eventrow' (or 'eventdata') object")
        table = source.get("tbl")
        if not isinstance(table, str) or not table:
            raise self.fail("MISSING_TABLE", "'eventsource' has no 'tbl'")
        schema = source.get("schema") if isinstance(source.get("schema"), str) else None
        database = source.get("db") if isinstance(source.get("db"), str) else None

        types, indexes = self._column_types(source.get("cols"), metadata)
        declared = self.options.types_for(table, schema)
        for col, native in declared.items():
            types[col] = source_type("sqlserver", native)

        before = self._image(row.get("old"), "old", types)
        after = self._image(row.get("current"), "current", types)
        if op in ("INSERT", "UPDATE") and after is None:
            raise self.fail("MISSING_AFTER", f"{op} event has an empty 'current' row image")
        key = self._key(source.get("pkkey"), types, op, before, after, table, schema)
        gaps = bool(indexes) and sorted(indexes) != list(range(len(indexes)))
        partial = op == "UPDATE" and (gaps or bool(self.options.extra.get("partial_updates")))

        seq, position, tx_id, ts = self._order(doc, source, msg, item, metadata)
        return new_event(
            id=str(doc["id"]),
            dialect=self.name,
            source="sqlserver",
            database=database,
            schema=schema,
            table=table,
            operation=op,
            timestamp=ts,
            transaction_id=tx_id,
            sequence=seq,
            position=position,
            key=key,
            before=before,
            after=after,
            partial=partial,
            metadata=metadata,
            types={c: t for c, t in types.items() if _present(c, before, after, key)},
        )

    # ------------------------------------------------------------------ parts

    def _segment(
        self, doc: Mapping[str, Any], msg: RawMessage, item: int
    ) -> tuple[Segment | None, Any]:
        """``(None, data)`` for a whole message (one segment), else ``(Segment, _UNPARSED)``.
        ``data`` is the parsed ``data`` member when telling the two apart needed it."""
        total: int | None = None
        final: bool | None = None
        if "segmentindex" in doc or "finalsegment" in doc:
            index = _seg_int(doc.get("segmentindex"), "segmentindex")
            final = _seg_bool(doc.get("finalsegment"))
            # one segment: final at index 0 (the docs' numbering)
            if final is True and index in (0, None):
                return None, _UNPARSED
            # final at index 1: a lone segment numbered from 1 (captured output) or the last of
            # two numbered from 0 — a lone segment's data is a whole JSON document, a piece
            # of a split one is not
            if final is True and index == 1:
                try:
                    data = _data_document(_data_member(doc))
                except DecodeError:
                    data = _UNPARSED
                if isinstance(data, dict):
                    return None, data
        elif "splitindex" in doc or "splittotalcnt" in doc:
            index = _seg_int(doc.get("splitindex"), "splitindex")
            total = _seg_int(doc.get("splittotalcnt"), "splittotalcnt")
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
        whole_line = msg.doc is doc and not (msg.origin or "").lower().endswith(".avro")
        raw = msg.data if whole_line else orjson.dumps(doc)
        return Segment(group, index, final, total, raw, self.name, item), _UNPARSED

    def reassemble(self, segments: list[bytes], origin: str | None) -> RawMessage:
        """Segments (in order) → one CloudEvent: the first segment's attributes with ``data``
        the concatenation of every segment's ``data`` (text, or ``data_base64`` bytes).

        The spec does not say how an event is cut; this reads each segment as a CloudEvent
        carrying the next piece of the ``data`` payload, which is what a size-bounded split of
        a CloudEvent whose attributes are small can be."""
        docs: list[Any] = []
        for i, raw in enumerate(segments):
            try:
                docs.append(orjson.loads(raw))
            except orjson.JSONDecodeError as e:
                raise self.fail("BAD_SEGMENT", f"segment {i} is not JSON: {e}") from None
        pieces: list[bytes] = []
        for i, d in enumerate(docs):
            value = _data_member(d) if isinstance(d, dict) else None
            if isinstance(value, str):
                pieces.append(value.encode("utf-8"))
            elif isinstance(value, bytes | bytearray):
                pieces.append(bytes(value))
            else:
                raise self.fail(
                    "BAD_SEGMENT", f"segment {i} carries no text or bytes 'data' to join"
                )
        data = _data_document(b"".join(pieces))
        if not isinstance(data, dict):
            raise self.fail("BAD_DATA", f"reassembled 'data' is {_kind(data)}, not an object")
        whole = {k: v for k, v in docs[0].items() if k not in _SEGMENT_FIELDS}
        whole["data"] = data
        whole["_segments"] = len(docs)
        return RawMessage(data=orjson.dumps(whole), origin=origin, doc=whole, parsed=True)

    def _column_types(
        self, cols: Any, metadata: dict[str, Any]
    ) -> tuple[dict[str, str], list[int]]:
        if cols is None:
            return {}, []
        if not isinstance(cols, list):
            raise self.fail("BAD_DATA", f"'cols' must be an array, got {_kind(cols)}")
        types: dict[str, str] = {}
        indexes: list[int] = []
        unknown: dict[str, str] = {}
        for c in cols:
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise self.fail("BAD_DATA", f"'cols' entry without a name: {c!r}")
            native = c.get("type")
            try:
                types[c["name"]] = source_type("sqlserver", str(native))
            except ValueTypeError:
                types[c["name"]] = "string"
                unknown[c["name"]] = str(native)
            if isinstance(c.get("index"), int) and not isinstance(c.get("index"), bool):
                indexes.append(c["index"])
        if unknown:
            metadata["unknown_types"] = unknown
        return types, indexes

    def _image(self, value: Any, name: str, types: Mapping[str, str]) -> dict[str, Any] | None:
        image = _json_member(value, name, "BAD_ROW_IMAGE")
        if image is None or image == {}:
            return None
        if not isinstance(image, dict):
            raise self.fail("BAD_ROW_IMAGE", f"'{name}' must be a JSON object, got {_kind(image)}")
        return {col: self._value(col, v, types) for col, v in image.items()}

    def _value(self, col: str, value: Any, types: Mapping[str, str]) -> Any:
        t = types.get(col, "string")
        if value is None:
            return None
        if t == "binary" and isinstance(value, str) and value[:2].lower() == "0x":
            try:
                return bytes.fromhex(value[2:])
            except ValueError:
                raise self.fail("BAD_VALUE", f"column {col!r}: not hex: {value[:40]!r}") from None
        try:
            return convert(value, t)
        except ValueTypeError as e:
            raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None

    def _key(
        self,
        pkkey: Any,
        types: Mapping[str, str],
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        table: str,
        schema: str | None,
    ) -> dict[str, Any]:
        key: dict[str, Any] = {}
        if isinstance(pkkey, list) and pkkey:
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
        names = self.options.keys_for(table, schema)
        image = before if op == "DELETE" else after
        if names and image is not None and all(n in image for n in names):
            return {n: image[n] for n in names}
        raise self.fail(
            "DELETE_WITHOUT_KEY" if op == "DELETE" else "MISSING_KEY",
            f"{op} event has no 'pkkey' and no configured key found in its row image",
        )

    def _order(
        self,
        doc: Mapping[str, Any],
        source: Mapping[str, Any],
        msg: RawMessage,
        item: int,
        metadata: dict[str, Any],
    ) -> tuple[str, dict[str, Any], str | None, dt.datetime | None]:
        tx = source.get("transaction")
        position: dict[str, Any] = {}
        ts_text: Any = doc.get("time")
        try:
            if isinstance(tx, dict) and tx.get("commitlsn") is not None:
                commit = positions.mssql_lsn(str(tx["commitlsn"]))
                n = _int(tx.get("sequencenumber", 0), "transaction.sequencenumber")
                position = {
                    k: tx[k] for k in ("commitlsn", "beginlsn", "sequencenumber") if k in tx
                }
                if tx.get("committime") is not None:
                    ts_text = tx["committime"]
                seq = sequence.encode((commit, n))
                tx_id: str | None = str(tx["commitlsn"])
            else:
                logical = doc.get("logicalid")
                m = _LOGICAL_ID.match(logical) if isinstance(logical, str) else None
                if m is None:
                    metadata["sequence_source"] = "delivery"
                    offset = msg.offset if msg.index is None else msg.index
                    seq = sequence.delivery_sequence(msg.origin or "", offset, item)
                    tx_id = None
                else:
                    commit = positions.mssql_lsn(m.group(2))
                    n = int(m.group(3))
                    position = {"logicalid_lsn": m.group(2), "logicalid_sequence": n}
                    seq = sequence.encode((commit, n))
                    tx_id = m.group(2)
        except ValueError as e:
            raise self.fail("BAD_POSITION", str(e)) from None
        ts: dt.datetime | None = None
        if ts_text is not None:
            try:
                ts = parse_timestamp(ts_text)
            except ValueTypeError as e:
                raise self.fail("BAD_TIMESTAMP", f"commit time: {e}") from None
        return seq, position, tx_id, ts


# ---------------------------------------------------------------------- helpers

_CAPTURE_FIELDS = frozenset({"SequenceNumber", "Offset", "EnqueuedTimeUtc", "Body"})
_CE_PREFIXES = ("cloudEvents:", "cloudEvents_", "ce_", "ce-")


def _avro_message(record: Any, origin: str | None, i: int) -> RawMessage:
    """One Avro record as a message whose parsed document is a CloudEvent."""
    if isinstance(record, dict) and _CAPTURE_FIELDS <= record.keys():
        body = record.get("Body") or b""
        props = record.get("Properties") or {}
        attrs = {
            k[len(p) :]: v
            for k, v in props.items()
            for p in _CE_PREFIXES
            if isinstance(k, str) and k.startswith(p)
        }
        capture = {
            "sequence_number": record.get("SequenceNumber"),
            "offset": record.get("Offset"),
            "enqueued_time": record.get("EnqueuedTimeUtc"),
        }
        if "specversion" in attrs:
            # binary content mode: attributes in properties, the body is `data`
            doc: Any = {**_texts(attrs), **_data_fields(bytes(body))}
        else:
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                return RawMessage(data=bytes(body), origin=origin, offset=i)
        if isinstance(doc, dict):
            doc = {**doc, "_eventhubs": capture}
        return RawMessage(data=bytes(body), origin=origin, offset=i, doc=doc, parsed=True, index=i)
    if isinstance(record, dict):
        doc = {}
        for k, v in record.items():
            if k == "data" and isinstance(v, bytes):
                doc.update(_data_fields(v))
            else:
                doc[k] = bytes(v).decode("utf-8", "replace") if isinstance(v, bytes) else v
        return RawMessage(
            data=orjson.dumps(doc), origin=origin, offset=i, doc=doc, parsed=True, index=i
        )
    return RawMessage(data=orjson.dumps(record, default=str), origin=origin, offset=i)


def _texts(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if k in ("segmentindex", "splitindex", "splittotalcnt") and isinstance(v, str):
            v = int(v) if v.strip().lstrip("-").isdigit() else v
        if k == "finalsegment" and isinstance(v, str):
            v = v.strip().lower() == "true"
        out[k] = v
    return out


_UNPARSED = object()
_OCF_MAGIC = b"Obj\x01"

#: The spec's Avro schema of a CES CloudEvent (``data`` as bytes).
CLOUDEVENT_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ChangeEvent",
    "fields": [
        {"name": n, "type": t}
        for n, t in (
            ("specversion", "string"),
            ("type", "string"),
            ("source", "string"),
            ("id", "string"),
            ("logicalid", "string"),
            ("time", "string"),
            ("datacontenttype", "string"),
            ("operation", "string"),
            ("segmentindex", "int"),
            ("finalsegment", "boolean"),
            ("data", "bytes"),
        )
    ],
}


def _str_fields(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "type": "string"} for n in names]


#: The spec's Avro schema of ``data`` under Avro serialization (``old``/``current`` stay JSON
#: text).
DATA_AVRO_SCHEMA: dict[str, Any] = {
    "name": "Data",
    "type": "record",
    "fields": [
        {
            "name": "eventsource",
            "type": {
                "name": "EventSource",
                "type": "record",
                "fields": [
                    *_str_fields("db", "schema", "tbl"),
                    {
                        "name": "cols",
                        "type": {
                            "type": "array",
                            "items": {
                                "name": "Column",
                                "type": "record",
                                "fields": [
                                    *_str_fields("name", "type"),
                                    {"name": "index", "type": "int"},
                                ],
                            },
                        },
                    },
                    {
                        "name": "pkkey",
                        "type": {
                            "type": "array",
                            "items": {
                                "name": "PkKey",
                                "type": "record",
                                "fields": _str_fields("columnname", "value"),
                            },
                        },
                    },
                    {
                        "name": "transaction",
                        "type": {
                            "name": "Transaction",
                            "type": "record",
                            "fields": [
                                *_str_fields("commitlsn", "beginlsn"),
                                {"name": "sequencenumber", "type": "int"},
                                {"name": "committime", "type": "string"},
                            ],
                        },
                    },
                ],
            },
        },
        {
            "name": "eventrow",
            "type": {
                "name": "EventRow",
                "type": "record",
                "fields": _str_fields("old", "current"),
            },
        },
    ],
}
_PARSED_DATA_SCHEMA: Any = None


def _looks_like_json(body: bytes) -> bool:
    """JSON object or array text. (Avro binary of the Data record never starts with ``{`` or
    ``[``: its first byte is a zig-zag string length, always even.)"""
    return body.lstrip(b" \t\r\n")[:1] in (b"{", b"[")


def _data_document(value: Any) -> Any:
    """``data`` as a document: JSON text (or bytes of it), or — under Avro serialization —
    Avro binary of the spec's Data record."""
    if isinstance(value, bytes | bytearray) and value:
        body = bytes(value)
        if not _looks_like_json(body):
            return _avro_data(body)
        try:
            return _json_member(body, "data", "BAD_DATA")
        except DecodeError as e:
            try:
                return _avro_data(body)
            except DecodeError:
                raise e from None
    return _json_member(value, "data", "BAD_DATA")


def _avro_data(body: bytes) -> dict[str, Any]:
    global _PARSED_DATA_SCHEMA
    import fastavro

    if _PARSED_DATA_SCHEMA is None:
        _PARSED_DATA_SCHEMA = fastavro.parse_schema(DATA_AVRO_SCHEMA)
    buf = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(buf, _PARSED_DATA_SCHEMA)
    except Exception as e:  # fastavro raises many types for corrupt input
        raise Dialect.fail(
            "BAD_DATA", f"'data' is neither JSON nor an Avro Data record: {type(e).__name__}"
        ) from None
    if buf.tell() != len(body) or not isinstance(record, dict):
        raise Dialect.fail("BAD_DATA", "'data' is neither JSON nor an Avro Data record")
    return record


def _is_kafka_record(doc: Mapping[str, Any]) -> bool:
    return (
        "specversion" not in doc
        and ("value" in doc or "value_base64" in doc)
        and ("headers" in doc or "topic" in doc or "key" in doc)
    )


def _ce_attributes(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in headers.items():
        for p in _CE_PREFIXES:
            if k.lower().startswith(p.lower()):
                out[k[len(p) :]] = v
                break
    return out


def _is_ces_type(headers: Mapping[str, str]) -> bool:
    return ".SQL.CES." in str(_ce_attributes(headers).get("type", "")).upper()


def _error_message(
    data: bytes, origin: str | None, offset: int, code: str, text: str
) -> RawMessage:
    return RawMessage(
        data=data,
        origin=origin,
        offset=offset,
        headers={"x-error": code.encode(), "x-error-message": text.encode()},
    )


_SEGMENT_FIELDS = frozenset(
    {"segmentindex", "finalsegment", "splitindex", "splittotalcnt", "data", "data_base64"}
)


def _data_fields(body: bytes) -> dict[str, Any]:
    """``data`` from bytes: text when it is UTF-8 JSON, else ``data_base64`` (the CloudEvents
    JSON member for binary data) — Avro-serialized ``data``, or a segment cut inside a
    character, survives until decoded or joined."""
    if _looks_like_json(body):
        try:
            return {"data": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"data_base64": base64.b64encode(body).decode("ascii")}


def _data_member(doc: Mapping[str, Any]) -> Any:
    """``data``, or the bytes of ``data_base64``."""
    if "data" in doc or "data_base64" not in doc:
        return doc.get("data")
    value = doc["data_base64"]
    try:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value
    except (binascii.Error, ValueError):
        raise Dialect.fail("BAD_DATA", "'data_base64' is not base64") from None


def _seg_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise Dialect.fail("BAD_SEGMENT", f"'{name}' must be an integer, got {value!r}")


def _seg_bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise Dialect.fail("BAD_SEGMENT", f"'finalsegment' must be a boolean, got {value!r}")


def _json_member(value: Any, name: str, code: str) -> Any:
    """A member that is JSON text (CES writes ``data``, ``old`` and ``current`` as strings);
    an already-parsed object is accepted as it is."""
    if value is None or isinstance(value, dict | list):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise Dialect.fail("BAD_UTF8", f"'{name}' is not UTF-8 text") from None
    if not isinstance(value, str):
        raise Dialect.fail(code, f"'{name}' must be JSON text, got {_kind(value)}")
    if not value.strip():
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise Dialect.fail(code, f"'{name}' is not JSON: {e}") from None


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ValueError(f"{name} must be an integer, got {value!r}")


def _present(col: str, *images: Mapping[str, Any] | None) -> bool:
    return any(img is not None and col in img for img in images)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, int | float) else type(v).__name__
    )
