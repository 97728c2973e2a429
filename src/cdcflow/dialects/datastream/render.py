"""Renderer: logical changes → Google Cloud Datastream events (JSON lines and Avro
object-container files in Cloud Storage's folder layout).

Each table is read from one source (given in ``workload.extra["datastream_sources"]``, else
assigned: MySQL and Spanner each to a table they fit, so every workload of two or more tables
shows both, the other tables drawn from the workload's seed among the sources whose types fit):

* MySQL (binlog file/position; updates as ``UPDATE-INSERT``; key changes and — with faults —
  some same-key updates as ``UPDATE-DELETE`` + ``UPDATE-INSERT`` pairs),
* Oracle (SCN, RS_ID, SSN; key changes, and with faults some updates, as pairs),
* PostgreSQL (LSN) and SQL Server (LSN): a key change is a ``DELETE`` and an ``INSERT``,
* Cloud Spanner (commit timestamp, record sequence, mod index; ``NEW_VALUES`` capture: updates
  carry the key and the changed columns only, a partial event; deletes carry the key; a key
  change is a delete and an insert, as Spanner keys cannot change),
* MongoDB (``database``/``collection``, change types ``CREATE``/``UPDATE``/``DELETE``; updates
  carry the full post-image, as a change stream with post-images does; deletes carry only the
  key, like a change stream's ``documentKey``; ``_id`` cannot change, so a key change is a
  ``DELETE`` and a ``CREATE``; no ``primary_keys``: the key comes from the configuration,
  :func:`decode_options`),
* Salesforce (``domain``/``object_name``, ``primary_keys``; full records; a key change is a
  ``DELETE`` and an ``INSERT``, as record Ids cannot change).

MongoDB and Salesforce have no native position: the decoder orders their events by
``sort_keys``, rendered so that they follow commit order — MongoDB ``[ms, cluster time,
ordinal]``, Salesforce ``[ms, record Id, replay id]`` (the commit time in milliseconds grows
with the commit order of the workload; the last element orders the changes of one commit and
the two halves of a key change); backfill rows have the same shape (``[ms, 0, n]``,
``[ms, Id, n]``). Their type tables (:mod:`.sources`) leave out what the source cannot hold
exactly: BSON dates and Salesforce date-times keep milliseconds (the workload's timestamps
have microseconds), BSON has no date-only type and neither source a time-zone-less timestamp.
The decoder has no type table for either source, so :func:`decode_options` declares their
columns' canonical types.

Values in JSON files are as the source writes them (MySQL booleans as 0/1 and binary as hex
text, other sources' binary as base64, decimals as JSON numbers, timestamps as ISO text,
MongoDB JSON columns as embedded documents); JSON files carry no types, so
:func:`decode_options` gives the decoder each table's column types. Avro files (with faults,
some files) are Datastream's envelope record — ``uuid``, ``read_timestamp`` and
``source_timestamp`` (``timestamp-millis``), ``object``, ``read_method``, ``stream_name``,
``schema_key``, ``sort_keys`` (array of string|long), ``source_metadata`` (a record of the
source's fields) and ``payload`` (a record of nullable columns typed by :func:`avro_type`, which
the decoder maps back to the workload's canonical types). An Avro file has one writer schema, so
events are grouped by table and by the columns they carry (added columns, Spanner's partial
updates and MongoDB's key-only deletes change it), as Datastream starts a new file when the
schema changes.

Files land as ``{object}/{yyyy}/{mm}/{dd}/{hh}/{minute}/{name}.jsonl`` (or ``.avro``) under the
landing directory, written under a temporary ``_`` name and renamed.

What Datastream cannot express is left out of the workloads it renders (:data:`FEATURES`): no
``TRUNCATE`` and no DDL events (an added column simply appears in later rows). A key change is
two events (an update pair, or a delete and an insert); :func:`event_operations` tells the
contract suite which canonical operations each change becomes.

Delivery faults: duplicates, reordering across files, a redelivered file, JSON array files,
Avro files, some same-key updates as update pairs, and backfill rows (``*-backfill`` read
methods, the table's state at a cut point of the rendered transactions) interleaved with the
stream.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import random
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.datastream.sources import (
    CANONICAL_DECLARED,
    NATIVE_TYPES,
    PAIR_SOURCES,
    READ_METHODS,
    json_value,
    object_name,
    source_names,
    table_source,
)
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import (
    RenderJob,
    RenderResult,
    mssql_lsn,
    pg_lsn,
)
from cdcflow.simulation import oracle
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Change, Workload
from cdcflow.types import parse_decimal_type

#: Workload features the format can express (a key change is two events: see
#: :func:`event_operations`).
FEATURES = frozenset(
    {"insert", "update", "delete", "reinsert", "pk_change", "partial", "add_column"}
)
#: Change kinds that become events (an added column shows in later rows, not as an event).
EVENT_KINDS = frozenset({"insert", "update", "delete"})

_STREAM = "projects/cdcflow/locations/local/streams/workload"
_UUIDS = uuid.UUID("6ba7b812-9dad-11d1-80b4-00c04fd430c8")
#: Share of files written as Avro when rendering with faults.
AVRO_SHARE = 0.35

#: Canonical type → Avro type (decimals: see :func:`avro_type`).
AVRO_TYPES: dict[str, Any] = {
    "bigint": "long",
    "int": "int",
    "string": "string",
    "boolean": "boolean",
    "double": "double",
    "float": "float",
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
    "date": {"type": "int", "logicalType": "date"},
    "json": {"type": "string", "logicalType": "json"},
    "binary": "bytes",
}


def avro_type(canonical: str) -> Any:
    """The Avro type Datastream's Avro output uses for a canonical column type."""
    dec = parse_decimal_type(canonical)
    if dec is not None:
        return {"type": "bytes", "logicalType": "decimal", "precision": dec[0], "scale": dec[1]}
    if canonical not in AVRO_TYPES:
        raise ValueError(f"no Avro type for {canonical!r}")
    return AVRO_TYPES[canonical]


