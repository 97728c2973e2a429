"""The Datastream decoder: the envelope table (change events, BigQuery rows), operations,
ordering per source and keys (Avro types from :mod:`.avro`). See ``docs/dialects/datastream.md``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, ClassVar

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.common import hex_bytes, present_types
from cdcflow.dialects.datastream.avro import avro_columns, field_level_millis, normalise
from cdcflow.dialects.datastream.metadata import (
    DIGITS,
    NATIVE_FIELDS,
    POSITION_FIELDS,
    epoch_micros,
    instant,
    is_backfill,
    native_position,
    sequence_shape,
    sort_element,
    source_of,
    where_of,
)
from cdcflow.dialects.datastream.names import folder_check, stem
from cdcflow.dialects.model import Capabilities, Decoded, Envelope, Item, Order
from cdcflow.transports.json import kind
from cdcflow.transports.message import RawMessage
from cdcflow.types import (
    ValueTypeError,
    infer_type,
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
#: Spanner capture types that send only the changed columns of an UPDATE.
_PARTIAL_CAPTURE = frozenset({"NEW_VALUES", "OLD_AND_NEW_VALUES"})


#: What Datastream events can express.
CAPABILITIES = Capabilities(orders_events=True)


def _is_bigquery_row(doc: Mapping[str, Any]) -> bool:
    return "source_metadata" not in doc and isinstance(_bq_metadata(doc), dict)


def _is_change(doc: Mapping[str, Any]) -> bool:
    return doc.get("payload") is not None or doc.get("source_metadata") is not None


def _change_score(doc: Mapping[str, Any]) -> float:
    if not isinstance(doc.get("source_metadata"), dict):
        return 0.0
    if isinstance(doc.get("payload"), dict):
        return 1.0 if ("read_method" in doc or "stream_name" in doc) else 0.9
    return 0.8 if "read_method" in doc else 0.0


#: Datastream's envelopes, in the order recognition and dispatch try them: a BigQuery row
#: (``datastream_metadata``, no ``source_metadata``), a change event (Cloud Storage JSON/Avro).
MESSAGE_ENVELOPES: tuple[Envelope, ...] = (
    Envelope("bigquery_row", _is_bigquery_row, "_bigquery_row", 0.9),
    Envelope("change", _is_change, "_change", _change_score),
)


class DatastreamDialect(Dialect):
    """Decoder for Google Cloud Datastream events (JSON, Avro object-container files, and
    BigQuery rows)."""

    name: ClassVar[str] = "datastream"
    capabilities = CAPABILITIES
    envelopes = MESSAGE_ENVELOPES

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        return self.envelope_score(doc) if isinstance(doc, dict) else 0.0

    # ------------------------------------------------------------------ Avro records

    def document(self, msg: RawMessage) -> Any:
        if msg.form != "avro" or msg.avro is None or not isinstance(msg.avro.value, dict):
            return super().document(msg)
        schema = msg.avro.schema
        columns = schema.memo("datastream.columns", avro_columns)
        doc = dict(msg.avro.value)
        for name in schema.memo("datastream.millis", field_level_millis):
            if isinstance(doc.get(name), int):
                doc[name] = instant(doc[name])
        for name in ("read_timestamp", "source_timestamp"):
            if isinstance(doc.get(name), dt.datetime):
                doc[name] = _iso(doc[name])
        payload = doc.get("payload")
        if isinstance(payload, dict):
            doc["payload"] = {
                c: normalise(v, columns.get(c, ("string", "plain"))[1]) for c, v in payload.items()
            }
        return doc

    # ------------------------------------------------------------------ the event

    def event(self, doc: Any, item: Item) -> Decoded | list[Decoded]:
        if not isinstance(doc, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a Datastream event must be a JSON object, got {kind(doc)}"
            )
        return self.dispatch(doc, item)

    def unmatched(self, doc: Mapping[str, Any], context: Any) -> dict[str, Any]:
        raise self.fail(
            "NOT_AN_EVENT", "not a Datastream event: no 'source_metadata' and no 'payload'"
        )

    def _change(self, doc: Mapping[str, Any], item: Item) -> dict[str, Any]:
        """A change event: ``source_metadata`` and the row in ``payload``."""
        payload = doc.get("payload")
        meta = doc.get("source_metadata")
        if not isinstance(payload, dict):
            raise self.fail("MISSING_PAYLOAD", f"'payload' must be an object, got {kind(payload)}")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise self.fail(
                "BAD_METADATA", f"'source_metadata' must be an object, got {kind(meta)}"
            )
        read_method = doc.get("read_method")
        read_method = read_method if isinstance(read_method, str) else ""
        source = source_of(read_method, meta)
        backfill = is_backfill(read_method, meta)
        op, half = self._operation(meta, backfill)
        database, schema, table = where_of(source, meta, doc)
        if not table:
            raise self.fail("MISSING_TABLE", "no table in 'source_metadata' and no 'object'")
        item.table = table

        metadata: dict[str, Any] = {k: doc[k] for k in _ENVELOPE_METADATA if doc.get(k) is not None}
        metadata.update({k: meta[k] for k in METADATA_FIELDS if meta.get(k) is not None})
        item.meta = metadata = {**metadata, **item.meta}
        if isinstance(metadata.get("read_timestamp"), dt.datetime):
            metadata["read_timestamp"] = _iso(metadata["read_timestamp"])
        folder_check(item.msg.origin, doc.get("object"), database, schema, table, metadata)

        types = self._avro_types(item.msg)
        types.update(
            self.declared_types(
                table,
                schema,
                lambda native: source_type(source or "", native),
                database=database,
                mapper=source or "",
            )
        )
        row = self._row(payload, types, source)

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
        tx = meta.get("tx_id", meta.get("server_transaction_id"))
        return self.make_event(
            op,
            (database, schema, table),
            self._order(doc, meta, source, backfill, half, item)._replace(
                timestamp=self._timestamp(doc, meta),
                transaction_id=str(tx) if tx not in (None, "") else None,
            ),
            item,
            id=str(doc["uuid"]) if doc.get("uuid") else None,
            source=source,
            key=key,
            before=row if op == "DELETE" else None,
            after=None if op == "DELETE" else row,
            partial=partial,
            types=present_types(types, row),
        )

    # ------------------------------------------------------------------ parts

    @staticmethod
    def _avro_types(msg: RawMessage) -> dict[str, str]:
        if msg.form != "avro" or msg.avro is None:
            return {}
        columns = msg.avro.schema.memo("datastream.columns", avro_columns)
        return {c: t for c, (t, _) in columns.items()}

    def _row(
        self, payload: Mapping[str, Any], types: dict[str, str], source: str | None
    ) -> dict[str, Any]:
        """The payload with typed values; columns without a type get the inferred one."""
        row: dict[str, Any] = {}
        for col, v in payload.items():
            t = types.get(col)
            if t is None:
                t = infer_type(v)
                if t is None:
                    row[col] = None
                    continue
                types[col] = t
            if v is None:
                row[col] = None
            elif t == "binary" and isinstance(v, str) and source == "mysql":
                # MySQL binary columns arrive as hex text
                row[col] = self.value(col, hex_bytes(col, v), t)
            else:
                row[col] = self.value(col, v, t)
        return row

    def _operation(self, meta: Mapping[str, Any], backfill: bool) -> tuple[str, int]:
        raw = meta.get("change_type")
        if raw is None:
            raw = meta.get("mod_type")
        deleted = meta.get("is_deleted") is True
        if raw is not None:
            norm = raw.strip().upper().replace("_", "-") if isinstance(raw, str) else None
            if norm not in CHANGE_TYPES:
                raise self.fail(
                    "UNKNOWN_CHANGE_TYPE",
                    f"unknown change_type {raw!r}; expected one of {', '.join(CHANGE_TYPES)}",
                )
            op, half = CHANGE_TYPES[norm]
            if half == 0:
                # is_deleted is not trusted on UPDATE-DELETE (MySQL writes true, Oracle false)
                return op, half
        else:
            op, half = ("SNAPSHOT" if backfill else "UPSERT"), 1
        if deleted:
            return "DELETE", 1
        if backfill:
            return "SNAPSHOT", 1
        return op, half

    def _key_names(
        self, meta: Mapping[str, Any], table: str, schema: str | None, database: str | None
    ) -> tuple[str, ...] | None:
        for name in ("primary_keys", "replication_index"):
            names = meta.get(name)
            if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
                return tuple(names)
        return self.key_names(table, schema, database)

    def _timestamp(self, doc: Mapping[str, Any], meta: Mapping[str, Any]) -> dt.datetime | None:
        value = doc.get("source_timestamp")
        if value is None:
            value = meta.get("commit_timestamp")
        if value is None:
            return None
        try:
            return instant(value)
        except (ValueTypeError, ValueError, OverflowError) as e:
            raise self.fail("BAD_TIMESTAMP", f"source_timestamp: {e}") from None

    def _order(
        self,
        doc: Mapping[str, Any],
        meta: Mapping[str, Any],
        source: str | None,
        backfill: bool,
        half: int,
        item: Item,
    ) -> Order:
        """``(phase, *position, half)``: the native position, else ``sort_keys``, else the
        source timestamp, else delivery order (see the docs' Ordering)."""
        metadata = item.meta
        position: dict[str, Any] = {k: meta[k] for k in POSITION_FIELDS if meta.get(k) is not None}
        sort_keys = doc.get("sort_keys")
        if sort_keys is not None:
            position["sort_keys"] = sort_keys
        phase = 0 if backfill else 1
        try:
            native = None if backfill else native_position(source, meta)
            if native is not None:
                fields = [f"source_metadata.{f}" for f in NATIVE_FIELDS[source or ""]]
                seq = self.sequence_of((phase, *native, half), ["", *fields])
                return Order(seq, position)
            if isinstance(sort_keys, list) and sort_keys:
                elements = [sort_element(k) for k in sort_keys]
                metadata["sequence_source"] = "sort_keys"
                metadata["sequence_shape"] = sequence_shape(elements)
                fields = [f"sort_keys[{i}]" for i in range(len(elements))]
                seq = self.sequence_of((phase, *elements, half), ["", *fields])
                return Order(seq, position)
        except ValueError as e:
            raise self.fail("BAD_POSITION", str(e)) from None
        ts = doc.get("source_timestamp")
        if ts is not None:
            try:
                micros = epoch_micros(instant(ts))
            except (ValueTypeError, ValueError, OverflowError) as e:
                raise self.fail("BAD_TIMESTAMP", f"source_timestamp: {e}") from None
            metadata["sequence_source"] = "source_timestamp"
            seq = self.sequence_of((phase, micros, half), ("", "source_timestamp"))
            return Order(seq, position)
        return Order(self.delivery_order(item), position)

    # ------------------------------------------------------------------ BigQuery rows

    def _bigquery_row(self, doc: Mapping[str, Any], item: Item) -> dict[str, Any]:
        """A row of a Datastream-managed BigQuery table (exported as JSON): the table's columns
        plus ``datastream_metadata``. The row names no table: it comes from the source option
        ``table``, else the file name's stem."""
        meta = {str(k).upper(): v for k, v in (_bq_metadata(doc) or {}).items()}
        table = self.options.extra.get("table") or stem(item.msg.origin)
        if not table:
            raise self.fail("MISSING_TABLE", "a BigQuery row names no table; set option 'table'")
        item.table = table
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
        source = self.options.extra.get("source") or None
        types = dict(
            self.declared_types(
                table, None, lambda native: source_type(source or "", native), mapper=source or ""
            )
        )
        values = self._row(
            {
                k: v
                for k, v in doc.items()
                if k not in ("datastream_metadata", "DATASTREAM_METADATA")
            },
            types,
            None,
        )
        names = self.key_names(table)
        key = (
            {n: values.get(n) for n in names} if names and all(n in values for n in names) else None
        )
        metadata: dict[str, Any] = {"bigquery": "append-only" if change is not None else "merge"}
        metadata.update({k.lower(): v for k, v in meta.items() if v is not None})
        item.meta = metadata = {**metadata, **item.meta}
        ts: dt.datetime | None = None
        micros: int | None = None
        src_ts = meta.get("SOURCE_TIMESTAMP")
        if src_ts is not None:
            try:
                ms = (
                    int(src_ts)
                    if isinstance(src_ts, int | str) and DIGITS.match(str(src_ts))
                    else None
                )
                ts = instant(ms if ms is not None else src_ts)
                micros = epoch_micros(ts)
            except (ValueTypeError, ValueError, OverflowError) as e:
                raise self.fail("BAD_TIMESTAMP", f"SOURCE_TIMESTAMP: {e}") from None
        sort_keys = meta.get("SORT_KEYS")
        csn = meta.get("CHANGE_SEQUENCE_NUMBER")
        if isinstance(sort_keys, list) and sort_keys:
            try:
                elements = [sort_element(k) for k in sort_keys]
            except ValueError as e:
                raise self.fail("BAD_POSITION", f"SORT_KEYS: {e}") from None
            fields = [f"SORT_KEYS[{i}]" for i in range(len(elements))]
            seq = self.sequence_of((1, *elements, half), ["", *fields])
            metadata["sequence_source"] = "sort_keys"
            metadata["sequence_shape"] = sequence_shape(elements)
        elif csn is not None:
            try:
                element = sort_element(csn)
            except ValueError as e:
                raise self.fail("BAD_POSITION", f"CHANGE_SEQUENCE_NUMBER: {e}") from None
            seq = self.sequence_of((1, element, half), ("", "CHANGE_SEQUENCE_NUMBER"))
            metadata["sequence_source"] = "change_sequence_number"
        elif micros is not None:
            seq = self.sequence_of((1, micros, half), ("", "SOURCE_TIMESTAMP"))
            metadata["sequence_source"] = "source_timestamp"
        else:
            seq = self.delivery_order(item)
        uuid = meta.get("UUID")
        return self.make_event(
            op,
            (None, None, str(table)),
            Order(seq, {"sort_keys": sort_keys, "change_sequence_number": csn}, ts),
            item,
            id=str(uuid) if uuid else None,
            source=source,
            key=key,
            before=values if op == "DELETE" else None,
            after=None if op == "DELETE" else values,
            types=present_types(types, values),
        )


# ---------------------------------------------------------------------- helpers


def _iso(ts: dt.datetime) -> str:
    return ts.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _column(name: str, row: Mapping[str, Any]) -> str | None:
    """The payload column a key name refers to (exact, else the only case-insensitive
    match)."""
    if name in row:
        return name
    matches = [c for c in row if c.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _bq_metadata(doc: Mapping[str, Any]) -> Any:
    for k in ("datastream_metadata", "DATASTREAM_METADATA"):
        if k in doc:
            return doc[k]
    return None


def _truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")
