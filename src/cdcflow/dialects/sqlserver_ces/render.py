"""Renderer: logical changes → SQL Server change event streaming CloudEvents (JSON).

Every value is written as text the way SQL Server prints it (``bit`` as ``1``/``0``,
``datetime2`` without a zone, ``datetimeoffset`` with ``+00:00``, ``varbinary`` as ``0x…``);
``cols`` carries the SQL Server types, ``pkkey`` the key, ``old`` the full previous row (the
table is streamed with old values). Partial updates are rendered as a table streamed with
``include_all_columns = 0``: ``cols``/``old``/``current`` hold the key and the changed columns,
and the decoder is told so (``partial_updates``).

What CES cannot express is left out of the workloads it renders (:data:`FEATURES`): no
``TRUNCATE`` and no DDL events.

Delivery faults: updates without old values (``old: "{}"``, where the key did not change),
duplicates, a redelivered file, reordering across files, events split into
segments (the ``data`` payload cut into pieces, segments scattered over files, numbered from 0
or from 1, ``finalsegment`` or the preview's ``splittotalcnt``), the preview shape
(``splitindex``/``splittotalcnt``, no ``transaction`` block: order from ``logicalid``), JSON
array files (a CloudEvents batch), Avro files of CloudEvent records (``data`` as Avro binary of
the spec's Data record), Event Hubs Capture Avro files (JSON CloudEvents in ``Body``, some in
binary content mode with ``ce_`` properties), and Kafka records written as JSON lines
(structured, binary content mode with ``ce_`` headers, or a schemaless Avro value).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import random
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import (
    MSSQL_TYPES,
    RenderJob,
    RenderResult,
    mssql_lsn,
    timestamp_text,
)
from cdcflow.dialects.sqlserver_ces.cloudevent import CLOUDEVENT_AVRO_SCHEMA, DATA_AVRO_SCHEMA
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Change, Workload
from cdcflow.transports.eventhubs import CAPTURE_SCHEMA

#: Workload features the format can express.
FEATURES = frozenset({"insert", "update", "delete", "reinsert", "pk_change", "partial"})
#: Change kinds that become events.
EVENT_KINDS = frozenset({"insert", "update", "delete"})

_OPS = {"insert": "INS", "update": "UPD", "delete": "DEL"}

#: Event Hubs Capture's record.
#: The Event Hubs Capture record schema (the transport's).
CAPTURE_AVRO_SCHEMA = CAPTURE_SCHEMA


def avro_data(data: str) -> bytes | None:
    """``data`` (JSON text) as Avro binary of the spec's Data record (Avro serialization), or
    ``None`` when it does not fit the record (a preview event without ``transaction``)."""
    import fastavro

    doc = orjson.loads(data)
    source = doc.get("eventsource", {})
    if "transaction" not in source:
        return None
    record = {
        "eventsource": {
            **source,
            "pkkey": [{**k, "value": str(k["value"])} for k in source.get("pkkey", [])],
        },
        "eventrow": doc.get("eventrow", doc.get("eventdata")),
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(DATA_AVRO_SCHEMA), record)
    return buf.getvalue()


def avro_record(e: dict[str, Any], *, binary_data: bool = False) -> dict[str, Any]:
    """A CES CloudEvent as the spec's Avro record; ``binary_data`` writes ``data`` as Avro
    binary of the Data record (whole events only), else as JSON bytes."""
    data = e["data"]
    # a segment of a split event carries a piece of the text: only whole events are re-encoded
    piece = e.get("finalsegment") is False or e.get("segmentindex") not in (0, None)
    body = avro_data(data) if binary_data and "segmentindex" in e and not piece else None
    return {
        **{f["name"]: str(e.get(f["name"], "")) for f in CLOUDEVENT_AVRO_SCHEMA["fields"]},
        "datacontenttype": e.get("datacontenttype", "application/json"),
        "segmentindex": e.get("segmentindex", 0),
        "finalsegment": e.get("finalsegment", True),
        "data": body if body is not None else data.encode(),
    }


def avro_cloudevents(events: list[dict[str, Any]], *, binary_data: bool = False) -> bytes:
    """An Avro object-container file of CES CloudEvent records (GA shape only)."""
    import fastavro

    records = [avro_record(e, binary_data=binary_data) for e in events]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(CLOUDEVENT_AVRO_SCHEMA), records)
    return buf.getvalue()


def schemaless_cloudevent(e: dict[str, Any], *, binary_data: bool = True) -> bytes:
    """One CES CloudEvent as a schemaless Avro message (as on the wire under Avro
    serialization)."""
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf, fastavro.parse_schema(CLOUDEVENT_AVRO_SCHEMA), avro_record(e, binary_data=binary_data)
    )
    return buf.getvalue()


def kafka_record(e: dict[str, Any], offset: int, *, binary_mode: bool) -> dict[str, Any]:
    """A CES CloudEvent as a Kafka record written as JSON: structured (the CloudEvent is the
    value) or in binary content mode (``ce_`` headers, ``data`` as the value)."""
    record: dict[str, Any] = {"topic": "ces", "partition": 0, "offset": offset, "key": None}
    if binary_mode:
        record["headers"] = {
            f"ce_{k}": v if isinstance(v, str) else orjson.dumps(v).decode()
            for k, v in e.items()
            if k != "data"
        }
        record["value"] = e["data"]
    else:
        record["headers"] = {"content-type": "application/cloudevents+json"}
        record["value"] = orjson.dumps(e).decode()
    return record


def capture_file(events: list[dict[str, Any]], *, binary_mode_every: int = 3) -> bytes:
    """An Event Hubs Capture Avro file carrying the events: structured JSON bodies, and every
    ``binary_mode_every``-th event in CloudEvents binary mode (``ce_`` properties)."""
    import fastavro

    records = []
    for i, e in enumerate(events):
        if binary_mode_every and i % binary_mode_every == binary_mode_every - 1:
            props: dict[str, Any] = {
                f"ce_{k}": str(v) if not isinstance(v, str) else v
                for k, v in e.items()
                if k != "data"
            }
            body = e["data"].encode()
        else:
            props = {}
            body = orjson.dumps(e)
        records.append(
            {
                "SequenceNumber": i,
                "Offset": str(i * 1024),
                "EnqueuedTimeUtc": "1/1/2026 12:00:00 AM",
                "SystemProperties": {"x-opt-sequence-number": i},
                "Properties": props,
                "Body": body,
            }
        )
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(CAPTURE_AVRO_SCHEMA), records)
    return buf.getvalue()


def text_value(value: Any) -> str | None:
    """A typed value as SQL Server change event streaming writes it (always text)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return timestamp_text(value, sep=" ", utc=" +00:00")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "0x" + value.hex().upper()
    return str(value)