def _key_changed(ch: Change, workload: Workload) -> bool:
    """Whether an update changes the row's key."""
    if ch.kind != "update" or ch.before is None:
        return False
    return any(ch.before.get(k) != (ch.after or {}).get(k) for k in workload.tables[ch.table].key)


def event_operations(change: Change, workload: Workload) -> list[str]:
    """Canonical operations a change becomes when rendered without faults, in order: a key
    change is two events (``UPDATE-DELETE`` → ``DELETE`` and ``UPDATE-INSERT`` → ``UPDATE``
    for MySQL and Oracle, a delete and an insert elsewhere); truncates and added columns are
    no events."""
    if change.kind not in EVENT_KINDS:
        return []
    if _key_changed(change, workload):
        source = table_source(workload, change.table)
        return ["DELETE", "UPDATE" if source in PAIR_SOURCES else "INSERT"]
    return [{"insert": "INSERT", "update": "UPDATE", "delete": "DELETE"}[change.kind]]


def _ms(ts: dt.datetime) -> int:
    return int(ts.timestamp() * 1000)


def _iso(ts: dt.datetime) -> str:
    return ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _record_id(table: str, image: Mapping[str, Any], keys: list[str]) -> str:
    """A Salesforce-like 18-character record Id for a row's key."""
    digest = hashlib.sha1(repr((table, [image.get(k) for k in keys])).encode()).hexdigest()
    return "a01" + digest[:15]


@dataclass(frozen=True)
class Rendered:
    """One Datastream event of a workload table; ``doc["payload"]`` holds typed values (they
    are written as JSON or Avro values when the file is written)."""

    table: str
    source: str
    doc: dict[str, Any]


