"""Google Cloud Datastream CDC events (Cloud Storage JSON and Avro files, BigQuery rows).

Spec: ``specs/google-datastream-cdc-events.txt`` (the Datastream AsyncAPI description: the
unified event envelope, the source-specific ``source_metadata`` variants and the BigQuery
``datastream_metadata`` column), checked against real files written by Datastream and its tools
(``conformance/datastream/``), which win where the two differ.

Vendor → canonical:

=================================================  ============================================
Datastream envelope                                canonical field
=================================================  ============================================
``uuid``                                           ``id``
``source_metadata.change_type`` (Spanner           ``operation``, see :data:`CHANGE_TYPES`;
``mod_type``), ``is_deleted``, ``read_method``     backfill reads are ``SNAPSHOT``
``read_method`` prefix, else the metadata shape    ``source`` (mysql, oracle, postgres, ...)
``source_metadata`` per source (table below)       ``database`` / ``schema`` / ``table``
``object`` (when the metadata names no table)      ``table``
``source_metadata.primary_keys``                   ``key`` (names; values from ``payload``)
``payload`` (the whole row)                        ``after``, or ``before`` for deletes
``source_timestamp`` (Spanner: ``commit_timestamp``) ``timestamp``
``tx_id`` / ``server_transaction_id``              ``transaction_id``
native position (table below), else ``sort_keys``  ``sequence``
``sort_keys`` and the native position fields       ``position``
``stream_name``, ``read_method``, ``object``, ...  ``metadata``
Avro header schema (logical types)                 ``types``
=================================================  ============================================

Per source (``source_metadata`` fields):

===========  ==============================  ====================  ===========================
source       database / schema / table       transaction_id        native position
===========  ==============================  ====================  ===========================
mysql        ``database`` / — / ``table``    —                     (binlog file number,
                                                                   ``log_position``)
oracle       ``database``/``schema``/        ``tx_id``             (``scn``, ``rs_id`` as
             ``table``                                             log/block/offset, ``ssn``)
postgres     ``database``/``schema``/        ``tx_id``             (``lsn`` as one integer)
             ``table``
sqlserver    ``database``/``schema``/        ``tx_id``             (``lsn`` as one integer)
             ``table``
salesforce   ``domain`` / — / ``object_name``  —                   ``sort_keys``
mongodb      ``database`` / — /              —                     ``sort_keys``
             ``collection``
spanner      ``database_id`` / — / ``table``  ``server_transaction  (``commit_timestamp`` in
                                              _id``                 ns, ``record_sequence``,
                                                                   ``mod_index``)
===========  ==============================  ====================  ===========================

Ordering. ``sequence`` is ``(phase, *position, half)``: ``phase`` is 0 for backfill reads and
1 for streamed changes; ``position`` is the source's native position (above) compared as
numbers, else the ``sort_keys`` element by element (numbers as numbers, text as text), else
``source_timestamp`` (marked ``sequence_source: source_timestamp``), else delivery order
(``sequence_source: delivery``); ``half`` is 0 for an ``UPDATE-DELETE`` and 1 for everything
else. The native position is preferred to ``sort_keys`` because real ``sort_keys`` begin with
the source timestamp in milliseconds (``[ts, log_file, log_position]``, ``[ts, scn, rs_id,
ssn]``, ``[ts, lsn]``): a MySQL row event carries the time its statement *started*, so a
transaction that waited on a row lock and committed later can carry the earlier timestamp.
Binlog position, SCN and LSN follow the commit order of changes to one row (row locks).

Backfill. ``read_method`` containing ``backfill`` or ``dump`` (``mysql-backfill-fulldump``,
``oracle-backfill``, the early ``oracle_dump``), or Spanner ``snapshot: true``, is a backfill
read → ``SNAPSHOT``. The spec says nothing about how backfill rows order against streamed
changes, and the data cannot tell: MySQL backfill rows carry ``log_file ''``/``0`` or null,
Oracle backfill rows an SCN whose meaning the spec does not give. The safe rule is taken:
phase 0 puts every backfill row below every streamed change of its table, so a backfill row
never overrides a streamed change of the same key (the stream holds every change after its
start position, so it is never older than a concurrent backfill read); backfill rows order
among themselves by their ``sort_keys`` (read time first).

Update pairs. MySQL and Oracle write a row update as ``UPDATE-DELETE`` (the old image) and
``UPDATE-INSERT`` (the new image) sharing one position (a plain MySQL update is often only the
``UPDATE-INSERT``). They are decoded separately, so the halves may arrive in different batches
or files: ``UPDATE-DELETE`` → ``DELETE`` of its image's key with ``half`` 0, ``UPDATE-INSERT``
→ ``UPDATE`` of its image (no before image) with ``half`` 1. When the key did not change the
insert half wins (same key, higher sequence): one update. When it changed, the old key is
deleted and the new key written. ``is_deleted`` is not trusted on ``UPDATE-DELETE`` (MySQL
writes true, Oracle false). A lone ``UPDATE-INSERT`` is a plain update (real MySQL output writes
updates that way), so no half waits for the other.

Sort key shapes: when ``sequence`` comes from ``sort_keys`` the event carries
``metadata.sequence_shape`` (``n``/``s``/``*`` per element); the engine dead-letters events of
a table whose shape does not fit the table's (``SEQUENCE_SHAPE_MISMATCH``).

Spanner: ``value_capture_type`` ``NEW_VALUES`` (or ``OLD_AND_NEW_VALUES``) sends only the
changed columns of an UPDATE: such events are ``partial``.

Types: from the Avro header schema when the file is Avro (``decimal`` → decimal(p,s),
``timestamp-millis``/``-micros`` → timestamp, ``date``, ``time-*``, Datastream's own
``varchar``/``json``/``number``/``time-interval-micros`` logical types, ``timestampTz``
records, ``multidimensionalArray_*`` records → json), overridden by configured column types
(native names through the source's type table: :data:`cdcflow.types.MYSQL`, ``ORACLE``,
``POSTGRES``, ``SQLSERVER``, ``SPANNER``), else inferred from JSON values. MySQL binary columns
arrive as hex text (as in Datastream's Avro output), other sources' as base64.

Keys: ``primary_keys`` (a name that differs only in case from a payload column is matched to
it), else ``replication_index`` when it lists column names, else the configured keys, else no
key (the engine dead-letters such rows ``KEY_UNKNOWN`` until keys are configured).

Contradictions of the spec (all forms accepted):

* ``replication_index`` is typed integer; Datastream's tools write an array of column names.
* ``log_position``/``scn``/``tx_id`` may be null or empty in backfill rows; ``tx_id`` is text in
  the spec and a number in PostgreSQL Avro files; ``source_timestamp`` is a string in the spec
  and a ``timestamp-millis`` long in Avro files (early files put ``logicalType`` on the field).
* ``read_timestamp``/``source_timestamp`` appear with ``T`` or a space and with or without a
  zone (UTC assumed).
* The ``ChangeType`` enum omits ``is_deleted``-only rows; early files have neither
  ``change_type`` nor ``is_deleted`` (read as ``UPSERT``, or ``SNAPSHOT`` when a backfill).
* BigQuery ``datastream_metadata`` names its fields in upper case (``UUID``,
  ``SOURCE_TIMESTAMP``); exported rows write them in lower case and INT64 as strings.

Cloud Storage layout: when a file's path has Datastream's folders
``{object}/{yyyy}/{mm}/{dd}/{hh}/{minute}/{file}``, the folder is kept as
``metadata.folder_object``; a folder that matches neither ``object`` nor the table adds
``metadata.folder_mismatch`` (a note, never a rejection). A file named like Datastream's objects
(``{hash}_{read_method}_{n}_{n}_{n}``) records ``metadata.file_read_method``.

BigQuery rows (a row with a ``datastream_metadata`` column): merge-mode rows are current
states (``UPSERT``, or ``DELETE`` when ``IS_DELETED``), ordered by ``SOURCE_TIMESTAMP``;
append-only rows carry ``CHANGE_TYPE`` and are ordered by ``SORT_KEYS`` (else
``CHANGE_SEQUENCE_NUMBER``). Keys come from the configuration.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import orjson

from cdcflow import positions, sequence
from cdcflow.dialects.base import Decoded, Dialect, RawMessage
from cdcflow.errors import DecodeError
from cdcflow.event import new_event
from cdcflow.framing import parse_json
from cdcflow.types import (
    DEFAULT_DECIMAL,
    ValueTypeError,
    convert,
    decimal_type,
    infer_type,
    json_default,
    parse_timestamp,
    source_type,
)

#: ``change_type`` → (canonical operation, half: 0 for the before image of an update pair).
CHANGE_TYPES: dict[str, tuple[str, int]] = {
    "INSERT": ("INSERT", 1),
    "CREATE": ("INSERT", 1),
    "UPDATE": ("UPDATE", 1),
    "DELETE": ("DELETE", 1),
    "UPDATE-INSERT": ("UPDATE", 1),
    "UPDATE-DELETE": ("DELETE", 0),
    "REPLACE": ("UPSERT", 1),
}

#: ``read_method`` prefix → source engine.
READ_METHOD_SOURCES: tuple[tuple[str, str], ...] = (
    ("mysql", "mysql"),
    ("oracle", "oracle"),
    ("postgres", "postgres"),
    ("sqlserver", "sqlserver"),
    ("salesforce", "salesforce"),
    ("mongodb", "mongodb"),
    ("mongo", "mongodb"),
    ("spanner", "spanner"),
)

#: ``source_metadata`` fields kept in ``position`` (the native position and sort order).
POSITION_FIELDS: tuple[str, ...] = (
    "log_file",
    "log_position",
    "scn",
    "rs_id",
    "ssn",
    "lsn",
    "physical_location",
    "commit_timestamp",
    "record_sequence",
    "mod_index",
)

#: ``source_metadata`` fields kept in ``metadata``.
METADATA_FIELDS: tuple[str, ...] = (
    "change_type",
    "mod_type",
    "is_deleted",
    "row_id",
    "primary_keys",
    "replication_index",
    "value_capture_type",
    "number_of_records_in_transaction",
    "project_id",
    "instance_id",
    "change_stream_name",
    "transaction_tag",
    "system_transaction",
    "snapshot",
)

_ENVELOPE_METADATA = ("stream_name", "read_method", "object", "schema_key", "read_timestamp")
_PARTIAL_CAPTURE = frozenset({"NEW_VALUES", "OLD_AND_NEW_VALUES"})
_OCF_MAGIC = b"Obj\x01"
_DIGITS = re.compile(r"^\s*\d+\s*$")
_ERROR_HEADER = "x-error"
_MARK_HEADER = "x-datastream"


class DatastreamDialect(Dialect):
    """Decoder for Google Cloud Datastream events (JSON, Avro object-container files, and
    BigQuery rows)."""

    name: ClassVar[str] = "datastream"
    binary_extensions: ClassVar[tuple[str, ...]] = (".avro",)

    # ------------------------------------------------------------------ Avro files

    def frame(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """``.avro`` files: Datastream object-container files, one message per record (``offset``
        = record number), column types from the header schema. A file that is not a Datastream
        Avro file (no ``payload`` record in its schema) is handed to the next registered dialect
        that frames ``.avro`` files. A damaged file keeps the records before the damage and adds
        one ``CORRUPT_AVRO`` message."""
        if not (origin or "").lower().endswith(self.binary_extensions):
            return None
        import fastavro

        if not data.startswith(_OCF_MAGIC):
            return self._hand_over(data, origin) or [
                _error(data, origin, 0, "CORRUPT_AVRO", "not an Avro object-container file")
            ]
        try:
            reader = fastavro.reader(io.BytesIO(data))
            schema = reader.writer_schema
        except Exception as e:  # fastavro raises many types for corrupt input
            return [_error(data, origin, 0, "CORRUPT_AVRO", f"unreadable Avro header: {e}")]
        if not _is_datastream_schema(schema):
            handed = self._hand_over(data, origin)
            if handed is not None:
                return handed
        columns = _avro_columns(schema)
        envelope_ms = _field_level_millis(schema)
        out: list[RawMessage] = []
        try:
            for i, record in enumerate(reader):
                out.append(_avro_message(record, columns, envelope_ms, origin, i))
        except Exception as e:  # fastavro raises many types for corrupt input
            problem = f"corrupt Avro file after {len(out)} record(s): {type(e).__name__}: {e}"
            out.append(_error(data, origin, len(out), "CORRUPT_AVRO", problem))
        return out

    def _hand_over(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        from cdcflow.dialects import dialect_names, get_dialect

        name = (origin or "").lower()
        for other in dialect_names():
            if other == self.name:
                continue
            d = get_dialect(other, self.options)
            if d.binary_extensions and name.endswith(d.binary_extensions):
                framed = d.frame(data, origin)
                if framed is not None:
                    return framed
        return None

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.headers and _MARK_HEADER in msg.headers:
            return 1.0
        if isinstance(doc, list):
            first = doc[0] if doc else None
            return 0.9 * self.recognise(RawMessage(b""), first) if isinstance(first, dict) else 0.0
        if not isinstance(doc, dict):
            return 0.0
        meta = doc.get("source_metadata")
        if isinstance(meta, dict) and isinstance(doc.get("payload"), dict):
            return 1.0 if ("read_method" in doc or "stream_name" in doc) else 0.9
        if isinstance(meta, dict) and "read_method" in doc:
            return 0.8
        if isinstance(_bq_metadata(doc), dict):
            return 0.9
        return 0.0

    # ------------------------------------------------------------------ decoding

    def decode(self, msg: RawMessage) -> list[Decoded]:
        headers = dict(msg.headers or {})
        if _ERROR_HEADER in headers:
            raise self.fail(
                headers[_ERROR_HEADER].decode(), headers.get("x-error-message", b"").decode()
            )
        doc = parse_json(msg)
        if isinstance(doc, list):
            out: list[Decoded] = []
            for i, item in enumerate(doc):
                try:
                    out.append(self._event(item, msg, i))
                except DecodeError as e:
                    out.append(self.reject(e.code, e.message, _dumps(item), i))
            return out
        return [self._event(doc, msg, 0)]

    def _event(self, doc: Any, msg: RawMessage, item: int) -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a Datastream event must be a JSON object, got {_kind(doc)}"
            )
        if "source_metadata" not in doc and isinstance(_bq_metadata(doc), dict):
            return self._bigquery_row(doc, msg, item)
        payload = doc.get("payload")
        meta = doc.get("source_metadata")
        if payload is None and meta is None:
            raise self.fail(
                "NOT_AN_EVENT", "not a Datastream event: no 'source_metadata' and no 'payload'"
            )
        if not isinstance(payload, dict):
            raise self.fail("MISSING_PAYLOAD", f"'payload' must be an object, got {_kind(payload)}")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise self.fail(
                "BAD_METADATA", f"'source_metadata' must be an object, got {_kind(meta)}"
            )
        read_method = doc.get("read_method")
        read_method = read_method if isinstance(read_method, str) else ""
        source = _source(read_method, meta)
        backfill = _is_backfill(read_method, meta)
        op, half = self._operation(meta, backfill)
        database, schema, table = _where(source, meta, doc)
        if not table:
            raise self.fail("MISSING_TABLE", "no table in 'source_metadata' and no 'object'")

        metadata: dict[str, Any] = {k: doc[k] for k in _ENVELOPE_METADATA if doc.get(k) is not None}
        metadata.update({k: meta[k] for k in METADATA_FIELDS if meta.get(k) is not None})
        if isinstance(metadata.get("read_timestamp"), dt.datetime):
            metadata["read_timestamp"] = _iso(metadata["read_timestamp"])
        _folder_check(msg.origin, doc.get("object"), database, schema, table, metadata)

        avro_types = doc.get("_avro_types")
        types: dict[str, str] = dict(avro_types) if isinstance(avro_types, dict) else {}
        unknown: dict[str, str] = {}
        for col, native in self._declared(table, schema, database).items():
            try:
                types[col] = source_type(source or "", native)
            except ValueTypeError:
                unknown[col] = native
        if unknown:
            metadata["unknown_types"] = unknown
        row = {col: self._value(col, v, types, source) for col, v in payload.items()}
        for col, v in row.items():
            if col not in types:
                inferred = infer_type(v)
                if inferred is not None:
                    types[col] = inferred
                    row[col] = convert(v, inferred)  # objects and arrays become JSON text

        names = self._key_names(meta, table, schema, database)
        key: dict[str, Any] | None = None
        if names:
            key = {}
            for n in names:
                found = _column(n, row)
                if found is None:
                    raise self.fail(
                        "KEY_COLUMN_MISSING",
                        f"key column {n!r} is not in the payload of this {op} event",
                    )
                key[found] = row[found]
        partial = (
            op == "UPDATE"
            and str(meta.get("value_capture_type", "")).upper() in _PARTIAL_CAPTURE
            and half == 1
        )
        seq, position = self._order(doc, meta, source, backfill, half, msg, item, metadata)
        tx = meta.get("tx_id", meta.get("server_transaction_id"))
        return new_event(
            id=str(doc["uuid"]) if doc.get("uuid") else None,
            dialect=self.name,
            source=source,
            database=database,
            schema=schema,
            table=table,
            operation=op,
            timestamp=self._timestamp(doc, meta),
            transaction_id=str(tx) if tx not in (None, "") else None,
            sequence=seq,
            position=position,
            key=key,
            before=row if op == "DELETE" else None,
            after=None if op == "DELETE" else row,
            partial=partial,
            metadata=metadata,
            types={c: t for c, t in types.items() if c in row},
        )

    # ------------------------------------------------------------------ parts

    def _operation(self, meta: Mapping[str, Any], backfill: bool) -> tuple[str, int]:
        raw = meta.get("change_type")
        if raw is None:
            raw = meta.get("mod_type")
        deleted = meta.get("is_deleted") is True
        if raw is not None:
            if (
                not isinstance(raw, str)
                or raw.strip().upper().replace("_", "-") not in CHANGE_TYPES
            ):
                raise self.fail(
                    "UNKNOWN_CHANGE_TYPE",
                    f"unknown change_type {raw!r}; expected one of {', '.join(CHANGE_TYPES)}",
                )
            op, half = CHANGE_TYPES[raw.strip().upper().replace("_", "-")]
            if half == 0:
                return op, half
        else:
            op, half = ("SNAPSHOT" if backfill else "UPSERT"), 1
        if deleted:
            return "DELETE", 1
        if backfill:
            return "SNAPSHOT", 1
        return op, half

    def _declared(self, table: str, schema: str | None, database: str | None) -> Mapping[str, str]:
        found = self.options.types_for(table, schema)
        if not found and database:
            found = self.options.types_for(table, database)
        return found

    def _key_names(
        self, meta: Mapping[str, Any], table: str, schema: str | None, database: str | None
    ) -> tuple[str, ...] | None:
        for field in ("primary_keys", "replication_index"):
            names = meta.get(field)
            if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
                return tuple(names)
        configured = self.options.keys_for(table, schema)
        if configured is None and database:
            configured = self.options.keys_for(table, database)
        return configured or None

    def _value(self, col: str, value: Any, types: Mapping[str, str], source: str | None) -> Any:
        t = types.get(col)
        if value is None:
            return None
        if t is None:
            return value
        if t == "binary" and isinstance(value, str) and source == "mysql":
            try:
                return bytes.fromhex(value)
            except ValueError:
                raise self.fail(
                    "BAD_VALUE", f"column {col!r}: MySQL binary is hex text, got {value[:40]!r}"
                ) from None
        try:
            return convert(value, t)
        except ValueTypeError as e:
            raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None

    def _timestamp(self, doc: Mapping[str, Any], meta: Mapping[str, Any]) -> dt.datetime | None:
        value = doc.get("source_timestamp")
        if value is None:
            value = meta.get("commit_timestamp")
        if value is None:
            return None
        try:
            return _instant(value)
        except (ValueTypeError, ValueError, OverflowError) as e:
            raise self.fail("BAD_TIMESTAMP", f"source_timestamp: {e}") from None

    def _order(
        self,
        doc: Mapping[str, Any],
        meta: Mapping[str, Any],
        source: str | None,
        backfill: bool,
        half: int,
        msg: RawMessage,
        item: int,
        metadata: dict[str, Any],
    ) -> tuple[str, dict[str, Any]]:
        position: dict[str, Any] = {k: meta[k] for k in POSITION_FIELDS if meta.get(k) is not None}
        sort_keys = doc.get("sort_keys")
        if sort_keys is not None:
            position["sort_keys"] = sort_keys
        phase = 0 if backfill else 1
        try:
            native = None if backfill else _native_position(source, meta)
            if native is not None:
                return sequence.encode((phase, *native, half)), position
            if isinstance(sort_keys, list) and sort_keys:
                elements = [_sort_element(k) for k in sort_keys]
                metadata["sequence_source"] = "sort_keys"
                metadata["sequence_shape"] = _shape(elements)
                return sequence.encode((phase, *elements, half)), position
        except ValueError as e:
            raise self.fail("BAD_POSITION", str(e)) from None
        ts = doc.get("source_timestamp")
        if ts is not None:
            try:
                micros = _micros(_instant(ts))
            except (ValueTypeError, ValueError, OverflowError) as e:
                raise self.fail("BAD_TIMESTAMP", f"source_timestamp: {e}") from None
            metadata["sequence_source"] = "source_timestamp"
            return sequence.encode((phase, micros, half)), position
        metadata["sequence_source"] = "delivery"
        offset = msg.offset if msg.index is None else msg.index
        return sequence.delivery_sequence(msg.origin or "", offset, item), position

    # ------------------------------------------------------------------ BigQuery rows

    def _bigquery_row(self, doc: Mapping[str, Any], msg: RawMessage, item: int) -> dict[str, Any]:
        """A row of a Datastream-managed BigQuery table (exported as JSON): the table's columns
        plus ``datastream_metadata``. The row names no table: it comes from the source option
        ``table``, else the file name's stem."""
        meta = {str(k).upper(): v for k, v in (_bq_metadata(doc) or {}).items()}
        row = {k: v for k, v in doc.items() if k != "datastream_metadata"}
        table = self.options.extra.get("table") or _stem(msg.origin)
        if not table:
            raise self.fail("MISSING_TABLE", "a BigQuery row names no table; set option 'table'")
        change = meta.get("CHANGE_TYPE")
        if change is not None:
            norm = str(change).strip().upper()
            if norm not in CHANGE_TYPES:
                raise self.fail("UNKNOWN_CHANGE_TYPE", f"unknown CHANGE_TYPE {change!r}")
            op, half = CHANGE_TYPES[norm]
        else:
            op, half = "UPSERT", 1
        if _truthy(meta.get("IS_DELETED")):
            op, half = "DELETE", 1
        types: dict[str, str] = {}
        for col, native in self.options.types_for(table).items():
            try:
                types[col] = source_type(self.options.extra.get("source", ""), native)
            except ValueTypeError:
                types[col] = "string"
        values = {c: self._value(c, v, types, None) for c, v in row.items()}
        for c, v in values.items():
            if c not in types and infer_type(v) is not None:
                types[c] = infer_type(v) or "string"
        names = self.options.keys_for(table)
        key = (
            {n: values.get(n) for n in names} if names and all(n in values for n in names) else None
        )
        metadata: dict[str, Any] = {"bigquery": "append-only" if change is not None else "merge"}
        metadata.update({k.lower(): v for k, v in meta.items() if v is not None})
        ts: dt.datetime | None = None
        micros: int | None = None
        src_ts = meta.get("SOURCE_TIMESTAMP")
        if src_ts is not None:
            try:
                ms = (
                    int(src_ts)
                    if isinstance(src_ts, int | str) and _DIGITS.match(str(src_ts))
                    else None
                )
                ts = _instant(ms if ms is not None else src_ts)
                micros = _micros(ts)
            except (ValueTypeError, ValueError, OverflowError) as e:
                raise self.fail("BAD_TIMESTAMP", f"SOURCE_TIMESTAMP: {e}") from None
        sort_keys = meta.get("SORT_KEYS")
        csn = meta.get("CHANGE_SEQUENCE_NUMBER")
        if isinstance(sort_keys, list) and sort_keys:
            elements = [_sort_element(k) for k in sort_keys]
            seq = sequence.encode((1, *elements, half))
            metadata["sequence_source"] = "sort_keys"
            metadata["sequence_shape"] = _shape(elements)
        elif csn is not None:
            seq = sequence.encode((1, _sort_element(csn), half))
            metadata["sequence_source"] = "change_sequence_number"
        elif micros is not None:
            seq = sequence.encode((1, micros, half))
            metadata["sequence_source"] = "source_timestamp"
        else:
            offset = msg.offset if msg.index is None else msg.index
            seq = sequence.delivery_sequence(msg.origin or "", offset, item)
            metadata["sequence_source"] = "delivery"
        uuid = meta.get("UUID")
        return new_event(
            id=str(uuid) if uuid else None,
            dialect=self.name,
            source=self.options.extra.get("source") or None,
            table=str(table),
            operation=op,
            timestamp=ts,
            sequence=seq,
            position={"sort_keys": sort_keys, "change_sequence_number": csn},
            key=key,
            before=values if op == "DELETE" else None,
            after=None if op == "DELETE" else values,
            metadata=metadata,
            types={c: t for c, t in types.items() if c in values},
        )


