"""The ``cockroachdb`` dialect: CockroachDB changefeed messages (Kafka, cloud storage, webhook,
sinkless; JSON, Avro, CSV).

The mapping to canonical fields, what each envelope can say, ordering by HLC, keys, types,
file and transport forms and the spec's contradictions: ``docs/dialects/cockroachdb.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

import orjson

from cdcflow import positions, sequence
from cdcflow.dialects.base import (
    BASE_TRANSPORTS,
    Batch,
    Capabilities,
    Decoded,
    Dialect,
    Item,
    Order,
)
from cdcflow.errors import DecodeError
from cdcflow.transports import CSV
from cdcflow.transports.avro import canonical_type, record_fields
from cdcflow.transports.json import dumps, exact_decoder, kind, loads_exact
from cdcflow.transports.limits import check_depth
from cdcflow.transports.message import CsvRow, RawMessage
from cdcflow.types import cockroachdb_type, decimal_type, infer_type, json_bytes

#: Source option values of ``envelope``.
ENVELOPES: tuple[str, ...] = ("auto", "wrapped", "bare", "row", "key_only", "enriched")

#: Enriched ``op`` → canonical operation.
ENRICHED_OPS: dict[str, str] = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}

#: Top-level fields of a wrapped message.
WRAPPED_FIELDS: frozenset[str] = frozenset(
    {"after", "before", "key", "updated", "mvcc_timestamp", "topic", "topic:"}
)
#: Fields of a sinkless row (``EXPERIMENTAL CHANGEFEED FOR`` output).
SINKLESS_FIELDS: frozenset[str] = frozenset({"key", "table", "value"})
#: Enriched ``source`` fields kept in ``metadata``.
SOURCE_METADATA: tuple[str, ...] = (
    "changefeed_sink",
    "cluster_id",
    "cluster_name",
    "db_version",
    "job_id",
    "node_id",
    "node_name",
    "origin",
    "source_node_locality",
)

_JSON_NULL = "__crdb_json_null__"
_AVRO_BRANCHES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string", "array", "map"}
)
_BIT_DOC = re.compile(r"\b(?:VAR)?BIT\b", re.IGNORECASE)

_NAME = re.compile(
    r"^(?P<ts>\d{33})-(?P<uniquer>[0-9a-fA-F]+)-(?P<node>\d+)-(?P<sink>\d+)-(?P<file>\d+)-"
    r"(?P<topic>.+)-(?P<schema>\d+)\.(?P<ext>ndjson|json|csv|avro|parquet)(?P<gz>\.gz)?$"
)
_RESOLVED_NAME = re.compile(r"^(?P<ts>\d{33})\.RESOLVED$")
_DATE_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HOUR_DIR = re.compile(r"^\d{2}$")


# ---------------------------------------------------------------------- file names and topics


def name_timestamp(ts: str) -> tuple[int, int]:
    """A cloud-storage file name's 33-digit timestamp (``YYYYMMDDhhmmss`` + 9 digits of
    nanoseconds + 10 digits of logical clock) → HLC (wall nanoseconds, logical)."""
    if not re.fullmatch(r"\d{33}", ts):
        raise ValueError(f"not a 33-digit changefeed file timestamp: {ts!r}")
    try:
        base = dt.datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"not a valid changefeed file timestamp: {ts!r}") from None
    seconds = (base - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).days * 86_400 + (
        base.hour * 3600 + base.minute * 60 + base.second
    )
    return seconds * 1_000_000_000 + int(ts[14:23]), int(ts[23:])


def parse_object_name(path: str) -> dict[str, Any] | None:
    """A cloud-storage sink object path as its parts, or ``None`` when the base name is not a
    changefeed data or ``.RESOLVED`` file name.

    Data files: ``<timestamp>-<uniquer>-<node>-<sink id>-<file id>-<topic>-<schema id>.<ext>``
    (the topic may contain dots and dashes; the schema id is the last dash-number). Folders: an
    optional date folder (``2020-04-02``), an optional hour folder (``20``) after it, and any
    prefix before them (``/db/schema/`` as replicator's HTTP paths carry).
    """
    parts = [p for p in re.split(r"[\\/]", path) if p]
    if not parts:
        return None
    base, folders = parts[-1], parts[:-1]
    out: dict[str, Any] = {}
    m = _NAME.match(base)
    if m:
        out.update(
            resolved=False,
            topic=m.group("topic"),
            schema_id=int(m.group("schema")),
            uniquer=m.group("uniquer"),
            node=int(m.group("node")),
            sink=int(m.group("sink")),
            file_id=int(m.group("file")),
            ext=m.group("ext") + (m.group("gz") or ""),
        )
    else:
        m = _RESOLVED_NAME.match(base)
        if not m:
            return None
        out.update(resolved=True, topic=None, ext="RESOLVED")
    out["timestamp"] = m.group("ts")
    try:
        out["hlc"] = name_timestamp(m.group("ts"))
    except ValueError:
        return None
    date: str | None = None
    hour: str | None = None
    prefix = folders
    if folders and _HOUR_DIR.match(folders[-1]) and len(folders) > 1:
        if _DATE_DIR.match(folders[-2]):
            date, hour, prefix = folders[-2], folders[-1], folders[:-2]
    if date is None and folders and _DATE_DIR.match(folders[-1]):
        date, prefix = folders[-1], folders[:-1]
    out.update(date=date, hour=hour, prefix=prefix)
    return out


def split_topic(topic: str) -> tuple[str | None, str | None, str, str | None]:
    """A changefeed topic → (database, schema, table, column family): ``table``,
    ``table.family``, ``db.schema.table`` (``full_table_name``), ``db.schema.table.family``."""
    parts = topic.split(".")
    if len(parts) == 1:
        return None, None, topic, None
    if len(parts) == 2:
        return None, None, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], None
    return parts[0], parts[1], parts[2], ".".join(parts[3:])


def bits_from_avro(words: list[int]) -> str:
    """A BIT/VARBIT value encoded by CockroachDB's Avro changefeeds (first element: the number of
    bits used in the last word; then 64-bit words, big-endian) → the bit string."""
    if not words:
        return ""
    used, rest = int(words[0]), [int(w) & 0xFFFFFFFFFFFFFFFF for w in words[1:]]
    if not rest:
        return ""
    if not 0 <= used <= 64:
        raise ValueError(f"BIT array's first element must be 0..64, got {used}")
    text = "".join(format(w, "064b") for w in rest[:-1])
    return text + format(rest[-1], "064b")[:used]


def _console(text: str) -> tuple[Any, Any] | None:
    """A console/sinkless line ``<key> <value>`` (the key a JSON array, or an Avro key object
    as the spec prints it) → (key, value or None), else None."""
    decoder = exact_decoder()
    s = text.strip()
    if not s.startswith(("[", "{")):
        return None
    try:
        key, end = decoder.raw_decode(s, 0)
        check_depth(key)
    except (json.JSONDecodeError, RecursionError, ValueError, DecodeError):
        return None
    rest = s[end:]
    if not isinstance(key, list | dict):
        return None
    if not rest.strip():
        return (key, None) if isinstance(key, list) else None
    gap = rest[: len(rest) - len(rest.lstrip())]
    if "\n" in gap or (not gap and not rest.startswith("->")):
        return None  # key and value share one line
    rest = rest.strip().removeprefix("->").strip()
    if not rest:
        return key, None
    try:
        value, end = decoder.raw_decode(rest, 0)
        check_depth(value)
    except (json.JSONDecodeError, RecursionError, ValueError, DecodeError):
        return None
    if rest[end:].strip() or not isinstance(value, dict):
        return None
    return key, value


# ---------------------------------------------------------------------- decoding context


@dataclass(frozen=True, slots=True)
class _Console:
    """A console line: the key printed before the value (``None`` for an empty value)."""

    key: Any
    value: Any


@dataclass
class _Ctx:
    """Where a message came from: the key and topic that travelled beside it, Avro types."""

    item: Item
    key: Any = None
    topic: str | None = None
    partition: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    avro_types: dict[str, str] = field(default_factory=dict)
    bit_columns: frozenset[str] = frozenset()
    transport: bool = False

    @property
    def msg(self) -> RawMessage:
        return self.item.msg


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
            score = self._score(doc)
            if score:
                return score
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
        console = _console(text)
        if console is not None:
            return 0.8 if console[1] is None or isinstance(console[1], dict) else 0.0
        return 0.0

    def _score(self, doc: Mapping[str, Any]) -> float:
        keys = set(doc)
        if isinstance(doc.get("__crdb__"), dict):
            return 0.95
        if "resolved" in keys and keys <= {"resolved"}:
            return 0.9
        payload = doc.get("payload")
        if isinstance(payload, list):
            first = payload[0] if payload else None
            if keys <= {"payload", "length"} and (
                first is None or (isinstance(first, dict) and self._score(first) > 0)
            ):
                return 0.95
            return 0.0
        if isinstance(payload, dict) and isinstance(doc.get("schema"), dict):
            schema_name = str(doc["schema"].get("name", ""))
            if schema_name.startswith("cockroachdb") or _is_enriched(payload):
                return 0.95
            return 0.0
        if _is_enriched(doc):
            return 0.9
        if "after" in keys or "before" in keys:
            return 0.9 if keys <= WRAPPED_FIELDS else 0.0
        if keys and keys <= {"key", "updated", "mvcc_timestamp"} and "updated" in keys:
            return 0.8 if isinstance(doc.get("key"), list) else 0.0
        sinkless = _sinkless(doc)
        if sinkless is not None and isinstance(sinkless.get("key"), str):
            return 0.7 if sinkless["key"].lstrip().startswith("[") else 0.0
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
            console = _console(msg.data.decode("utf-8", "replace"))
            if console is None:
                raise
            return _Console(*console)

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
        ctx = self._context(item)
        if isinstance(doc, CsvRow):
            return self._csv_row(doc, ctx)
        if isinstance(doc, _Console):
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
        return self._message(doc, ctx)

    def _context(self, item: Item) -> _Ctx:
        msg = item.msg
        ctx = _Ctx(item=item, meta=item.meta)
        if msg.kafka is not None:
            ctx.transport = True
            ctx.topic = msg.kafka.topic or None
            ctx.partition = msg.kafka.partition
        if msg.key_avro is not None:
            ctx.key, ctx.transport = msg.key_avro.value, True
        elif msg.key is not None:
            ctx.transport = True
            ctx.key = self._json_text(msg.key.decode("utf-8", "replace"), "key")
        if msg.avro is not None:
            ctx.avro_types, ctx.bit_columns = msg.avro.schema.memo(
                "cockroachdb.types", avro_schema_types
            )
        return ctx

    def _message(self, doc: Mapping[str, Any], ctx: _Ctx) -> Decoded | list[Decoded]:
        payload = doc.get("payload")
        if isinstance(payload, dict) and isinstance(doc.get("schema"), dict):
            types = enriched_schema_types(doc["schema"])
            ctx.avro_types = {**types, **ctx.avro_types}
            return self._enriched_event(payload, ctx)
        if not ctx.transport:
            sinkless = _sinkless(doc)
            if sinkless is not None:
                return self._sinkless_row(sinkless, ctx)
        if set(doc) <= {"resolved"} and "resolved" in doc:
            return self._resolved(_unwrap(doc["resolved"]), ctx, "resolved")
        crdb = doc.get("__crdb__")
        if isinstance(crdb, dict) and "resolved" in crdb:
            return self._resolved(_unwrap(crdb["resolved"]), ctx, "__crdb__.resolved")
        if _is_enriched(doc) or (
            isinstance(doc.get("op"), str) and ("source" in doc or "ts_ns" in doc)
        ):
            return self._enriched_event(doc, ctx)
        if isinstance(crdb, dict):
            return self._bare(doc, crdb, ctx)
        if "after" in doc or "before" in doc:
            return self._wrapped(doc, ctx)
        if set(doc) <= {"key", "updated", "mvcc_timestamp"} and "key" in doc:
            return self._wrapped(doc, ctx)
        envelope = self._envelope(None)
        if ctx.transport or ctx.key is not None or envelope in ("row", "bare"):
            return self._bare(doc, {}, ctx, envelope="row")
        raise self.fail(
            "UNKNOWN_ENVELOPE",
            "a JSON object with none of after/before, __crdb__, payload, resolved, op or a "
            "transport key: if the feed uses envelope=row (or is a CDC query's own shape), set "
            "the source option envelope: row — deletes are then not delivered and stay in the "
            "replica",
        )

    def _sinkless_row(self, row: Mapping[str, Any], ctx: _Ctx) -> Decoded | list[Decoded]:
        """A sinkless row ``{key, table, value}`` (JSON, or a CSV line of such output)."""
        ctx.transport = True
        table = row.get("table")
        ctx.topic = table if isinstance(table, str) and table else None
        ctx.meta["sinkless_table"] = table
        key = row.get("key")
        ctx.key = self._json_text(key, "key") if isinstance(key, str) and key.strip() else key
        value = row.get("value")
        if isinstance(value, str):
            value = self._json_text(value, "value") if value.strip() else None
        if value is None:
            return self._empty_value(ctx)
        if not isinstance(value, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a changefeed message is a JSON object, got {kind(value)}"
            )
        return self._message(value, ctx)

    def _json_text(self, text: str, what: str) -> Any:
        if not text.strip():
            return None
        try:
            return loads_exact(text)
        except (orjson.JSONDecodeError, ValueError):
            raise self.fail("NOT_JSON", f"the record's {what} is not JSON: {text[:60]!r}") from None

    def _empty_value(self, ctx: _Ctx) -> Decoded:
        """A key without a value: a delete under envelope row/bare, else key_only output."""
        if ctx.key is None:
            raise self.fail("NOT_AN_EVENT", "a record with neither key nor value")
        table = self._table_hint(ctx)
        envelope = self._envelope(table)
        if envelope not in ("row", "bare"):
            raise self.fail(
                "KEY_ONLY_ENVELOPE",
                f"key {_short(ctx.key)} without a value: envelope=key_only output (no values; "
                "inserts and deletes look the same) cannot be applied; if the feed uses "
                "envelope=row or bare, set the source option envelope so an empty value reads "
                "as a delete",
            )
        where = self._where(None, ctx)
        return self._row_event(
            where, "DELETE", None, None, ctx, envelope=envelope, hlc=None, key_value=ctx.key
        )

    # ------------------------------------------------------------------ envelopes

    def _wrapped(self, doc: Mapping[str, Any], ctx: _Ctx) -> Decoded:
        after = _avro_record_body(doc.get("after"))
        before = _avro_record_body(doc.get("before"))
        record_name = _avro_record_name(doc.get("after")) or _avro_record_name(doc.get("before"))
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
        hlc, source = _hlc_field(doc)
        meta: dict[str, Any] = {"envelope": "wrapped", "diff": "before" in doc}
        if "after" not in doc:
            meta["delete_form"] = "before_only" if before is not None else "key_only"
        return self._row_event(
            where,
            op,
            before,
            after,
            ctx,
            envelope="wrapped",
            hlc=hlc,
            hlc_source=source,
            key_value=_unwrap(key) if key is not None else None,
            extra=meta,
            mvcc=_unwrap(doc.get("mvcc_timestamp")),
        )

    def _bare(
        self, doc: Mapping[str, Any], crdb: Mapping[str, Any], ctx: _Ctx, envelope: str = "bare"
    ) -> Decoded:
        row = {k: v for k, v in doc.items() if k != "__crdb__"}
        topic = crdb.get("topic")
        where = self._where(topic if isinstance(topic, str) else None, ctx)
        key = crdb.get("key", ctx.key)
        hlc, source = _hlc_field(crdb)
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
        return self._row_event(
            where,
            op,
            None,
            after,
            ctx,
            envelope=envelope if crdb or envelope == "row" else "bare",
            hlc=hlc,
            hlc_source=source,
            key_value=key,
            extra={"envelope": "bare" if crdb else envelope},
            mvcc=crdb.get("mvcc_timestamp"),
        )

    def _enriched_event(self, doc: Mapping[str, Any], ctx: _Ctx) -> Decoded:
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
        return self._row_event(
            where,
            op,
            before if isinstance(before, dict) else None,
            after if op != "DELETE" else None,
            ctx,
            envelope="enriched",
            hlc=hlc,
            hlc_source=hlc_source,
            key_value=doc.get("key", ctx.key),
            key_names=tuple(names)
            if isinstance(names, list) and all(isinstance(n, str) for n in names)
            else None,
            extra=meta,
            commit_ns=commit_ns if isinstance(commit_ns, int) else None,
        )

    def _resolved(self, value: Any, ctx: _Ctx, form: str) -> Decoded:
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
        order = Order(sequence.encode((wall, logical)), {"hlc": hlc, "resolved": hlc})
        return self.make_event(
            "RESOLVED",
            (None, None, None),
            order._replace(timestamp=_wall_time(wall)),
            ctx.item,
            id=ident,
            source="cockroachdb",
        )

    def _csv_row(self, row: CsvRow, ctx: _Ctx) -> Decoded | list[Decoded]:
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
        return self._row_event(
            where,
            "SNAPSHOT",
            None,
            values,
            ctx,
            envelope="csv",
            hlc=hlc,
            hlc_source="file_name" if hlc else None,
            key_value=None,
            extra={"envelope": "csv"},
            text_values=True,
        )

    # ------------------------------------------------------------------ the event

    def _envelope(self, table: str | None) -> str:
        opt = self.options.extra.get("envelope", "auto")
        if isinstance(opt, Mapping):
            value = opt.get(table or "", opt.get("*", "auto"))
        else:
            value = opt
        return str(value or "auto").lower()

    def _table_hint(self, ctx: _Ctx) -> str | None:
        try:
            return self._where(None, ctx)[2]
        except DecodeError:
            return None

    def _where(
        self, topic: str | None, ctx: _Ctx
    ) -> tuple[str | None, str | None, str, str | None, str]:
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
        return database, schema, table, family, found

    def _row_event(
        self,
        where: tuple[str | None, str | None, str, str | None, str],
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        ctx: _Ctx,
        *,
        envelope: str,
        hlc: Any,
        hlc_source: str | None = None,
        key_value: Any = None,
        key_names: tuple[str, ...] | None = None,
        extra: Mapping[str, Any] | None = None,
        mvcc: Any = None,
        commit_ns: int | None = None,
        text_values: bool = False,
    ) -> Decoded:
        database, schema, table, family, topic = where
        metadata = ctx.meta
        metadata["topic"] = topic
        metadata.update(extra or {})
        if family:
            metadata["column_family"] = family
        if ctx.partition is not None:
            metadata["partition"] = ctx.partition
        types = dict(ctx.avro_types)
        types.update(
            self.declared_types(table, schema, cockroachdb_type, database=database, mapper="crdb")
        )
        row_types: dict[str, str] = {}
        typed_after = (
            None if after is None else self._image(after, types, ctx, row_types, text_values)
        )
        typed_before = (
            None if before is None else self._image(before, types, ctx, row_types, text_values)
        )

        # key: values in primary-key order, names from the message or configuration
        values: list[Any] | None = None
        if isinstance(key_value, dict):
            named = {str(k): _unwrap(v) for k, v in key_value.items()}
            key_names = key_names or tuple(named)
            values = [named.get(n) for n in key_names]
        elif isinstance(key_value, list):
            values = [_unwrap(v) for v in key_value]
        elif key_value is not None:
            raise self.fail("BAD_KEY", f"key must be an array or object, got {kind(key_value)}")
        names = key_names or self.key_names(table, schema, database)
        key: dict[str, Any] | None = None
        if values is not None and names:
            if len(values) != len(names):
                raise self.fail(
                    "KEY_LENGTH_MISMATCH",
                    f"key {_short(values)} has {len(values)} value(s) but table {table!r} has "
                    f"{len(names)} key column(s) {list(names)}",
                )
            key = {
                n: self._value(n, v, types, ctx, row_types, False)
                for n, v in zip(names, values, strict=True)
            }
        elif values is not None:
            self.unnamed_key(values, ctx.item)
        else:
            key = self.image_key(names, typed_before, typed_after, op, table)
        partial = bool(family) and op != "DELETE"
        if partial and typed_after is not None and key is not None:
            # a column family carries only its columns: the key columns are added
            typed_after = {**key, **typed_after}

        return self.make_event(
            op,
            (database, schema, table),
            self._order(hlc, hlc_source, ctx, commit_ns, mvcc),
            ctx.item,
            source="cockroachdb",
            key=key,
            before=typed_before,
            after=typed_after,
            partial=partial,
            types=row_types,
        )

    def _order(
        self,
        hlc: Any,
        hlc_source: str | None,
        ctx: _Ctx,
        commit_ns: int | None,
        mvcc: Any,
    ) -> Order:
        """HLC ``(wall, logical)`` as numbers, else delivery order."""
        position: dict[str, Any] = {}
        for k in ("kafka_topic", "kafka_partition", "kafka_offset"):
            if k in ctx.meta:
                position[k.removeprefix("kafka_")] = ctx.meta[k]
        if mvcc is not None:
            position["mvcc_timestamp"] = str(_unwrap(mvcc))
        if hlc is not None:
            try:
                wall, logical = positions.crdb_hlc_decimal(_unwrap(hlc))
            except ValueError as e:
                raise self.fail("BAD_HLC", f"{hlc_source or 'updated'}: {e}") from None
            position["hlc"] = f"{wall}.{logical:010d}"
            ctx.meta["sequence_source"] = hlc_source or "updated"
            instant = _wall_time(commit_ns if commit_ns is not None else wall)
            return Order(sequence.encode((wall, logical)), position, instant)
        ts = _wall_time(commit_ns) if commit_ns is not None else None
        return Order(self.delivery_order(ctx.item), position, ts)

    def _image(
        self,
        row: Mapping[str, Any],
        types: Mapping[str, str],
        ctx: _Ctx,
        row_types: dict[str, str],
        text_values: bool,
    ) -> dict[str, Any]:
        return {
            str(c): self._value(str(c), _unwrap(v), types, ctx, row_types, text_values)
            for c, v in row.items()
        }

    def _value(
        self,
        col: str,
        value: Any,
        types: Mapping[str, str],
        ctx: _Ctx,
        row_types: dict[str, str],
        text_values: bool,
    ) -> Any:
        """A column value (typed, or wire), recording the column's type in ``row_types``: the
        declared or Avro type, else the type of the value as the message writes it."""
        t = types.get(col)
        if t is not None:
            row_types.setdefault(col, t)
        if value is None:
            return None
        if isinstance(value, dict) and value.get(_JSON_NULL) is True and len(value) == 1:
            # JSONB null, not SQL NULL
            row_types.setdefault(col, "string")
            return "null"
        if col in ctx.bit_columns and isinstance(value, list):
            try:
                return bits_from_avro(value)
            except (ValueError, TypeError) as e:
                raise self.fail("BAD_VALUE", f"column {col!r} (BIT): {e}") from None
        if t is None:
            if text_values:
                row_types.setdefault(col, "string")
                return value
            if isinstance(value, dict | list):
                row_types.setdefault(col, "string")
                return _json_text(value)
            if isinstance(value, float):
                value = Decimal(repr(value))
            inferred = infer_type(value) or "json"
            if inferred is not None:
                row_types.setdefault(col, inferred)
            return self.keep(value)
        if t == "binary" and isinstance(value, str) and value.startswith("\\x"):
            try:
                value = bytes.fromhex(value[2:])
            except ValueError as e:
                raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None
        elif t == "json":
            return value if isinstance(value, str) else _json_text(value)
        elif t.startswith("decimal") and isinstance(value, bytes):
            value = value.decode()
        return self.value(col, value, t)


# ---------------------------------------------------------------------- helpers


def _is_enriched(doc: Mapping[str, Any]) -> bool:
    op = doc.get("op")
    if not isinstance(op, str) or op not in ENRICHED_OPS:
        return False
    source = doc.get("source")
    if isinstance(source, dict):
        return (
            source.get("origin") == "cockroachdb"
            or "ts_hlc" in source
            or ("primary_keys" in source and "table_name" in source)
        )
    return "ts_ns" in doc and ("after" in doc or "before" in doc)


def _sinkless(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A sinkless row's fields (lower-cased), or None."""
    lower = {str(k).lower(): v for k, v in doc.items()}
    if len(lower) != len(doc) or not lower.keys() <= SINKLESS_FIELDS:
        return None
    return lower if "table" in lower and "value" in lower else None