class _Renderer:
    def __init__(self, workload: Workload) -> None:
        self.w = workload

    def envelope(
        self,
        table: str,
        ident: str,
        read_method: str,
        ts: dt.datetime,
        sort_keys: list[Any],
        meta: dict[str, Any],
        payload: dict[str, Any],
    ) -> Rendered:
        source = table_source(self.w, table)
        database, schema, name = source_names(self.w, table)
        return Rendered(
            table,
            source,
            {
                "uuid": str(uuid.uuid5(_UUIDS, f"{self.w.seed}:{ident}")),
                "read_timestamp": _iso(ts + dt.timedelta(seconds=1)),
                "source_timestamp": _iso(ts),
                "object": object_name(source, database, schema, name),
                "read_method": read_method,
                "stream_name": _STREAM,
                "schema_key": uuid.uuid5(_UUIDS, f"{table}:{','.join(payload)}").hex,
                "sort_keys": sort_keys,
                "source_metadata": meta,
                "payload": payload,
            },
        )

    def row(
        self, table: str, image: Mapping[str, Any], cols: list[str] | None = None
    ) -> dict[str, Any]:
        names = cols if cols is not None else list(image)
        return {c: image.get(c) for c in names}

    def change(self, ch: Change, *, pair: bool) -> list[Rendered]:
        """One change as Datastream events (two for an update pair or a key change)."""
        source = table_source(self.w, ch.table)
        database, schema, name = source_names(self.w, ch.table)
        key_change = _key_changed(ch, self.w)
        if ch.kind == "update" and (key_change or (pair and source in PAIR_SOURCES)):
            if source in PAIR_SOURCES:
                types = ("UPDATE-DELETE", "UPDATE-INSERT")
            else:  # no update pairs: a key change is a delete and an insert
                types = ("DELETE", "CREATE" if source == "mongodb" else "INSERT")
            assert ch.before is not None and ch.after is not None
            return [
                self._event(ch, source, database, schema, name, types[0], ch.before, 0),
                self._event(ch, source, database, schema, name, types[1], ch.after, 1),
            ]
        if ch.kind == "insert":
            assert ch.after is not None
            kind = "CREATE" if source == "mongodb" else "INSERT"
            return [self._event(ch, source, database, schema, name, kind, ch.after, 0)]
        if ch.kind == "delete":
            assert ch.before is not None
            return [self._event(ch, source, database, schema, name, "DELETE", ch.before, 0)]
        assert ch.after is not None
        kind = "UPDATE-INSERT" if source == "mysql" else "UPDATE"
        return [self._event(ch, source, database, schema, name, kind, ch.after, 0)]

    def _event(
        self,
        ch: Change,
        source: str,
        database: str | None,
        schema: str | None,
        name: str,
        change_type: str,
        image: Mapping[str, Any],
        half: int,
    ) -> Rendered:
        d = self.w.tables[ch.table]
        keys = list(d.key)
        cols: list[str] | None = None
        meta: dict[str, Any]
        ts = ch.commit_time
        ident = f"{ch.txid}:{ch.seq}:{half}"
        deleted = change_type in ("DELETE",) or (
            change_type == "UPDATE-DELETE" and source == "mysql"
        )
        if source == "mysql":
            file = f"mysql-bin.{1 + ch.lsn // 100_000:06d}"
            pos = (ch.lsn % 100_000) * 1000 + ch.seq * 10
            meta = {"table": name, "database": database, "primary_keys": keys}
            meta.update(log_file=file, log_position=pos, change_type=change_type)
            sort_keys: list[Any] = [_ms(ts), file, pos]
        elif source == "oracle":
            rs_id = f" 0x{ch.lsn >> 12:06x}.{ch.lsn & 0xFFF:08x}.{ch.seq * 16:04x} "
            meta = {"schema": schema, "table": name, "database": database, "row_id": "AAAE5X"}
            meta.update(scn=ch.lsn, rs_id=rs_id, ssn=0, change_type=change_type)
            meta.update(tx_id=base64.b64encode(ch.txid.encode()).decode(), primary_keys=keys)
            sort_keys = [_ms(ts), ch.lsn, rs_id, 0]
        elif source == "postgres":
            lsn = pg_lsn(ch.lsn * 64 + ch.seq)
            meta = {"schema": schema, "table": name, "change_type": change_type}
            meta.update(tx_id=ch.lsn, lsn=lsn, primary_keys=keys)
            sort_keys = [_ms(ts), lsn]
        elif source == "sqlserver":
            lsn = mssql_lsn((ch.lsn << 16) | ch.seq)
            meta = {"schema": schema, "table": name, "database": database}
            meta.update(change_type=change_type, tx_id=ch.txid, lsn=lsn, primary_keys=keys)
            sort_keys = [_ms(ts), lsn]
        elif source == "mongodb":
            # [ms, cluster time, ordinal]: commit order, then the changes of one commit
            meta = {"database": database, "collection": name, "change_type": change_type}
            sort_keys = [_ms(ts), ch.lsn, ch.seq * 2 + half]
            if change_type == "DELETE":
                cols = keys  # a change stream's documentKey
        elif source == "salesforce":
            replay = (ch.lsn << 16) | (ch.seq << 1) | half
            meta = {"object_name": name, "domain": database, "change_type": change_type}
            meta["primary_keys"] = keys
            sort_keys = [_ms(ts), _record_id(ch.table, image, keys), replay]
        else:
            commit = ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
            meta = {"table": name, "database_id": database, "commit_timestamp": commit}
            meta.update(record_sequence=f"{ch.seq:08d}", mod_index=half, mod_type=change_type)
            meta.update(server_transaction_id=ch.txid, value_capture_type="NEW_VALUES")
            meta.update(primary_keys=keys, number_of_records_in_transaction=1)
            sort_keys = [commit, f"{ch.seq:08d}", half]
            if change_type == "UPDATE":
                changed = ch.changed or {
                    c for c in d.columns if (ch.before or {}).get(c) != image.get(c)
                }
                cols = [c for c in d.columns if c in image and (c in keys or c in changed)]
                if len(cols) == len(keys):  # nothing changed: Spanner still sends the row
                    cols = list(image)
            elif change_type == "DELETE":
                cols = keys
        meta["is_deleted"] = deleted
        return self.envelope(
            ch.table,
            ident,
            READ_METHODS[source][0],
            ts,
            sort_keys,
            meta,
            self.row(ch.table, image, cols),
        )

    def backfill(self, table: str, row: Mapping[str, Any], ts: dt.datetime, n: int) -> Rendered:
        """One backfill read of a row (the table's state at ``ts``)."""
        d = self.w.tables[table]
        source = table_source(self.w, table)
        database, schema, name = source_names(self.w, table)
        keys = list(d.key)
        meta: dict[str, Any] = {"table": name, "primary_keys": keys, "change_type": "INSERT"}
        if source == "mysql":
            meta.update(database=database, log_file="", log_position=0)
            sort_keys: list[Any] = [_ms(ts), "", 0]
        elif source == "oracle":
            meta.update(schema=schema, database=database, scn=0, rs_id="", ssn=0, tx_id=None)
            sort_keys = [_ms(ts), n, "", 0]
        elif source == "spanner":
            meta.pop("change_type")
            meta.update(database_id=database, snapshot=True, mod_type="INSERT")
            sort_keys = [_ms(ts), n]
        elif source == "mongodb":
            meta = {"database": database, "collection": name, "change_type": "CREATE"}
            sort_keys = [_ms(ts), 0, n]
        elif source == "salesforce":
            meta = {"object_name": name, "domain": database, "change_type": "INSERT"}
            meta["primary_keys"] = keys
            sort_keys = [_ms(ts), _record_id(table, row, keys), n]
        else:
            meta.update(schema=schema, database=database)
            sort_keys = [_ms(ts), n]
        meta["is_deleted"] = False
        key = ",".join(str(row.get(k)) for k in keys)
        return self.envelope(
            table,
            f"backfill:{_ms(ts)}:{table}:{key}",
            READ_METHODS[source][1],
            ts,
            sort_keys,
            meta,
            self.row(table, row, list(d.columns)),
        )


