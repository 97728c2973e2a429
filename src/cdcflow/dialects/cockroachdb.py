"""CockroachDB changefeed messages (Kafka, cloud storage, webhook, sinkless; JSON, Avro, CSV).

Spec: ``specs/cockroachdb-changefeed-messages.txt`` (the "Changefeed Messages" page: responses,
envelopes, ordering guarantees, deletes, resolved messages, duplicates, schema changes, Avro),
checked against real messages (``conformance/cockroachdb/``: CockroachDB's documentation, its
encoder and webhook-sink tests, and its replicator project), which win where the two differ.

Vendor → canonical:

==============================================  ===============================================
changefeed message                              canonical field
==============================================  ===============================================
``after`` (wrapped), top-level row (bare,       ``after``
row), enriched ``after``
``before`` (``diff``), enriched ``before``      ``before``
``after: null`` / enriched ``op: d`` / a key    ``operation`` ``DELETE``
with an empty value (row, bare)
``after`` with ``before: null`` (``diff``),     ``operation`` ``INSERT``
enriched ``op: c``
``after`` with a ``before`` image, ``op: u``    ``operation`` ``UPDATE``
``after`` without ``diff``; bare and row rows   ``operation`` ``UPSERT`` (insert or update:
                                                the message cannot tell)
CSV initial-scan rows                           ``operation`` ``SNAPSHOT``
``{"resolved": ...}``, ``__crdb__.resolved``,   ``operation`` ``RESOLVED`` (``table`` empty;
webhook resolved bodies, ``*.RESOLVED`` files   ``metadata.topic``/``partition`` when known)
``updated`` (``__crdb__.updated``, enriched     ``sequence`` = (wall, logical) as numbers;
``source.ts_hlc``), else ``mvcc_timestamp``     ``position.hlc``; ``timestamp`` = wall time
no HLC at all                                   ``sequence`` = delivery order
                                                (``metadata.sequence_source: delivery``)
``key`` array (key_in_value, cloud storage,     ``key`` values, in primary-key order; names
webhook), ``__crdb__.key``, the Kafka message   from enriched ``source.primary_keys``, a key
key, the sinkless/console key                   object, else the source's configured ``keys``
``topic`` (``topic_in_value``, webhook),        ``table`` (``<table>.<family>`` → table and
``__crdb__.topic``, Kafka topic, cloud-storage  ``metadata.column_family``; ``db.schema.table``
file name, Avro record name, enriched           → ``database``/``schema``/``table``)
``source.table_name``; else option ``table``
enriched ``source`` (cluster, job, node...),    ``metadata``
``ts_ns``; Kafka topic/partition/offset; file
name parts
Avro schema, enriched ``schema`` section,       ``types``; else inferred per value (below)
declared column types
==============================================  ===============================================

Envelopes, and what each can say:

* ``wrapped`` (default): ``after`` (null for deletes), ``before`` with ``diff``, ``key`` when the
  sink has no message key (cloud storage, webhook, Pub/Sub) or with ``key_in_value``,
  ``updated``/``mvcc_timestamp`` when asked for, ``topic`` with ``topic_in_value``. Everything
  needed is there once the key is known; without ``diff`` inserts and updates are ``UPSERT``.
* ``enriched`` (v25.2+): ``op`` ``c``/``u``/``d``, ``after``/``before``, ``ts_ns`` (processing
  time), optional ``source`` (``table_name``, ``primary_keys``, ``ts_hlc``, ``ts_ns``,
  ``mvcc_timestamp``...) and optional Kafka-Connect-style ``schema`` (``{"payload", "schema"}``:
  its field types become the event's ``types``). The most complete envelope: key names travel.
* ``bare``: the row at the top level, metadata under ``__crdb__`` (``key``, ``updated``,
  ``topic``, ``resolved``). A delete is a key without row columns (an empty value): it can only
  be read where a key travels outside the value (Kafka key, console prefix, ``__crdb__.key``)
  and the source option ``envelope: bare`` says empty values are deletes. Such a delete carries
  no ``updated``: it is ordered by delivery, after every HLC-stamped version of its row, so a
  feed with ``updated`` and re-inserted keys, or with replays, is not exact (the same holds for
  ``row``); the testing kit does not render these feeds for that reason.
* ``row``: the row only. Identical to ``bare`` with ``__crdb__`` when ``updated`` is on. A row
  has no delete form except an empty value next to a key: row messages are read when a key
  travels with them (Kafka record, console prefix) or when the source option ``envelope: row``
  declares that the feed is row-shaped (its deletes are then never seen: the replica keeps
  deleted rows; the documentation says so). Without either, an unmarked object is rejected
  ``UNKNOWN_ENVELOPE`` instead of being guessed to be a row.
* ``key_only``: only the key (a key array, or sinkless ``{"key": "[...]", "table": ..,
  "value": ""}``). Inserts, updates and deletes look the same and carry no values: nothing can
  be applied, so these messages are rejected ``KEY_ONLY_ENVELOPE``. (The same empty value is a
  delete under ``row``/``bare``: set ``envelope`` to say which.)

Ordering. ``updated`` (else enriched ``source.ts_hlc``, else ``mvcc_timestamp``) is an HLC
``wall.logical`` (``1532377312562986715.0000000000``): ``sequence`` = (wall, logical) compared as
numbers, never through a float (HLCs may arrive as unquoted JSON numbers beyond 2^53: messages
holding numbers with fractions or more than 19 digits are parsed with exact decimals; the
fraction is the logical counter over 10 digits, so the hand-written ``"3.0"`` is logical 0). The
spec's guarantee — an out-of-order duplicate of an earlier version may follow, an unseen older
version never does — makes HLC order exact: stale duplicates lose to the newer version already
applied. A schema-change backfill re-emits every row at the schema change's timestamp (with or
without the old-schema copy), so the replica ends with the new column. Without any HLC the
order is delivery order (file name, line, item: cloud-storage file names start with a timestamp
so name order is time order) and events say ``metadata.sequence_source: delivery``; that order
is exact only when the sink delivered no out-of-order duplicate. CSV initial-scan rows take the
file name's timestamp as their HLC when the file has a cloud-storage name.

Where the table comes from, first found: ``topic``/``topic:`` in the message (the webhook test
writes ``"topic:"``, passed through verbatim by the sink: both are read),
``__crdb__.topic``, enriched ``source.table_name``, the transport's topic (Kafka record
``topic``, sinkless ``table``, webhook item ``topic``), the Avro record name (``_u002e_`` is a
dot), the cloud-storage file name, the source option ``table``. A topic with two dotted parts is
``<table>.<family>`` (``split_column_families``): such messages carry only that family's columns
and are ``partial`` events (the key columns are added from the key); three parts are
``database.schema.table`` (``full_table_name``), four add the family.

Keys: a key array holds values in primary-key order. Names come from enriched
``source.primary_keys``, from a key object (``{"id": ...}``, Avro keys), else from the source's
configured ``keys`` for the table. An array whose length differs from the configured key is
rejected ``KEY_LENGTH_MISMATCH``; a delete or a column-family message whose key names are
unknown is rejected ``KEY_NAMES_UNKNOWN`` (its row cannot be found without them).

Types: JSON carries none. Declared column types (CockroachDB names through
:data:`cdcflow.types.COCKROACHDB`, or canonical) win; then the Avro schema or the enriched
``schema`` section; else each value's type is inferred: integers ``bigint``, numbers with a
fraction ``decimal(p,s)`` from the literal's digits (scale = its fractional digits, precision =
scale + at least 20 integer digits, so ``25.00`` stays exact and rows with other magnitudes fit
the same column), text ``string``, objects/arrays ``json``. JSONB ``{"__crdb_json_null__":
true}`` is the JSON value ``null`` (text ``null``), distinct from SQL NULL. Declared ``BYTES``
read CockroachDB's ``\\x`` hex text (else base64). Virtual computed columns are absent from
messages and so from replicas.

Transports and files:

* JSON lines / documents: one message per line or document; pretty-printed documents written
  one after another (as console consumers print them) are split. Console/sinkless lines
  ``<key array><space or tab><value>`` (``[5] {"after": null}``) carry the key outside the value.
* Kafka records as JSON lines: ``{"topic", "partition", "offset", "key", "value"}`` with the key
  and value as JSON text (or JSON, or ``key_base64``/``value_base64`` bytes); a null or empty
  value is a tombstone. Pulsar's ``{"Key", "Value", "Topic"}`` and sinkless
  ``{"key", "table", "value"}`` rows are read the same way. A ``value_base64`` starting with the
  Confluent magic byte 0 and a 4-byte schema id is Avro, decoded with the schema
  ``<id>.avsc``/``<id>.json`` from the source option ``schema_dir`` (unknown id →
  ``UNKNOWN_SCHEMA_ID``, undecodable → ``CORRUPT_AVRO``).
* Webhook bodies ``{"payload": [...], "length": N}``: ``length`` must equal the number of
  messages (``LENGTH_MISMATCH``); bodies without ``length`` are accepted; a bad item is rejected
  alone.
* Cloud-storage files ``[prefix/]<date>[/<hour>]/<33-digit timestamp>-<uniquer>-<node>-<sink
  id>-<file id>-<topic>-<schema id>.<ndjson|json|csv|avro>`` (:func:`parse_object_name`; the
  topic may hold dots and dash-numbers: the schema id is the last dash-number) and
  ``<timestamp>.RESOLVED`` files (an empty one is read from its name).
* ``.avro`` object-container files whose writer schema is a changefeed envelope (``after``,
  ``before``, ``updated``, ``resolved`` or ``__crdb__`` fields); other ``.avro`` files are handed
  to the next dialect that frames ``.avro`` files. Avro unions decode to plain values; the Avro
  JSON encoding (``{"after":{"office_dogs":{"id":{"long":1}}}}``) is unwrapped; ``BIT``/
  ``VARBIT`` columns (arrays of 64-bit integers whose first element counts the bits used in the
  last one) become bit strings; ``DECIMAL`` is a decimal or its string form.
* ``.csv`` files: CockroachDB's ``format=csv`` initial scans (rows → ``SNAPSHOT``; columns from
  the source option ``csv_columns: {table: [columns]}``, wrong count → ``CSV_COLUMN_COUNT``;
  an empty field is NULL) or sinkless ``table,key,value`` output (each row a message).

Contradictions and variants (all forms accepted): the spec prints the ordering example with
``__crdb__`` (bare) while its text describes ``updated`` as a top-level field (wrapped); HLCs are
quoted text in the spec and unquoted numbers in CDC-query output; hand-written messages use
short HLCs (``"1.0"``); deletes come as ``after: null``, as ``before`` only (no ``after``), or as a
key with ``updated`` only; the resolved message is ``{"resolved": ...}`` for wrapped feeds and
``{"__crdb__": {"resolved": ...}}`` for row/key_only/bare feeds; webhook bodies with and without
``length``; the webhook test's ``"topic:"`` key.

RESOLVED events carry what the engine needs (HLC as sequence and position, topic, partition):
it keeps per-scope watermarks (``cdcflow watermarks``) and, with ``consistency: resolved``, holds
events above the lowest watermark of their table or feed until it passes.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import csv
import datetime as dt
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import orjson

from cdcflow import positions, sequence
from cdcflow.dialects.base import Decoded, Dialect, RawMessage
from cdcflow.errors import DecodeError
from cdcflow.event import new_event
from cdcflow.framing import json_error
from cdcflow.types import (
    ValueTypeError,
    cockroachdb_type,
    convert,
    decimal_type,
    json_default,
)

#: Source option values of ``envelope``.
ENVELOPES: tuple[str, ...] = ("auto", "wrapped", "bare", "row", "key_only", "enriched")

#: Enriched ``op`` → canonical operation.
ENRICHED_OPS: dict[str, str] = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}

#: Top-level fields of a wrapped message.
WRAPPED_FIELDS: frozenset[str] = frozenset(
    {"after", "before", "key", "updated", "mvcc_timestamp", "topic", "topic:"}
)
#: Fields of a transport record (Kafka record written as JSON, Pulsar message, sinkless row).
RECORD_FIELDS: frozenset[str] = frozenset(
    {
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "timestamp",
        "timestamptype",
        "key_base64",
        "value_base64",
        "table",
    }
)
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

_OCF_MAGIC = b"Obj\x01"
_ERROR_HEADER = "x-error"
_MARK_HEADER = "x-cockroachdb"
_RISKY_NUMBER = re.compile(rb"[:\[,]\s*-?(?:\d+[.eE]|\d{20})")
_JSON_NULL = "__crdb_json_null__"
_HANDING_OVER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cockroachdb_handing_over", default=False
)
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


# ---------------------------------------------------------------------- file names


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


# ---------------------------------------------------------------------- exact JSON


def loads_exact(data: bytes | str) -> Any:
    """JSON with exact numbers: numbers with a fraction become ``Decimal`` and integers of any
    size stay integers (orjson turns both into floats). Raises ``orjson.JSONDecodeError``."""
    raw = data.encode() if isinstance(data, str) else data
    doc = orjson.loads(raw)
    if _RISKY_NUMBER.search(raw):
        doc = json.loads(raw.decode("utf-8"), parse_float=Decimal)
    return doc


def _concatenated(text: str) -> list[Any] | None:
    """JSON documents written one after another (pretty-printed console output), else None."""
    decoder = json.JSONDecoder(parse_float=Decimal)
    docs: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            doc, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        docs.append(doc)
    return docs if len(docs) > 1 else None


def _console(text: str) -> tuple[Any, Any] | None:
    """A console/sinkless line ``<key> <value>`` (the key a JSON array, or an Avro key object
    as the spec prints it) → (key, value or None), else None."""
    decoder = json.JSONDecoder(parse_float=Decimal)
    s = text.strip()
    if not s.startswith(("[", "{")):
        return None
    try:
        key, end = decoder.raw_decode(s, 0)
    except json.JSONDecodeError:
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
    except json.JSONDecodeError:
        return None
    if rest[end:].strip() or not isinstance(value, dict):
        return None
    return key, value


# ---------------------------------------------------------------------- decoding context


@dataclass
class _Ctx:
    """Where a message came from: transport key and topic, and lineage metadata."""

    msg: RawMessage
    key: Any = None
    topic: str | None = None
    partition: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    avro_types: dict[str, str] | None = None
    bit_columns: frozenset[str] = frozenset()
    item: int = 0
    transport: bool = False


class CockroachDbDialect(Dialect):
    """Decoder for CockroachDB changefeed messages."""

    name: ClassVar[str] = "cockroachdb"
    binary_extensions: ClassVar[tuple[str, ...]] = (".avro", ".csv", ".resolved")

    # ------------------------------------------------------------------ framing

    def frame(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """``.avro`` object-container files with a changefeed writer schema (other ``.avro``
        files are handed to the next dialect that frames them), ``.csv`` files (initial scans
        or sinkless ``table,key,value`` output) and empty ``.RESOLVED`` files."""
        low = (origin or "").lower()
        if low.endswith(".resolved"):
            if data.strip():
                return None
            parsed = parse_object_name(origin or "")
            if parsed is None or not parsed["resolved"]:
                return None
            wall, logical = parsed["hlc"]
            doc = {"resolved": f"{wall}.{logical:010d}"}
            return [RawMessage(data=orjson.dumps(doc), origin=origin, doc=doc, parsed=True)]
        if low.endswith(".csv"):
            return self._frame_csv(data, origin)
        if low.endswith(".avro"):
            return self._frame_avro(data, origin)
        return None

    def _frame_avro(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        import fastavro

        if not data.startswith(_OCF_MAGIC):
            return self._hand_over(data, origin)
        try:
            reader = fastavro.reader(io.BytesIO(data))
            schema = reader.writer_schema
        except Exception:  # fastavro raises many types for corrupt input
            return self._hand_over(data, origin) or [
                _error(data, origin, 0, "CORRUPT_AVRO", "unreadable Avro header")
            ]
        if not _is_changefeed_schema(schema):
            return self._hand_over(data, origin)
        types, bits = avro_schema_types(schema)
        out: list[RawMessage] = []
        try:
            for i, record in enumerate(reader):
                doc = {"_avro": _plain(record), "_avro_types": types, "_avro_bits": sorted(bits)}
                out.append(
                    RawMessage(
                        data=orjson.dumps(_plain(record), default=json_default),
                        origin=origin,
                        offset=i,
                        index=i,
                        doc=doc,
                        parsed=True,
                    )
                )
        except Exception as e:  # fastavro raises many types for corrupt input
            problem = f"corrupt Avro file after {len(out)} record(s): {type(e).__name__}: {e}"
            out.append(_error(data, origin, len(out), "CORRUPT_AVRO", problem))
        return out

    def _hand_over(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """Another dialect's ``.avro`` file: framed by the next registered dialect that frames
        ``.avro`` files (never back to this one while handing over)."""
        if _HANDING_OVER.get():
            return None
        from cdcflow.dialects import dialect_names, get_dialect

        name = (origin or "").lower()
        token = _HANDING_OVER.set(True)
        try:
            for other in dialect_names():
                if other == self.name:
                    continue
                d = get_dialect(other, self.options)
                if d.binary_extensions and name.endswith(d.binary_extensions):
                    framed = d.frame(data, origin)
                    if framed is not None:
                        return framed
        finally:
            _HANDING_OVER.reset(token)
        return None

    def _frame_csv(self, data: bytes, origin: str | None) -> list[RawMessage]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return [_error(data, origin, 0, "BAD_UTF8", f"CSV file is not UTF-8: {e}")]
        rows = list(csv.reader(io.StringIO(text)))
        out: list[RawMessage] = []
        sinkless = bool(rows) and [c.strip().lower() for c in rows[0]] == ["table", "key", "value"]
        offset = 0
        lines = text.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line.encode()))
        for n, row in enumerate(rows):
            if sinkless and n == 0:
                continue
            if not row or all(not c for c in row):
                continue
            offset = starts[n] if n < len(starts) else offset
            raw = ",".join(row).encode()
            doc: dict[str, Any]
            if sinkless:
                if len(row) != 3:
                    out.append(
                        _error(
                            raw,
                            origin,
                            offset,
                            "CSV_COLUMN_COUNT",
                            f"sinkless CSV row {n + 1} has {len(row)} fields, expected 3 "
                            "(table,key,value)",
                        )
                    )
                    continue
                doc = {"table": row[0], "key": row[1], "value": row[2]}
            else:
                doc = {"_csv": row}
            out.append(
                RawMessage(data=raw, origin=origin, offset=offset, line=n + 1, doc=doc, parsed=True)
            )
        return out

    # ------------------------------------------------------------------ recognition

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        if msg.headers and _MARK_HEADER in msg.headers:
            return 1.0
        if doc is None:
            if (msg.origin or "").lower().endswith((".csv", ".resolved")):
                return 0.6
            try:
                text = msg.data.decode("utf-8")
            except UnicodeDecodeError:
                return 0.0
            console = _console(text)
            if console is not None:
                return 0.8 if console[1] is None or isinstance(console[1], dict) else 0.0
            docs = _concatenated(text)
            if docs and all(isinstance(d, dict) and self._score(d) > 0 for d in docs):
                return 0.8
            return 0.0
        if isinstance(doc, dict):
            if "_csv" in doc or "_avro" in doc:
                return 1.0
            return self._score(doc)
        return 0.0

    def _score(self, doc: Mapping[str, Any]) -> float:
        keys = set(doc)
        crdb = doc.get("__crdb__")
        if isinstance(crdb, dict):
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
            if schema_name.startswith("cockroachdb") or self._enriched(payload):
                return 0.95
            return 0.0
        if self._enriched(doc):
            return 0.9
        if "after" in keys or "before" in keys:
            return 0.9 if keys <= WRAPPED_FIELDS else 0.0
        if keys and keys <= {"key", "updated", "mvcc_timestamp"} and "updated" in keys:
            return 0.8 if isinstance(doc.get("key"), list) else 0.0
        record = _record(doc)
        if record is not None:
            return self._score_record(record)
        return 0.0

    @staticmethod
    def _enriched(doc: Mapping[str, Any]) -> bool:
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

    def _score_record(self, record: Mapping[str, Any]) -> float:
        if "specversion" in str(record.get("value", ""))[:2000]:
            return 0.0
        raw = record.get("value_base64")
        if isinstance(raw, str):
            try:
                body = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                return 0.0
            return 0.9 if body[:1] == b"\x00" and len(body) >= 5 else 0.0
        value = record.get("value")
        if isinstance(value, str) and value.strip():
            try:
                value = loads_exact(value)
            except orjson.JSONDecodeError:
                return 0.0
        if value is None or value == "":
            key = record.get("key")
            if isinstance(key, str):
                try:
                    key = loads_exact(key)
                except orjson.JSONDecodeError:
                    return 0.0
            return 0.7 if isinstance(key, list) else 0.0
        if isinstance(value, dict):
            score = self._score(value)
            if score:
                return score
            key = record.get("key")
            if isinstance(key, str) and key.startswith("["):
                return 0.6
        return 0.0

    # ------------------------------------------------------------------ decoding

    def decode(self, msg: RawMessage) -> list[Decoded]:
        headers = dict(msg.headers or {})
        if _ERROR_HEADER in headers:
            raise self.fail(
                headers[_ERROR_HEADER].decode(), headers.get("x-error-message", b"").decode()
            )
        ctx = _Ctx(msg=msg)
        parsed = self._parse(msg)
        if isinstance(parsed, _Console):
            ctx.key, ctx.transport = parsed.key, True
            if parsed.value is None:
                return [self._empty_value(ctx)]
            return self._message(parsed.value, ctx)
        if isinstance(parsed, _Many):
            out: list[Decoded] = []
            for i, d in enumerate(parsed.docs):
                sub = _Ctx(msg=msg, item=i)
                try:
                    out.extend(self._message(d, sub))
                except DecodeError as e:
                    out.append(self.reject(e.code, e.message, _dumps(d), i))
            return out
        doc = parsed
        if isinstance(doc, dict) and "_csv" in doc:
            return [self._csv_row(doc["_csv"], ctx)]
        if isinstance(doc, dict) and "_avro" in doc:
            ctx.avro_types = dict(doc.get("_avro_types") or {})
            ctx.bit_columns = frozenset(doc.get("_avro_bits") or ())
            return self._message(doc["_avro"], ctx)
        if isinstance(doc, list):
            raise self.fail(
                "KEY_ONLY_ENVELOPE",
                "a bare key array: envelope=key_only output says only that the row with this "
                "key changed (no values, inserts and deletes alike): it cannot be applied",
            )
        if not isinstance(doc, dict):
            if msg.index is not None:
                raise self.fail(
                    "KEY_ONLY_ENVELOPE",
                    f"element {msg.index} of a top-level JSON array ({_kind(doc)}): a "
                    "key_only key array cannot be applied",
                )
            raise self.fail(
                "NOT_AN_EVENT", f"a changefeed message is a JSON object, got {_kind(doc)}"
            )
        return self._message(doc, ctx)

    def _parse(self, msg: RawMessage) -> Any:
        """The message's JSON value with exact numbers, a console line, or several documents."""
        data = msg.data
        if msg.parsed and isinstance(msg.doc, dict) and ("_csv" in msg.doc or "_avro" in msg.doc):
            return msg.doc
        if msg.parsed and msg.doc is not None and not _RISKY_NUMBER.search(data):
            return msg.doc
        try:
            return loads_exact(data)
        except orjson.JSONDecodeError as e:
            problem = json_error(data, e)
        except (ValueError, RecursionError):
            raise self.fail("NOT_JSON", "message is not JSON") from None
        if problem.code == "BAD_UTF8":
            raise problem
        text = data.decode("utf-8", "replace")
        console = _console(text)
        if console is not None:
            return _Console(*console)
        docs = _concatenated(text)
        if docs is not None:
            return _Many(docs)
        raise problem

    # ------------------------------------------------------------------ message shapes

    def _message(self, doc: Any, ctx: _Ctx) -> list[Decoded]:
        if not isinstance(doc, dict):
            raise self.fail(
                "NOT_AN_EVENT", f"a changefeed message is a JSON object, got {_kind(doc)}"
            )
        payload = doc.get("payload")
        if isinstance(payload, list) and set(doc) <= {"payload", "length"}:
            return self._webhook(doc, payload, ctx)
        if isinstance(payload, dict) and isinstance(doc.get("schema"), dict):
            types = enriched_schema_types(doc["schema"])
            ctx.avro_types = {**types, **(ctx.avro_types or {})}
            return [self._enriched_event(payload, ctx)]
        record = _record(doc) if not ctx.transport else None
        if record is not None:
            return self._record(record, ctx)
        if set(doc) <= {"resolved"} and "resolved" in doc:
            return [self._resolved(_unwrap(doc["resolved"]), ctx, "resolved")]
        crdb = doc.get("__crdb__")
        if isinstance(crdb, dict) and "resolved" in crdb:
            return [self._resolved(_unwrap(crdb["resolved"]), ctx, "__crdb__.resolved")]
        if self._enriched(doc) or (
            isinstance(doc.get("op"), str) and ("source" in doc or "ts_ns" in doc)
        ):
            return [self._enriched_event(doc, ctx)]
        if isinstance(crdb, dict):
            return [self._bare(doc, crdb, ctx)]
        if "after" in doc or "before" in doc:
            return [self._wrapped(doc, ctx)]
        if set(doc) <= {"key", "updated", "mvcc_timestamp"} and "key" in doc:
            return [self._wrapped(doc, ctx)]
        envelope = self._envelope(None)
        if ctx.transport or ctx.key is not None or envelope in ("row", "bare"):
            return [self._bare(doc, {}, ctx, envelope="row")]
        raise self.fail(
            "UNKNOWN_ENVELOPE",
            "a JSON object with none of after/before, __crdb__, payload, resolved, op or a "
            "transport key: if the feed uses envelope=row (or is a CDC query's own shape), set "
            "the source option envelope: row — deletes are then not delivered and stay in the "
            "replica",
        )

    def _record(self, record: Mapping[str, Any], ctx: _Ctx) -> list[Decoded]:
        """A transport record: Kafka record written as JSON, Pulsar message, sinkless row."""
        ctx.transport = True
        topic = record.get("topic", record.get("table"))
        ctx.topic = topic if isinstance(topic, str) and topic else None
        ctx.partition = record.get("partition")
        for k in ("topic", "partition", "offset", "timestamp"):
            if record.get(k) is not None:
                ctx.meta[f"kafka_{k}"] = record[k]
        if "table" in record and "topic" not in record:
            ctx.meta["sinkless_table"] = record["table"]
            ctx.meta.pop("kafka_topic", None)
        key: Any = record.get("key")
        if isinstance(key, str):
            key = self._json_text(key, "key") if key.strip() else None
        kb = record.get("key_base64")
        if key is None and isinstance(kb, str):
            key = self._avro_value(_b64(kb, "key_base64", self), ctx, is_key=True)
        ctx.key = key
        value: Any = record.get("value")
        vb = record.get("value_base64")
        if isinstance(vb, str):
            body = _b64(vb, "value_base64", self)
            value = self._avro_value(body, ctx, is_key=False) if body[:1] == b"\x00" else None
            if value is None and body and body[:1] != b"\x00":
                value = self._json_text(body.decode("utf-8", "replace"), "value")
        elif isinstance(value, str):
            value = self._json_text(value, "value") if value.strip() else None
        if value is None:
            return [self._empty_value(ctx)]
        return self._message(value, ctx)

    def _json_text(self, text: str, what: str) -> Any:
        try:
            return loads_exact(text)
        except orjson.JSONDecodeError:
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

    def _webhook(self, doc: Mapping[str, Any], payload: list[Any], ctx: _Ctx) -> list[Decoded]:
        length = doc.get("length")
        if "length" in doc and (
            isinstance(length, bool) or not isinstance(length, int) or length != len(payload)
        ):
            raise self.fail(
                "LENGTH_MISMATCH",
                f"webhook body says length={length!r} but carries {len(payload)} message(s)",
            )
        ctx.meta["webhook_length"] = len(payload)
        out: list[Decoded] = []
        for i, item in enumerate(payload):
            sub = _Ctx(msg=ctx.msg, item=i, meta=dict(ctx.meta))
            try:
                out.extend(self._message(item, sub))
            except DecodeError as e:
                out.append(self.reject(e.code, e.message, _dumps(item), i))
        return out

    # ------------------------------------------------------------------ envelopes

    def _wrapped(self, doc: Mapping[str, Any], ctx: _Ctx) -> Decoded:
        after = _avro_record_body(doc.get("after"))
        before = _avro_record_body(doc.get("before"))
        record_name = _avro_record_name(doc.get("after")) or _avro_record_name(doc.get("before"))
        if record_name and not ctx.topic:
            ctx.topic = record_name.removesuffix("_before")
        has_after = "after" in doc
        if after is not None and not isinstance(after, dict):
            raise self.fail("BAD_ROW", f"'after' must be an object or null, got {_kind(after)}")
        if before is not None and not isinstance(before, dict):
            raise self.fail("BAD_ROW", f"'before' must be an object or null, got {_kind(before)}")
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
        meta = {"envelope": "wrapped", "diff": "before" in doc}
        if not has_after:
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
            raise self.fail("BAD_ROW", f"'before' must be an object or null, got {_kind(before)}")
        topic: str | None = None
        table = source.get("table_name")
        if isinstance(table, str) and table:
            parts = [source.get("database_name"), source.get("schema_name"), table]
            topic = ".".join(str(p) for p in parts if p) if all(parts) else table
            if not all(parts):
                topic = table
        where = self._where(topic, ctx)
        names = source.get("primary_keys")
        key: Any = doc.get("key", ctx.key)
        hlc: Any = None
        hlc_source: str | None = None
        for fld, src in (
            (doc.get("updated"), "updated"),
            (source.get("ts_hlc"), "ts_hlc"),
            (source.get("mvcc_timestamp"), "mvcc_timestamp"),
            (doc.get("mvcc_timestamp"), "mvcc_timestamp"),
        ):
            if fld is not None:
                hlc, hlc_source = fld, src
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
            key_value=key,
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
        meta: dict[str, Any] = {"resolved_form": form, **ctx.meta}
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
        return new_event(
            id=ident,
            dialect=self.name,
            source="cockroachdb",
            operation="RESOLVED",
            timestamp=_wall_time(wall),
            sequence=sequence.encode((wall, logical)),
            position={"hlc": hlc, "resolved": hlc},
            metadata=meta,
        )

    def _csv_row(self, values: list[str], ctx: _Ctx) -> Decoded:
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
        if len(values) != len(columns):
            raise self.fail(
                "CSV_COLUMN_COUNT",
                f"CSV row has {len(values)} field(s); table {where[2]!r} is configured with "
                f"{len(columns)} column(s) {list(columns)}",
            )
        row = {str(c): (v if v != "" else None) for c, v in zip(columns, values, strict=True)}
        hlc: Any = None
        if named is not None:
            wall, logical = named["hlc"]
            hlc = f"{wall}.{logical:010d}"
        return self._row_event(
            where,
            "SNAPSHOT",
            None,
            row,
            ctx,
            envelope="csv",
            hlc=hlc,
            hlc_source="file_name" if hlc else None,
            key_value=None,
            extra={"envelope": "csv"},
            text_values=True,
        )

    # ------------------------------------------------------------------ Avro messages

    def _avro_value(self, body: bytes, ctx: _Ctx, *, is_key: bool) -> Any:
        """A Confluent-framed Avro message (magic byte 0, 4-byte schema id) decoded with the
        schema from the source option ``schema_dir``."""
        import fastavro

        if len(body) < 5 or body[:1] != b"\x00":
            raise self.fail("CORRUPT_AVRO", "not a Confluent-framed Avro message (magic byte 0)")
        schema_id = int.from_bytes(body[1:5], "big")
        schema = self._schema(schema_id)
        try:
            parsed = fastavro.parse_schema(schema)
            record = fastavro.schemaless_reader(io.BytesIO(body[5:]), parsed)
        except Exception as e:  # fastavro raises many types for corrupt input
            raise self.fail(
                "CORRUPT_AVRO", f"Avro message with schema {schema_id}: {type(e).__name__}: {e}"
            ) from None
        if not is_key:
            types, bits = avro_schema_types(schema)
            ctx.avro_types = {**(ctx.avro_types or {}), **types}
            ctx.bit_columns = ctx.bit_columns | bits
        ctx.meta["schema_id" if not is_key else "key_schema_id"] = schema_id
        return _plain(record)

    def _schema(self, schema_id: int) -> Any:
        folder = self.options.extra.get("schema_dir")
        if not folder:
            raise self.fail(
                "UNKNOWN_SCHEMA_ID",
                f"Avro schema id {schema_id}: no schema_dir is configured for this source",
            )
        for ext in (".avsc", ".json"):
            p = Path(str(folder)) / f"{schema_id}{ext}"
            if p.exists():
                try:
                    return orjson.loads(p.read_bytes())
                except orjson.JSONDecodeError as e:
                    raise self.fail("BAD_SCHEMA", f"schema file {p} is not JSON: {e}") from None
        raise self.fail(
            "UNKNOWN_SCHEMA_ID",
            f"Avro schema id {schema_id} is not in {folder} (expected {schema_id}.avsc or "
            f"{schema_id}.json)",
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
        """(database, schema, table, family, topic) of a message."""
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
        metadata: dict[str, Any] = {"topic": topic, **ctx.meta, **(extra or {})}
        if family:
            metadata["column_family"] = family
        if ctx.partition is not None:
            metadata["partition"] = ctx.partition
        types = self._types(table, schema, ctx)
        typed_after = self._image(after, types, ctx) if after is not None else None
        typed_before = self._image(before, types, ctx) if before is not None else None

        # key: names, then values
        values: list[Any] | None = None
        if isinstance(key_value, dict):
            named = {str(k): _unwrap(v) for k, v in key_value.items()}
            key_names = key_names or tuple(named)
            values = [named.get(n) for n in key_names]
        elif isinstance(key_value, list):
            values = [_unwrap(v) for v in key_value]
        elif key_value is not None:
            raise self.fail("BAD_KEY", f"key must be an array or object, got {_kind(key_value)}")
        names = key_names or self.options.keys_for(table, schema)
        if names is None and database:
            names = self.options.keys_for(table, database)
        key: dict[str, Any] | None = None
        if values is not None and names:
            if len(values) != len(names):
                raise self.fail(
                    "KEY_LENGTH_MISMATCH",
                    f"key {_short(values)} has {len(values)} value(s) but table {table!r} has "
                    f"{len(names)} key column(s) {list(names)}",
                )
            key = {}
            for n, v in zip(names, values, strict=True):
                key[n] = self._value(n, v, types, ctx)
        elif values is not None:
            metadata["key_values"] = values
        elif names:
            image = typed_after if typed_after is not None else typed_before
            if image is not None and all(n in image for n in names):
                key = {n: image[n] for n in names}
        if key is None and values is None and op == "DELETE" and typed_before is None:
            raise self.fail(
                "KEY_MISSING",
                f"a delete of table {table!r} carries neither a key nor a before image: the "
                "deleted row cannot be named",
            )
        if key is None and ((op == "DELETE" and typed_before is None) or family):
            raise self.fail(
                "KEY_NAMES_UNKNOWN",
                f"{'a delete' if op == 'DELETE' else 'a column-family message'} of table "
                f"{table!r} carries only key values {_short(values)}: name its key columns in "
                "the source's keys",
            )
        partial = bool(family) and op != "DELETE"
        if partial and typed_after is not None and key is not None:
            typed_after = {**key, **typed_after}

        seq, position, timestamp = self._order(hlc, hlc_source, ctx, metadata, commit_ns, mvcc)
        row_types: dict[str, str] = {}
        for image in (typed_after, typed_before, key):
            for c, v in (image or {}).items():
                if c in row_types:
                    continue
                t = types.get(c) or (None if text_values else _infer(v))
                if t is None and text_values and v is not None:
                    t = "string"
                if t is not None:
                    row_types[c] = t
        return new_event(
            dialect=self.name,
            source="cockroachdb",
            database=database,
            schema=schema,
            table=table,
            operation=op,
            timestamp=timestamp,
            sequence=seq,
            position=position,
            key=key,
            before=typed_before,
            after=typed_after,
            partial=partial,
            metadata=metadata,
            types=row_types,
        )

    def _order(
        self,
        hlc: Any,
        hlc_source: str | None,
        ctx: _Ctx,
        metadata: dict[str, Any],
        commit_ns: int | None,
        mvcc: Any,
    ) -> tuple[str, dict[str, Any], dt.datetime | None]:
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
            metadata["sequence_source"] = hlc_source or "updated"
            instant = _wall_time(commit_ns if commit_ns is not None else wall)
            return sequence.encode((wall, logical)), position, instant
        metadata["sequence_source"] = "delivery"
        msg = ctx.msg
        offset = msg.offset if msg.index is None else msg.index
        ts = _wall_time(commit_ns) if commit_ns is not None else None
        return sequence.delivery_sequence(msg.origin or "", offset, ctx.item), position, ts

    def _types(self, table: str, schema: str | None, ctx: _Ctx) -> dict[str, str]:
        types: dict[str, str] = dict(ctx.avro_types or {})
        declared = self.options.types_for(table, schema)
        for col, native in declared.items():
            try:
                types[col] = cockroachdb_type(native)
            except ValueTypeError as e:
                raise self.fail("BAD_TYPE", f"declared type of {table}.{col}: {e}") from None
        return types

    def _image(self, row: Mapping[str, Any], types: Mapping[str, str], ctx: _Ctx) -> dict[str, Any]:
        return {str(c): self._value(str(c), _unwrap(v), types, ctx) for c, v in row.items()}

    def _value(self, col: str, value: Any, types: Mapping[str, str], ctx: _Ctx) -> Any:
        if value is None:
            return None
        if isinstance(value, dict) and value.get(_JSON_NULL) is True and len(value) == 1:
            return "null"
        if col in ctx.bit_columns and isinstance(value, list):
            try:
                return bits_from_avro(value)
            except (ValueError, TypeError) as e:
                raise self.fail("BAD_VALUE", f"column {col!r} (BIT): {e}") from None
        t = types.get(col)
        if t is None:
            if isinstance(value, dict | list):
                return _json_text(value)
            if isinstance(value, float):
                return Decimal(repr(value))
            return value
        try:
            if t == "binary" and isinstance(value, str) and value.startswith("\\x"):
                return bytes.fromhex(value[2:])
            if t == "json":
                return value if isinstance(value, str) else _json_text(value)
            if t.startswith("decimal") and isinstance(value, bytes):
                return convert(value.decode(), t)
            return convert(value, t)
        except (ValueTypeError, ValueError) as e:
            raise self.fail("BAD_VALUE", f"column {col!r} ({t}): {e}") from None


# ---------------------------------------------------------------------- helpers


@dataclass
class _Console:
    key: Any
    value: Any


@dataclass
class _Many:
    docs: list[Any]


def _record(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A transport record's fields (lower-cased names), or None when ``doc`` is not one."""
    lower = {str(k).lower(): v for k, v in doc.items()}
    if len(lower) != len(doc) or not set(lower) <= RECORD_FIELDS:
        return None
    if "value" not in lower and "value_base64" not in lower:
        return None
    if not ({"topic", "key", "partition", "offset", "table", "key_base64"} & set(lower)):
        return None
    return lower


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


def _is_changefeed_schema(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    names = {f.get("name") for f in schema.get("fields", []) if isinstance(f, dict)}
    if "payload" in names or "specversion" in names or "Body" in names:
        return False
    return bool(names & {"after", "before", "resolved", "__crdb__", "updated"})


def avro_schema_types(schema: Any) -> tuple[dict[str, str], frozenset[str]]:
    """Column types (and BIT columns) of a changefeed Avro schema: the row record under
    ``after``/``before`` (wrapped), or the top-level record (bare/row)."""
    types: dict[str, str] = {}
    bits: set[str] = set()
    if not isinstance(schema, dict):
        return types, frozenset()
    fields = schema.get("fields", [])
    row_fields: list[Any] = []
    for f in fields:
        if not isinstance(f, dict):
            continue
        if f.get("name") in ("after", "before"):
            t = f.get("type")
            options = t if isinstance(t, list) else [t]
            for o in options:
                if isinstance(o, dict) and o.get("type") == "record":
                    row_fields.extend(o.get("fields", []))
    if not row_fields:
        row_fields = [
            f
            for f in fields
            if isinstance(f, dict)
            and f.get("name") not in ("__crdb__", "updated", "resolved", "mvcc_timestamp")
        ]
    for f in row_fields:
        if not isinstance(f, dict) or f.get("name") in types:
            continue
        name = str(f.get("name"))
        if _BIT_DOC.search(str(f.get("doc", ""))):
            bits.add(name)
            types[name] = "string"
            continue
        types[name] = _avro_type(f.get("type"))
    return types, frozenset(bits)


def _avro_type(t: Any) -> str:
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        if len(non_null) == 1:
            return _avro_type(non_null[0])
        decimals = [
            x for x in non_null if isinstance(x, dict) and x.get("logicalType") == "decimal"
        ]
        if decimals:
            return _avro_type(decimals[0])
        return "string" if "string" in non_null else "json"
    if isinstance(t, str):
        return {
            "boolean": "boolean",
            "int": "int",
            "long": "bigint",
            "float": "float",
            "double": "double",
            "bytes": "binary",
            "string": "string",
        }.get(t, "string")
    if not isinstance(t, dict):
        return "string"
    logical = t.get("logicalType")
    if logical == "decimal":
        return decimal_type(int(t.get("precision", 38)), int(t.get("scale", 0)))
    if logical in ("timestamp-millis", "timestamp-micros", "timestamp-nanos"):
        return "timestamp"
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return "timestamp_ntz"
    if logical == "date":
        return "date"
    if logical in ("time-millis", "time-micros"):
        return "time"
    if logical == "uuid":
        return "uuid"
    base = t.get("type")
    if base in ("array", "map", "record"):
        return "json"
    if base == "enum":
        return "string"
    if isinstance(base, str | list | dict):
        return _avro_type(base)
    return "string"


def enriched_schema_types(schema: Mapping[str, Any]) -> dict[str, str]:
    """Column types from an enriched message's Kafka-Connect-style ``schema`` section."""
    out: dict[str, str] = {}
    for f in schema.get("fields", []):
        if not isinstance(f, dict) or f.get("field") not in ("after", "before", "key"):
            continue
        for col in f.get("fields", []):
            if isinstance(col, dict) and isinstance(col.get("field"), str):
                out.setdefault(col["field"], _connect_type(col))
    return out


def _connect_type(col: Mapping[str, Any]) -> str:
    name = str(col.get("name", "")).lower()
    typ = str(col.get("type", "")).lower()
    if name == "decimal":
        params = col.get("parameters") or {}
        try:
            return decimal_type(int(params.get("precision", 38)), int(params.get("scale", 18)))
        except (TypeError, ValueError):
            return "decimal(38,18)"
    named = {
        "timestamp": "timestamp_ntz",
        "timestamptz": "timestamp",
        "date": "date",
        "time": "time",
        "uuid": "uuid",
        "json": "json",
        "jsonb": "json",
    }
    if name in named:
        return named[name]
    return {
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
    }.get(typ, "string")


def _infer(value: Any) -> str | None:
    """A JSON value's canonical type: fractions are decimals sized from the literal."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint" if -(1 << 63) <= value < (1 << 63) else "decimal(38,0)"
    if isinstance(value, Decimal):
        return decimal_literal_type(value)
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "binary"
    return "json"


def decimal_literal_type(value: Decimal) -> str:
    """``decimal(p,s)`` for a number written with a fraction: ``s`` its fractional digits,
    ``p`` = ``s`` + at least 20 integer digits (so an integer column's values and other
    magnitudes of the same scale fit one column type)."""
    _, digits, exp = value.as_tuple()
    if not isinstance(exp, int):
        return "decimal(38,18)"
    scale = max(0, -exp)
    int_digits = max(0, len(digits) + exp)
    return decimal_type(scale + max(int_digits, 20), scale)


def _json_text(value: Any) -> str:
    return orjson.dumps(_json_nulls(value), default=json_default).decode()


def _json_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_JSON_NULL) is True and len(value) == 1:
            return None
        return {k: _json_nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_nulls(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """A fastavro-decoded value with JSON-friendly containers (tuples from named unions
    unwrapped)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _plain(value[1])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _wall_time(wall_ns: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=wall_ns // 1000)


def _b64(text: str, what: str, d: Dialect) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise d.fail("BAD_DATA", f"record's {what} is not base64") from None


def _short(value: Any) -> str:
    text = orjson.dumps(value, default=json_default).decode() if value is not None else "none"
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, int | float | Decimal) else type(v).__name__
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