def _hlc_field(doc: Mapping[str, Any]) -> tuple[Any, str | None]:
    if doc.get("updated") is not None:
        return _unwrap(doc["updated"]), "updated"
    if doc.get("mvcc_timestamp") is not None:
        return _unwrap(doc["mvcc_timestamp"]), "mvcc_timestamp"
    return None, None


def _unwrap(value: Any) -> Any:
    """An Avro JSON-encoded union branch (``{"long": 1}``, ``{"string": "x"}``) → its value."""
    if isinstance(value, dict) and len(value) == 1:
        ((branch, inner),) = value.items()
        if branch in _AVRO_BRANCHES:
            if branch == "array" and isinstance(inner, list):
                return [_unwrap(v) for v in inner]
            return inner
    return value


def _avro_record_body(value: Any) -> Any:
    """``{"office_dogs": {"id": {"long": 1}}}`` (a record in Avro's JSON encoding, named after
    the table) → its fields; anything else as it is."""
    name = _avro_record_name(value)
    if name is None:
        return value
    (inner,) = value.values()
    return {k: _unwrap(v) for k, v in inner.items()}


def _avro_record_name(value: Any) -> str | None:
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((name, inner),) = value.items()
    if not isinstance(inner, dict) or name in _AVRO_BRANCHES:
        return None
    if not inner or not all(
        v is None or (isinstance(v, dict) and len(v) == 1 and next(iter(v)) in _AVRO_BRANCHES)
        for v in inner.values()
    ):
        return None
    return _record_topic(name)