# ---------------------------------------------------------------------- helpers


def _source(read_method: str, meta: Mapping[str, Any]) -> str | None:
    """The source engine, from ``read_method`` (``mysql-cdc-binlog``, ``oracle-backfill``,
    ``postgresql-cdc``...), else from the shape of ``source_metadata``."""
    low = read_method.lower()
    for prefix, source in READ_METHOD_SOURCES:
        if low.startswith(prefix):
            return source
    if "commit_timestamp" in meta or "mod_index" in meta or "record_sequence" in meta:
        return "spanner"
    if "collection" in meta:
        return "mongodb"
    if "object_name" in meta or "domain" in meta:
        return "salesforce"
    if "scn" in meta or "rs_id" in meta or "row_id" in meta:
        return "oracle"
    if "log_position" in meta or "log_file" in meta:
        return "mysql"
    if "physical_location" in meta or "replication_index" in meta:
        return "sqlserver"
    lsn = meta.get("lsn")
    if isinstance(lsn, str):
        return "postgres" if "/" in lsn else "sqlserver"
    return None


def _is_backfill(read_method: str, meta: Mapping[str, Any]) -> bool:
    low = read_method.lower()
    return "backfill" in low or "dump" in low or meta.get("snapshot") is True


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _where(
    source: str | None, meta: Mapping[str, Any], doc: Mapping[str, Any]
) -> tuple[str | None, str | None, str | None]:
    if source == "salesforce":
        return (
            _text(meta.get("domain")),
            None,
            _text(meta.get("object_name")) or _text(doc.get("object")),
        )
    if source == "mongodb":
        return (
            _text(meta.get("database")),
            None,
            _text(meta.get("collection")) or _text(doc.get("object")),
        )
    if source == "spanner":
        database = _text(meta.get("database_id")) or _text(meta.get("database"))
        return (
            database,
            _text(meta.get("schema")),
            _text(meta.get("table")) or _text(doc.get("object")),
        )
    table = _text(meta.get("table")) or _text(doc.get("object"))
    return _text(meta.get("database")), _text(meta.get("schema")), table