def _image(row: Mapping[str, Any] | None, columns: list[str]) -> str:
    if row is None:
        return "{}"
    return orjson.dumps({c: text_value(row.get(c)) for c in columns}).decode()


def render_change(
    workload: Workload, ch: Change, *, preview: bool = False, old_values: bool = True
) -> dict[str, Any]:
    """One row change as a CES CloudEvent (GA shape, or the preview shape). Without
    ``old_values`` an update carries ``old: "{}"`` (a table streamed without old values) — only
    where that loses nothing, i.e. when the key did not change."""
    d = workload.tables[ch.table]
    all_cols = list(d.columns)
    if ch.kind == "update" and ch.changed:
        cols = [c for c in all_cols if c in d.key or c in ch.changed]
    else:
        cols = all_cols
    key_row = ch.after if ch.kind != "delete" else ch.before
    same_key = (
        ch.before is not None
        and ch.after is not None
        and all(ch.before.get(k) == ch.after.get(k) for k in d.key)
    )
    keep_old = old_values or ch.kind != "update" or not same_key
    assert key_row is not None
    source: dict[str, Any] = {
        "db": "cdcdemo",
        "schema": d.schema,
        "tbl": ch.table,
        "cols": [
            {"name": c, "type": MSSQL_TYPES[d.columns[c]], "index": all_cols.index(c)} for c in cols
        ],
        "pkkey": [{"columnname": k, "value": text_value(key_row[k])} for k in d.key],
    }
    logical_lsn = f"{ch.lsn:020X}"
    if not preview:
        source["transaction"] = {
            "commitlsn": mssql_lsn(ch.lsn),
            "beginlsn": mssql_lsn(max(0, ch.lsn - 1)),
            "sequencenumber": ch.seq,
            "committime": ch.commit_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "finalevent": False,
        }
    data = {
        "eventsource": source,
        "eventrow": {
            "old": _image(ch.before, cols) if ch.kind != "insert" and keep_old else "{}",
            "current": _image(ch.after, cols) if ch.kind != "delete" else "{}",
        },
    }
    event: dict[str, Any] = {
        "specversion": "1.0",
        "type": "com.microsoft.SQL.CES.DML.V1",
        "source": "/",
        "id": f"{ch.txid}-{ch.seq}",
        "logicalid": f"6f1c0b9e-0000-4000-8000-000000000001:{logical_lsn}:{ch.seq:020d}",
        "time": ch.commit_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "datacontenttype": "application/json",
        "operation": _OPS[ch.kind],
        "data": orjson.dumps(data).decode(),
    }
    if preview:
        event.update(splitindex=0, splittotalcnt=0)
    else:
        event.update(segmentindex=0, finalsegment=True)
    return event