def decode_options(workload: Workload) -> DialectOptions:
    """What the decoder needs: JSON files carry no types, so each table's column types (keyed
    ``schema.table``, or ``database.table`` for MySQL, Spanner and MongoDB, ``domain.object``
    for Salesforce): native names, canonical ones for sources the decoder has no type table
    for. Keys travel in ``primary_keys``, except MongoDB's, given here."""
    types: dict[str, dict[str, str]] = {}
    keys: dict[str, tuple[str, ...]] = {}
    for table, d in workload.tables.items():
        source = table_source(workload, table)
        database, schema, name = source_names(workload, table)
        native = NATIVE_TYPES[source]
        where = f"{schema or database}.{name}"
        types[where] = {
            c: t if source in CANONICAL_DECLARED else native[t] for c, t in d.columns.items()
        }
        if source == "mongodb":
            keys[where] = d.key
    return DialectOptions(table_keys=keys, column_types=types)


# ---------------------------------------------------------------------- files


def json_doc(workload: Workload, event: Rendered) -> dict[str, Any]:
    """An event as Datastream's JSON output writes it."""
    columns = workload.tables[event.table].columns
    payload: dict[str, Any] = {}
    for c, v in event.doc["payload"].items():
        if event.source == "mongodb" and columns.get(c) == "json" and isinstance(v, str):
            payload[c] = orjson.Fragment(v)  # an embedded document
        else:
            payload[c] = json_value(v, event.source)
    return {**event.doc, "payload": payload}