def _native_position(source: str | None, meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The source's own position as a tuple of numbers (``None`` when the row has none)."""
    if source == "mysql":
        file, pos = meta.get("log_file"), meta.get("log_position")
        if isinstance(file, str) and file and pos is not None:
            return positions.mysql_binlog(file, pos)
        return None
    if source == "oracle":
        scn = meta.get("scn")
        if scn is None or scn == "":
            return None
        ssn = meta.get("ssn")
        return (
            positions.oracle_scn(scn),
            *positions.oracle_rs_id(meta.get("rs_id")),
            int(ssn) if ssn not in (None, "") else 0,
        )
    if source in ("postgres", "sqlserver"):
        lsn = meta.get("lsn")
        if not isinstance(lsn, str) or not lsn.strip():
            return None
        return (positions.pg_lsn(lsn) if source == "postgres" else positions.mssql_lsn(lsn),)
    if source == "spanner":
        commit = meta.get("commit_timestamp")
        if not isinstance(commit, str) or not commit:
            return None
        record = meta.get("record_sequence")
        rs: int | str = 0
        if isinstance(record, int) and not isinstance(record, bool):
            rs = record
        elif isinstance(record, str):
            rs = int(record) if _DIGITS.match(record) else record
        mod = meta.get("mod_index", 0)
        if isinstance(mod, bool) or not isinstance(mod, int | str) or not _DIGITS.match(str(mod)):
            raise ValueError(f"mod_index must be an integer, got {mod!r}")
        return positions.timestamp_nanos(commit), rs, int(mod)
    return None


def _sort_element(v: Any) -> int | str | None:
    """One ``sort_keys`` element as a sequence element: numbers compare as numbers, text as
    text."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float | Decimal) and v == int(v):
        return int(v)
    if isinstance(v, dt.datetime):
        return _micros(v)
    return orjson.dumps(v, default=json_default).decode()


def _shape(elements: list[int | str | None]) -> str:
    """The kinds of ``sort_keys`` elements (``n`` number, ``s`` text, ``*`` null): the engine
    dead-letters events of a table whose shape differs from the table's
    (``SEQUENCE_SHAPE_MISMATCH``), since their sequences would not compare."""
    return ",".join("*" if e is None else "n" if isinstance(e, int) else "s" for e in elements)


def _instant(value: Any) -> dt.datetime:
    """``source_timestamp``: ISO text (``T`` or space, zone optional → UTC), an Avro
    ``timestamp-millis`` value, or epoch milliseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=value)
    return parse_timestamp(value)