def _record_topic(name: str) -> str:
    """An Avro record name → topic: the namespace (``super.drivers``) dropped, ``_u002e_`` (an
    escaped dot, column families) restored."""
    return name.rsplit(".", 1)[-1].replace("_u002e_", ".")


def avro_schema_types(schema: Any) -> tuple[dict[str, str], frozenset[str]]:
    """Column types (and BIT columns) of a changefeed Avro schema: the row record under
    ``after``/``before`` (wrapped), or the top-level record (bare/row)."""
    types: dict[str, str] = {}
    bits: set[str] = set()
    if not isinstance(schema, dict):
        return types, frozenset()
    fields = [f for f in schema.get("fields", []) if isinstance(f, dict)]
    row_fields: list[dict[str, Any]] = []
    for f in fields:
        if f.get("name") in ("after", "before"):
            row_fields.extend(record_fields(f.get("type")))
    if not row_fields:
        row_fields = [
            f
            for f in fields
            if f.get("name") not in ("__crdb__", "updated", "resolved", "mvcc_timestamp")
        ]
    named: dict[str, Any] = {}
    for f in row_fields:
        name = str(f.get("name"))
        if name in types:
            continue
        if _BIT_DOC.search(str(f.get("doc", ""))):
            # BIT/VARBIT travel as arrays of 64-bit words
            bits.add(name)
            types[name] = "string"
            continue
        types[name] = canonical_type(f.get("type"), named)
    return types, frozenset(bits)