def _meta_kind(value: Any) -> Any:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return {"type": "array", "items": "string"}
    return None


def avro_schema(workload: Workload, events: list[Rendered]) -> dict[str, Any]:
    """The writer schema of an Avro file of one table's events that carry the same columns:
    Datastream's envelope, ``source_metadata`` as a record of the fields the events carry,
    ``payload`` as a record of nullable columns."""
    first = events[0]
    columns = workload.tables[first.table].columns
    kinds: dict[str, list[Any]] = {}
    for e in events:
        for k, v in e.doc["source_metadata"].items():
            seen = kinds.setdefault(k, [])
            kind = _meta_kind(v)
            if kind is not None and kind not in seen:
                seen.append(kind)
    millis = {"type": "long", "logicalType": "timestamp-millis"}
    return {
        "type": "record",
        "name": re.sub(r"\W", "_", str(first.doc["object"])),
        "fields": [
            {"name": "uuid", "type": "string"},
            {"name": "read_timestamp", "type": millis},
            {"name": "source_timestamp", "type": millis},
            {"name": "object", "type": "string"},
            {"name": "read_method", "type": "string"},
            {"name": "stream_name", "type": "string"},
            {"name": "schema_key", "type": "string"},
            {"name": "sort_keys", "type": {"type": "array", "items": ["string", "long"]}},
            {
                "name": "source_metadata",
                "type": {
                    "type": "record",
                    "name": "source_metadata",
                    "fields": [
                        {"name": k, "type": ["null", *(seen or ["string"])], "default": None}
                        for k, seen in kinds.items()
                    ],
                },
            },
            {
                "name": "payload",
                "type": {
                    "type": "record",
                    "name": "payload",
                    "fields": [
                        {"name": c, "type": ["null", avro_type(columns[c])], "default": None}
                        for c in first.doc["payload"]
                    ],
                },
            },
        ],
    }