def _micros(ts: dt.datetime) -> int:
    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _iso(ts: dt.datetime) -> str:
    return ts.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _column(name: str, row: Mapping[str, Any]) -> str | None:
    """The payload column a key name refers to (exact, else the only case-insensitive
    match)."""
    if name in row:
        return name
    matches = [c for c in row if c.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


_DATE_PARTS = (re.compile(r"^\d{4}$"),) + (re.compile(r"^\d{2}$"),) * 4
_OBJECT_NAME = re.compile(
    r"^(?P<hash>[0-9a-fA-F]{40})_(?P<read_method>[A-Za-z0-9-]+)_(?P<a>\d+)_(?P<b>\d+)_(?P<c>\d+)"
    r"(?:\.[A-Za-z0-9.]+)?$"
)


def parse_object_name(name: str) -> dict[str, Any] | None:
    """A Datastream Cloud Storage object's base name, ``<40-hex hash>_<read_method>_<n>_<n>_<n>``
    (with or without extension), as its parts; ``None`` for other names."""
    m = _OBJECT_NAME.match(re.split(r"[\\/]", name)[-1])
    if not m:
        return None
    return {
        "hash": m.group("hash"),
        "read_method": m.group("read_method"),
        "numbers": [int(m.group("a")), int(m.group("b")), int(m.group("c"))],
    }


def _folder_check(
    origin: str | None,
    obj: Any,
    database: str | None,
    schema: str | None,
    table: str,
    metadata: dict[str, Any],
) -> None:
    """Record the Cloud Storage object folder (``{object}/yyyy/mm/dd/hh/minute/file``) and note
    when it names another table."""
    if not origin:
        return
    named = parse_object_name(origin)
    if named is not None:
        metadata["file_read_method"] = named["read_method"]
    parts = re.split(r"[\\/]", origin)
    if len(parts) < 7:
        return
    dates = parts[-6:-1]
    if not all(p.match(d) for p, d in zip(_DATE_PARTS, dates, strict=True)):
        return
    folder = parts[-7]
    metadata["folder_object"] = folder
    expected = {
        n.lower()
        for n in (
            obj if isinstance(obj, str) else None,
            table,
            f"{schema}_{table}" if schema else None,
            f"{database}_{table}" if database else None,
        )
        if n
    }
    if folder.lower() not in expected and not folder.lower().endswith("_" + table.lower()):
        metadata["folder_mismatch"] = (
            f"file is under object folder {folder!r} but the event is for "
            f"{obj if isinstance(obj, str) else table!r}"
        )


def _bq_metadata(doc: Mapping[str, Any]) -> Any:
    for k in ("datastream_metadata", "DATASTREAM_METADATA"):
        if k in doc:
            return doc[k]
    return None


def _truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


def _stem(origin: str | None) -> str | None:
    if not origin:
        return None
    name = re.split(r"[\\/]", origin)[-1]
    return name.split(".", 1)[0] or None


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, int | float) else type(v).__name__
    )