def split_event(
    event: dict[str, Any], parts: int, *, one_based: bool = False
) -> list[dict[str, Any]]:
    """``event`` cut into ``parts`` segments, each carrying the next piece of ``data`` (the
    preview shape numbers them with ``splitindex``/``splittotalcnt``, the GA shape with
    ``segmentindex``/``finalsegment``)."""
    data: str = event["data"]
    size = max(1, -(-len(data) // parts))
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    base = 1 if one_based else 0
    out = []
    for i, piece in enumerate(pieces):
        seg = {**event, "data": piece}
        if "splitindex" in event:
            seg.update(splitindex=base + i, splittotalcnt=len(pieces))
        else:
            seg.update(segmentindex=base + i, finalsegment=i == len(pieces) - 1)
        out.append(seg)
    return out


def _kafka_line(d: dict[str, Any], n: int, rng: random.Random) -> dict[str, Any]:
    """A Kafka record for the landing zone: binary content mode, structured JSON, or (whole GA
    events) a schemaless Avro value."""
    whole = d.get("finalsegment") is True and d.get("segmentindex") == 0
    pick = rng.random()
    if whole and pick < 0.3:
        value = schemaless_cloudevent(d)
        return {
            "topic": "ces",
            "partition": 0,
            "offset": n,
            "headers": {"content-type": "avro/binary"},
            "value_base64": base64.b64encode(value).decode("ascii"),
        }
    return kafka_record(d, n, binary_mode=pick < 0.65)


def decode_options(workload: Workload) -> DialectOptions:
    """What the decoder needs: CES carries keys and types itself; partial updates are
    announced by configuration (a table streamed with ``include_all_columns = 0``)."""
    return DialectOptions(extra={"partial_updates": True})


def _write(landing: Path, data: bytes, seed: int, n: int, ext: str = "jsonl") -> Path:
    landing.mkdir(parents=True, exist_ok=True)
    existing = len([p for p in landing.iterdir() if not p.name.startswith(("_", "."))])
    name = f"{existing:06d}-{seed}-{n}.{ext}"
    return land(landing / name, data)


def render(job: RenderJob) -> RenderResult:
    """The registry's renderer: CES events as JSON lines (and JSON arrays) with delivery faults
    when ``faults``."""
    rng = random.Random(job.seed)
    docs = [
        render_change(
            job.workload,
            ch,
            preview=job.faults and rng.random() < 0.2,
            old_values=not (job.faults and rng.random() < 0.3),
        )
        for tx in job.workload.transactions[job.transactions or slice(None)]
        for ch in tx.changes
        if ch.kind in EVENT_KINDS
    ]
    files = 1
    if job.faults:
        docs = [
            seg
            for d in docs
            for seg in (
                split_event(d, rng.choice((2, 3)), one_based=rng.random() < 0.3)
                if rng.random() < 0.12
                else [d]
            )
        ]
        docs = docs + [d for d in docs if rng.random() < 0.15]
        rng.shuffle(docs)
        files = 5
    written: list[Path] = []
    contents: list[tuple[bytes, str]] = []
    for i in range(files):
        chunk = docs[i::files]
        if not chunk:
            continue
        ext = "jsonl"
        if job.faults and i == 1:
            data = orjson.dumps(chunk)  # a CloudEvents batch: one JSON array
        elif job.faults and i == 2:
            data, ext = capture_file(chunk), "avro"
        elif job.faults and i == 3 and not any("splitindex" in d for d in chunk):
            data, ext = avro_cloudevents(chunk, binary_data=True), "avro"
        elif job.faults and i == 4:
            data = (
                b"\n".join(orjson.dumps(_kafka_line(d, n, rng)) for n, d in enumerate(chunk))
                + b"\n"
            )
        else:
            data = b"\n".join(orjson.dumps(d) for d in chunk) + b"\n"
        contents.append((data, ext))
        written.append(_write(job.landing, data, job.seed, i, ext))
    if job.faults and contents:
        data, ext = rng.choice(contents)
        written.append(_write(job.landing, data, job.seed, files, ext))
    return RenderResult(files=written, options=decode_options(job.workload), messages=len(docs))