def _instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def avro_file(workload: Workload, events: list[Rendered], *, codec: str = "null") -> bytes:
    """An Avro object-container file of one table's events that carry the same columns."""
    import fastavro

    schema = fastavro.parse_schema(avro_schema(workload, events))
    records = []
    for e in events:
        rec = dict(e.doc)
        rec["read_timestamp"] = _instant(rec["read_timestamp"])
        rec["source_timestamp"] = _instant(rec["source_timestamp"])
        records.append(rec)
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=codec)
    return buf.getvalue()


def _folder(landing: Path, doc: Mapping[str, Any]) -> Path:
    ts = _instant(str(doc["source_timestamp"]))
    return landing / str(doc["object"]) / ts.strftime("%Y/%m/%d/%H/%M")


def _by_columns(events: list[Rendered]) -> list[list[Rendered]]:
    """Events grouped by the columns they carry (one Avro writer schema each), in order of
    first appearance."""
    groups: dict[tuple[str, ...], list[Rendered]] = {}
    for e in events:
        groups.setdefault(tuple(e.doc["payload"]), []).append(e)
    return list(groups.values())


def render(job: RenderJob) -> RenderResult:
    """The registry's renderer: Datastream JSON files in the Cloud Storage layout, with delivery
    faults (duplicates, reordering across files, update pairs, backfill rows, a redelivered
    file, JSON array files, Avro files) when ``faults``."""
    rng = random.Random(job.seed)
    r = _Renderer(job.workload)
    window = job.workload.transactions[job.transactions or slice(None)]
    events: list[Rendered] = []
    for tx in window:
        for ch in tx.changes:
            if ch.kind in EVENT_KINDS:
                events.extend(r.change(ch, pair=job.faults and rng.random() < 0.4))
    if job.faults and window:
        # a backfill read at a cut point of this window: the state after its job.transactions
        start = job.workload.transactions.index(window[0])
        cut = start + rng.randrange(len(window) + 1)
        state = oracle.apply(list(job.workload.changes(slice(0, cut))), job.workload.tables)
        at = job.workload.transactions[max(cut - 1, 0)].commit_time + dt.timedelta(milliseconds=500)
        for table, rows in sorted(state.items()):
            for n, row in enumerate(oracle.rows(rows)):
                if rng.random() < 0.6:
                    events.append(r.backfill(table, row, at, n))
        events = events + [e for e in events if rng.random() < 0.15]
        rng.shuffle(events)
    groups: dict[Path, list[Rendered]] = {}
    for e in events:
        groups.setdefault(_folder(job.landing, e.doc), []).append(e)
    written: list[Path] = []
    contents: list[tuple[Path, bytes]] = []
    for i, (folder, chunk) in enumerate(sorted(groups.items())):
        parts = 2 if job.faults and len(chunk) > 1 else 1
        for j in range(parts):
            part = chunk[j::parts]
            method = str(part[0].doc["read_method"])
            if job.faults and rng.random() < AVRO_SHARE:
                for k, same in enumerate(_by_columns(part)):
                    key = str(same[0].doc["schema_key"])[:16]
                    codec = rng.choice(("null", "deflate"))
                    data = avro_file(job.workload, same, codec=codec)
                    path = land(folder / f"{key}_{method}_{job.seed}_{i}_{j}_{k}.avro", data)
                    written.append(path)
                    contents.append((path, data))
                continue
            name = f"{part[0].doc['schema_key'][:16]}_{method}_{job.seed}_{i}_{j}"
            docs = [json_doc(job.workload, e) for e in part]
            if job.faults and rng.random() < 0.2:
                data = orjson.dumps(docs)  # one JSON array
            else:
                data = b"\n".join(orjson.dumps(d) for d in docs) + b"\n"
            path = land(folder / f"{name}.jsonl", data)
            written.append(path)
            contents.append((path, data))
    if job.faults and contents:
        path, data = rng.choice(contents)
        written.append(land(path.with_name(f"{path.stem}_redelivered{path.suffix}"), data))
    return RenderResult(files=written, options=decode_options(job.workload), messages=len(events))