def enriched_schema_types(schema: Mapping[str, Any]) -> dict[str, str]:
    """Column types from an enriched message's Kafka-Connect-style ``schema`` section."""
    out: dict[str, str] = {}
    fields = schema.get("fields") if isinstance(schema, Mapping) else None
    if not isinstance(fields, list):
        raise Dialect.fail(
            "BAD_SCHEMA", f"the enriched 'schema' needs a list of 'fields', got {kind(fields)}"
        )
    for f in fields:
        if not isinstance(f, dict) or f.get("field") not in ("after", "before", "key"):
            continue
        columns = f.get("fields")
        for col in columns if isinstance(columns, list) else []:
            if isinstance(col, dict) and isinstance(col.get("field"), str):
                out.setdefault(col["field"], _connect_type(col))
    return out


_CONNECT_NAMED: dict[str, str] = {
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "date": "date",
    "time": "time",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
}
_CONNECT_TYPES: dict[str, str] = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
    "array": "json",
    "struct": "json",
    "map": "json",
}


def _connect_type(col: Mapping[str, Any]) -> str:
    name = str(col.get("name", "")).lower()
    if name == "decimal":
        params = col.get("parameters")
        params = params if isinstance(params, dict) else {}
        try:
            return decimal_type(int(params.get("precision", 38)), int(params.get("scale", 18)))
        except (TypeError, ValueError):
            return "decimal(38,18)"
    if name in _CONNECT_NAMED:
        return _CONNECT_NAMED[name]
    return _CONNECT_TYPES.get(str(col.get("type", "")).lower(), "string")


def _json_text(value: Any) -> str:
    return json_bytes(_json_nulls(value)).decode()


def _json_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_JSON_NULL) is True and len(value) == 1:
            return None
        return {k: _json_nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_nulls(v) for v in value]
    return value


def _wall_time(wall_ns: int) -> dt.datetime:
    try:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=wall_ns // 1000)
    except OverflowError:
        raise Dialect.fail("BAD_HLC", f"HLC wall time {wall_ns} ns is out of range") from None


def _short(value: Any) -> str:
    text = dumps(value).decode() if value is not None else "none"
    return text if len(text) <= 80 else text[:77] + "..."
