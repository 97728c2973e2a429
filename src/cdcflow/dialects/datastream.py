"""The ``datastream`` dialect: Google Cloud Datastream events (Cloud Storage JSON and Avro
files, BigQuery rows).

The mapping to canonical fields per source, ordering, backfills, update pairs, Avro types and
the spec's contradictions: ``docs/dialects/datastream.md``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

from cdcflow import positions, sequence
from cdcflow.dialects.base import Capabilities, Dialect, Item, Order, present_types
from cdcflow.transports.avro import canonical_type, record_fields
from cdcflow.transports.json import kind
from cdcflow.transports.message import RawMessage
from cdcflow.types import (
    DEFAULT_DECIMAL,
    ValueTypeError,
    infer_type,
    json_bytes,
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
#: Spanner capture types that send only the changed columns of an UPDATE.
_PARTIAL_CAPTURE = frozenset({"NEW_VALUES", "OLD_AND_NEW_VALUES"})
_DIGITS = re.compile(r"^\s*\d+\s*$")


#: What Datastream events can express.
CAPABILITIES = Capabilities(orders_events=True)


class DatastreamDialect(Dialect):
    """Decoder for Google Cloud Datastream events (JSON, Avro object-container files, and
    BigQuery rows)."""

    name: ClassVar[str] = "datastream"
    capabilities = CAPABILITIES

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
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

    # ------------------------------------------------------------------ Avro records

    def document(self, msg: RawMessage) -> Any:
        if msg.form != "avro" or msg.avro is None or not isinstance(msg.avro.value, dict):
            return super().document(msg)
        schema = msg.avro.schema
        columns = schema.memo("datastream.columns", _avro_columns)
        doc = dict(msg.avro.value)
        for name in schema.memo("datastream.millis", _field_level_millis):
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
        return doc

    # ------------------------------------------------------------------ the event

    def event(self, doc: Any, item: Item) -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a Datastream event must be a JSON object, got {kind(doc)}"
            )
        if "source_metadata" not in doc and isinstance(_bq_metadata(doc), dict):
            return self._bigquery_row(doc, item)
        payload = doc.get("payload")
        meta = doc.get("source_metadata")
        if payload is None and meta is None:
            raise self.fail(
                "NOT_AN_EVENT", "not a Datastream event: no 'source_metadata' and no 'payload'"
            )
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
        source = _source(read_method, meta)
        backfill = _is_backfill(read_method, meta)
        op, half = self._operation(meta, backfill)
        database, schema, table = _where(source, meta, doc)
        if not table:
            raise self.fail("MISSING_TABLE", "no table in 'source_metadata' and no 'object'")

        metadata: dict[str, Any] = {k: doc[k] for k in _ENVELOPE_METADATA if doc.get(k) is not None}
        metadata.update({k: meta[k] for k in METADATA_FIELDS if meta.get(k) is not None})
        item.meta = metadata = {**metadata, **item.meta}
        if isinstance(metadata.get("read_timestamp"), dt.datetime):
            metadata["read_timestamp"] = _iso(metadata["read_timestamp"])
        _folder_check(item.msg.origin, doc.get("object"), database, schema, table, metadata)

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
        columns = msg.avro.schema.memo("datastream.columns", _avro_columns)
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
                try:
                    row[col] = self.value(col, bytes.fromhex(v), t)
                except ValueError:
                    raise self.fail(
                        "BAD_VALUE", f"column {col!r}: MySQL binary is hex text, got {v[:40]!r}"
                    ) from None
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
            native = None if backfill else _native_position(source, meta)
            if native is not None:
                return Order(sequence.encode((phase, *native, half)), position)
            if isinstance(sort_keys, list) and sort_keys:
                elements = [_sort_element(k) for k in sort_keys]
                metadata["sequence_source"] = "sort_keys"
                metadata["sequence_shape"] = _shape(elements)
                return Order(sequence.encode((phase, *elements, half)), position)
        except ValueError as e:
            raise self.fail("BAD_POSITION", str(e)) from None
        ts = doc.get("source_timestamp")
        if ts is not None:
            try:
                micros = _micros(_instant(ts))
            except (ValueTypeError, ValueError, OverflowError) as e:
                raise self.fail("BAD_TIMESTAMP", f"source_timestamp: {e}") from None
            metadata["sequence_source"] = "source_timestamp"
            return Order(sequence.encode((phase, micros, half)), position)
        return Order(self.delivery_order(item), position)

    # ------------------------------------------------------------------ BigQuery rows

    def _bigquery_row(self, doc: Mapping[str, Any], item: Item) -> dict[str, Any]:
        """A row of a Datastream-managed BigQuery table (exported as JSON): the table's columns
        plus ``datastream_metadata``. The row names no table: it comes from the source option
        ``table``, else the file name's stem."""
        meta = {str(k).upper(): v for k, v in (_bq_metadata(doc) or {}).items()}
        table = self.options.extra.get("table") or _stem(item.msg.origin)
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
    return json_bytes(v).decode()