def _dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, default=json_default, option=orjson.OPT_NON_STR_KEYS)


def _error(data: bytes, origin: str | None, offset: int, code: str, text: str) -> RawMessage:
    return RawMessage(
        data=data,
        origin=origin,
        offset=offset,
        headers={
            _ERROR_HEADER: code.encode(),
            "x-error-message": text.encode(),
            _MARK_HEADER: b"1",
        },
    )


# ---------------------------------------------------------------------- Avro schema → types


def _is_datastream_schema(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    names = {f.get("name") for f in schema.get("fields", []) if isinstance(f, dict)}
    return "payload" in names and ("source_metadata" in names or "read_method" in names)


def _field_level_millis(schema: Any) -> set[str]:
    """Envelope fields whose ``logicalType`` sits on the field instead of the type (early
    Datastream files): their longs are epoch milliseconds."""
    out: set[str] = set()
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and str(f.get("logicalType", "")).startswith("timestamp-"):
            out.add(str(f.get("name")))
    return out


#: How to turn a decoded Avro value of a column into a canonical value.
_Norm = str  # "plain" | "varchar" | "tz" | "interval" | "array"


def _avro_columns(schema: Any) -> dict[str, tuple[str, _Norm]]:
    """Payload column → (canonical type, normaliser) from the header schema."""
    out: dict[str, tuple[str, _Norm]] = {}
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and f.get("name") == "payload" and isinstance(f.get("type"), dict):
            named: dict[str, Any] = {}
            for col in f["type"].get("fields", []):
                out[col["name"]] = _avro_type(col["type"], named)
    return out


def _avro_type(t: Any, named: dict[str, Any]) -> tuple[str, _Norm]:
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        return _avro_type(non_null[0], named) if len(non_null) == 1 else ("json", "plain")
    if isinstance(t, str):
        if t in named:
            return _avro_type(named[t], named)
        return _AVRO_PRIMITIVES.get(t, ("string", "plain"))
    if not isinstance(t, dict):
        return "string", "plain"
    if t.get("name"):
        named.setdefault(str(t["name"]), t)
    logical = t.get("logicalType")
    base = t.get("type")
    if logical == "decimal":
        return decimal_type(int(t.get("precision", 38)), int(t.get("scale", 0))), "plain"
    if logical in ("timestamp-millis", "timestamp-micros", "timestamp-nanos"):
        return "timestamp", "plain"
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return "timestamp_ntz", "plain"
    if logical == "date":
        return "date", "plain"
    if logical in ("time-millis", "time-micros"):
        return "time", "plain"
    if logical == "time-interval-micros":
        return "string", "interval"
    if logical == "json":
        return "json", "plain"
    if logical == "uuid":
        return "uuid", "plain"
    if logical == "number":
        return DEFAULT_DECIMAL, "plain"
    if base == "record":
        name = str(t.get("name", ""))
        fields = {f.get("name"): f for f in t.get("fields", [])}
        if name == "varchar" or set(fields) == {"value", "length"}:
            return "string", "varchar"
        if name == "timestampTz" or set(fields) == {"timestamp", "offset"}:
            return "timestamp", "tz"
        if name.startswith("multidimensionalArray") or "nestedArray" in fields:
            return "json", "array"
        return "json", "plain"
    if base in ("array", "map"):
        return "json", "plain"
    if base == "enum":
        return "string", "plain"
    if base == "fixed":
        return "binary", "plain"
    if isinstance(base, str | list | dict):
        return _avro_type(base, named)
    return "string", "plain"


_AVRO_PRIMITIVES: dict[str, tuple[str, _Norm]] = {
    "boolean": ("boolean", "plain"),
    "int": ("int", "plain"),
    "long": ("bigint", "plain"),
    "float": ("float", "plain"),
    "double": ("double", "plain"),
    "bytes": ("binary", "plain"),
    "string": ("string", "plain"),
    # a named type reused by name (early files' "varchar")
    "varchar": ("string", "varchar"),
}


def _normalise(value: Any, how: _Norm) -> Any:
    if value is None:
        return None
    if how == "varchar" and isinstance(value, dict):
        return value.get("value")
    if how == "tz" and isinstance(value, dict):
        return value.get("timestamp")
    if how == "interval" and isinstance(value, int):
        sign = "-" if value < 0 else ""
        secs, micros = divmod(abs(value), 1_000_000)
        h, rest = divmod(secs, 3600)
        m, s = divmod(rest, 60)
        return f"{sign}{h:02d}:{m:02d}:{s:02d}" + (f".{micros:06d}" if micros else "")
    if how == "array":
        return orjson.dumps(_nested(value), default=json_default).decode()
    if isinstance(value, dict | list):
        return orjson.dumps(value, default=json_default).decode()
    return value


def _nested(value: Any) -> Any:
    """A ``multidimensionalArray_*`` record ``{nestedArray, elementValue}`` as nested lists."""
    if isinstance(value, dict):
        if value.get("nestedArray") is not None:
            return [_nested(v) for v in value["nestedArray"]]
        return value.get("elementValue")
    return value


def _avro_message(
    record: Any,
    columns: Mapping[str, tuple[str, _Norm]],
    envelope_ms: set[str],
    origin: str | None,
    i: int,
) -> RawMessage:
    """One Avro record as a message whose parsed document is the Datastream event, with the
    payload's column types under ``_avro_types``."""
    if not isinstance(record, dict):
        return _error(
            orjson.dumps(record, default=str), origin, i, "NOT_AN_EVENT", "record is not a record"
        )
    doc = dict(record)
    for name in envelope_ms:
        if isinstance(doc.get(name), int):
            doc[name] = _instant(doc[name])
    for name in ("read_timestamp", "source_timestamp"):
        if isinstance(doc.get(name), dt.datetime):
            doc[name] = _iso(doc[name])
    payload = doc.get("payload")
    if isinstance(payload, dict):
        doc["payload"] = {
            c: _normalise(v, columns.get(c, ("string", "plain"))[1]) for c, v in payload.items()
        }
        doc["_avro_types"] = {c: t for c, (t, _) in columns.items()}
    return RawMessage(data=_dumps(doc), origin=origin, offset=i, doc=doc, parsed=True, index=i)