def _shape(elements: list[int | str | None]) -> str:
    """The kinds of ``sort_keys`` elements (``n`` number, ``s`` text, ``*`` null): the engine
    dead-letters events of a table whose shape differs from the table's
    (``SEQUENCE_SHAPE_MISMATCH``), since their sequences would not compare."""
    return ",".join("*" if e is None else "n" if isinstance(e, int) else "s" for e in elements)


def _instant(value: Any) -> dt.datetime:
    """``source_timestamp``: ISO text (``T`` or space, zone optional → UTC), an Avro
    ``timestamp-millis`` value, or epoch milliseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=value)
        except OverflowError:
            raise Dialect.fail(
                "BAD_TIMESTAMP", f"epoch milliseconds {value} are out of range"
            ) from None
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


# ---------------------------------------------------------------------- Avro schema → types


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


def _vendor(t: Any) -> tuple[str, _Norm] | None:
    """Datastream's own Avro types: its logical types and named records."""
    if t == "varchar":
        # a named type reused by name (early files)
        return "string", "varchar"
    if not isinstance(t, dict):
        return None
    logical = t.get("logicalType")
    if logical == "time-interval-micros":
        return "string", "interval"
    if logical == "json":
        return "json", "plain"
    if logical == "number":
        return DEFAULT_DECIMAL, "plain"
    if t.get("type") == "record":
        name = str(t.get("name", ""))
        fields = {f.get("name") for f in t.get("fields", []) if isinstance(f, dict)}
        if name == "varchar" or fields == {"value", "length"}:
            return "string", "varchar"
        if name == "timestampTz" or fields == {"timestamp", "offset"}:
            return "timestamp", "tz"
        if name.startswith("multidimensionalArray") or "nestedArray" in fields:
            return "json", "array"
    return None


def _vendor_type(t: Any) -> str | None:
    found = _vendor(t)
    return None if found is None else found[0]


def _normaliser(t: Any, named: dict[str, Any]) -> _Norm:
    if isinstance(t, list):
        branches = [x for x in t if x != "null"]
        return _normaliser(branches[0], named) if len(branches) == 1 else "plain"
    found = _vendor(t)
    if found is not None:
        return found[1]
    if isinstance(t, str) and t in named:
        return _normaliser(named[t], named)
    if isinstance(t, dict) and isinstance(t.get("type"), str | list | dict):
        if t.get("type") not in ("record", "array", "map", "enum", "fixed"):
            return _normaliser(t["type"], named)
    return "plain"


def _avro_columns(schema: Any) -> dict[str, tuple[str, _Norm]]:
    """Payload column → (canonical type, normaliser) from the header schema."""
    out: dict[str, tuple[str, _Norm]] = {}
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and f.get("name") == "payload":
            named: dict[str, Any] = {}
            for col in record_fields(f.get("type")):
                t = canonical_type(col["type"], named, _vendor_type)
                out[col["name"]] = (t, _normaliser(col["type"], named))
    return out


def avro_column_type(t: Any) -> tuple[str, _Norm]:
    """A payload column's (canonical type, normaliser) for Avro type ``t``."""
    named: dict[str, Any] = {}
    return canonical_type(t, named, _vendor_type), _normaliser(t, named)


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
        return json_bytes(_nested(value)).decode()
    if isinstance(value, dict | list):
        return json_bytes(value).decode()
    return value


def _nested(value: Any) -> Any:
    """A ``multidimensionalArray_*`` record ``{nestedArray, elementValue}`` as nested lists."""
    if isinstance(value, dict):
        if value.get("nestedArray") is not None:
            return [_nested(v) for v in value["nestedArray"]]
        return value.get("elementValue")
    return value
