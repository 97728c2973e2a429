"""Renderer: logical changes → Debezium PostgreSQL connector messages in a landing zone.

Messages are Kafka Connect JSON with their schema (``schemas.enable=true``; tables of plain
column types without, their types declared, and every other table of the rest without, its
encodings declared by semantic type, ``schemas.enable=false``), values in
Debezium's encodings (``Decimal`` as base64 bytes, ``MicroTimestamp``, ``ZonedTimestamp``,
``Date`` days, ``Json``), ``source.sequence`` as ``[last commit LSN, change LSN]`` text (the
commit LSN of the transaction before; null for a new connector's first streamed transaction),
transaction ids ``<xid>:<LSN>`` whose LSN differs between ``BEGIN``, each event and ``END``,
snapshot reads marked ``first``…``last``, as the real connector writes them (the messages
captured from it are ``tests/data/debezium/postgresql``). A key change is a delete, a
tombstone and a create, as the connector writes it. Delivery faults:
at-least-once redelivery after a connector restart (a run of messages sent again), an initial
snapshot overlapping the stream, transaction metadata (``BEGIN``/``END``), Kafka tombstones,
unchanged-TOAST markers in partial updates, reordering across files and Kafka records.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import RenderJob, RenderResult
from cdcflow.simulation import oracle
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Change, Workload

#: Workload features the connector expresses (an added column shows in later rows' schema).
FEATURES = frozenset(
    {"insert", "update", "delete", "reinsert", "pk_change", "partial", "truncate", "add_column"}
)
#: Change kinds that become events.
EVENT_KINDS = frozenset({"insert", "update", "delete", "truncate"})
#: Canonical type → Connect (type, semantic name).
CONNECT: dict[str, tuple[str, str | None]] = {
    "bigint": ("int64", None),
    "int": ("int32", None),
    "string": ("string", None),
    "boolean": ("boolean", None),
    "double": ("double", None),
    "decimal(10,2)": ("bytes", "org.apache.kafka.connect.data.Decimal"),
    "timestamp": ("string", "io.debezium.time.ZonedTimestamp"),
    "timestamp_ntz": ("int64", "io.debezium.time.MicroTimestamp"),
    "date": ("int32", "io.debezium.time.Date"),
    "json": ("string", "io.debezium.data.Json"),
    "binary": ("bytes", None),
}
UNAVAILABLE = "__debezium_unavailable_value"
_EPOCH = dt.datetime(1970, 1, 1)


def event_operations(change: Change, workload: Workload) -> list[str]:
    """Canonical operations of one change without faults: a key change is a delete and an
    insert; an added column is no event."""
    if change.kind not in EVENT_KINDS:
        return []
    if _key_changed(change, workload):
        return ["DELETE", "INSERT"]
    return [
        {"insert": "INSERT", "update": "UPDATE", "delete": "DELETE"}.get(change.kind, "TRUNCATE")
    ]


def _key_changed(ch: Change, workload: Workload) -> bool:
    if ch.kind != "update" or ch.before is None:
        return False
    return any(ch.before[k] != ch.key[k] for k in workload.tables[ch.table].key)


#: Column types a table without schemas (``schemas.enable=false``) can carry, decimals as text
#: (``decimal.handling.mode=string``).
PLAIN_TYPES = frozenset({"bigint", "int", "string", "boolean", "double", "json", "binary"})


#: Canonical type → the declared type of a column sent in Debezium's encoding without its
#: schema (the semantic type the schema would name).
SEMANTIC_DECLARED: dict[str, str] = {
    "decimal(10,2)": "org.apache.kafka.connect.data.Decimal(10,2)",
    "timestamp": "io.debezium.time.ZonedTimestamp",
    "timestamp_ntz": "io.debezium.time.MicroTimestamp",
    "date": "io.debezium.time.Date",
    "json": "io.debezium.data.Json",
}


def plain_table(workload: Workload, table: str) -> bool:
    """Whether a table holds only column types a message without schemas shows as they are."""
    return set(workload.initial_tables[table].columns.values()) <= PLAIN_TYPES


def schemaless_table(workload: Workload, table: str) -> bool:
    """Whether a table's messages are rendered without schemas (their types then come from
    declarations): a table of plain types, and every other table of the rest, whose
    Debezium encodings are declared by their semantic types (:func:`decode_options`)."""
    if plain_table(workload, table):
        return True
    encoded = sorted(t for t in workload.initial_tables if not plain_table(workload, t))
    return encoded.index(table) % 2 == 1


def connect_value(value: Any, t: str, plain: bool = False) -> Any:
    """A typed value as the connector writes it."""
    if value is None:
        return None
    if t.startswith("decimal") and plain:
        return format(value, "f")
    if t.startswith("decimal"):
        unscaled = int(Decimal(value).scaleb(2))
        raw = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        return base64.b64encode(raw).decode()
    if t == "timestamp":
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if t == "timestamp_ntz":
        return (value - _EPOCH) // dt.timedelta(microseconds=1)
    if t == "date":
        return (value - dt.date(1970, 1, 1)).days
    if t == "binary":
        return base64.b64encode(value).decode()
    return value


def _field(name: str, t: str, optional: bool = True) -> dict[str, Any]:
    ctype, semantic = CONNECT[t]
    f: dict[str, Any] = {"type": ctype, "optional": optional, "field": name}
    if semantic:
        f["name"] = semantic
    if t.startswith("decimal"):
        f["parameters"] = {"scale": "2", "connect.decimal.precision": "10"}
    return f


def _schema(workload: Workload, table: str, columns: list[str]) -> dict[str, Any]:
    d = workload.tables[table]
    row = {
        "type": "struct",
        "fields": [_field(c, d.columns[c], c not in d.key) for c in columns],
        "optional": True,
        "name": f"app.{d.schema}.{table}.Value",
    }
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
        "optional": False,
        "name": f"app.{d.schema}.{table}.Envelope",
    }


def _row(workload: Workload, table: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    cols = workload.tables[table].columns
    plain = plain_table(workload, table)
    return {c: connect_value(v, cols[c], plain) for c, v in row.items()}


def _message(
    workload: Workload,
    table: str,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: dict[str, Any],
    transaction: dict[str, Any] | None,
) -> dict[str, Any]:
    d = workload.tables[table]
    columns = list((after or before or {k: None for k in d.key}).keys())
    payload = {
        "before": _row(workload, table, before),
        "after": _row(workload, table, after),
        "source": {**source, "schema": d.schema, "table": table},
        "op": op,
        "ts_ms": source["ts_ms"],
        "transaction": transaction,
    }
    if schemaless_table(workload, table):
        return payload
    return {"schema": _schema(workload, table, columns), "payload": payload}


def _key_message(workload: Workload, table: str, row: dict[str, Any]) -> dict[str, Any]:
    d = workload.tables[table]
    if schemaless_table(workload, table):
        plain = plain_table(workload, table)
        return {k: connect_value(row[k], d.columns[k], plain) for k in d.key}
    return {
        "schema": {
            "type": "struct",
            "fields": [_field(k, d.columns[k], False) for k in d.key],
            "optional": False,
            "name": f"app.{d.schema}.{table}.Key",
        },
        "payload": {k: connect_value(row[k], d.columns[k]) for k in d.key},
    }


def _toast(workload: Workload, ch: Change, after: dict[str, Any]) -> dict[str, Any]:
    """A partial update: unchanged text columns as the unavailable-value marker."""
    d = workload.tables[ch.table]
    return {
        c: UNAVAILABLE if c not in ch.changed and c not in d.key and d.columns[c] == "string" else v
        for c, v in after.items()
    }


Record = tuple[str, dict[str, Any] | None, dict[str, Any] | None]


def _marker(reads: list[tuple[str, Any]], i: int) -> str:
    """``source.snapshot`` of the ``i``-th read of an initial snapshot, as the connector
    marks them."""
    if i == len(reads) - 1:
        return "last"
    if i == 0:
        return "first"
    table = reads[i][0]
    if reads[i + 1][0] != table:
        return "last_in_data_collection"
    return "first_in_data_collection" if reads[i - 1][0] != table else "true"


def render_records(
    workload: Workload, *, faults: bool, transactions: slice | None = None, seed: int = 0
) -> list[Record]:
    """(topic, key message, value message) in the connector's order; a ``None`` value is a
    tombstone (transaction metadata and truncates have no key)."""
    rng = random.Random(seed)
    first = (transactions.start or 0) if transactions is not None else 0
    txs = list(enumerate(workload.transactions))[transactions or slice(None)]
    out: list[Record] = []
    whole = not first
    snapshot_at = len(txs) // 3 if faults and whole else 0
    if snapshot_at:
        # the initial snapshot reads the state after the first transactions; streaming
        # resumes a little earlier (snapshot/stream overlap)
        changes = [c for _, tx in txs[:snapshot_at] for c in tx.changes]
        state = oracle.apply(changes, workload.tables)
        lsn = txs[snapshot_at - 1][1].lsn * 1024
        reads = [(t, row) for t, rows in state.items() for row in rows.values()]
        for i, (table, row) in enumerate(reads):
            src = {"connector": "postgresql", "db": "app", "snapshot": _marker(reads, i),
                   "sequence": f'[null,"{lsn}"]', "lsn": lsn, "ts_ms": 1735689600000,
                   "txId": 999}  # fmt: skip
            value = _message(workload, table, "r", None, row, src, None)
            out.append((f"app.public.{table}", _key_message(workload, table, row), value))
        txs = txs[max(0, snapshot_at - 2) :]
    for n, (number, tx) in enumerate(txs):
        ts = int(tx.commit_time.timestamp() * 1000)
        commit = tx.lsn * 1024 + 1023
        # a PostgreSQL xid; the connector's ids are "<xid>:<the last LSN it saw>", and its
        # sequence starts with the commit LSN of the transaction before (null for the first
        # transaction a new connector streams)
        xid = 1000 + number
        before = workload.transactions[number - 1].lsn * 1024 + 1023 if number else None
        last_commit = "null" if before is None or (whole and n == 0) else f'"{before}"'
        lsns = [tx.lsn * 1024 + ch.seq for ch in tx.changes if ch.kind in EVENT_KINDS]
        meta = {"status": "BEGIN", "id": f"{xid}:{lsns[0] if lsns else commit}", "ts_ms": ts,
                "event_count": None}  # fmt: skip
        if faults:
            out.append(("app.transaction", None, {**meta, "data_collections": None}))
        counts: dict[str, int] = {}
        for ch in tx.changes:
            if ch.kind not in EVENT_KINDS:
                continue
            counts[ch.table] = counts.get(ch.table, 0) + 1
            lsn = tx.lsn * 1024 + ch.seq
            src = {
                "connector": "postgresql",
                "db": "app",
                "snapshot": "false",
                "sequence": f'[{last_commit},"{lsn}"]',
                "lsn": lsn,
                "txId": xid,
                "ts_ms": ts,
            }
            trx = {
                "id": f"{xid}:{lsn}",
                "total_order": ch.seq,
                "data_collection_order": counts[ch.table],
            }
            topic = f"app.public.{ch.table}"
            if ch.kind == "truncate":
                out.append((topic, None, _message(workload, ch.table, "t", None, None, src, trx)))
                continue
            old, new = ch.before, ch.after
            if _key_changed(ch, workload):
                assert old is not None and new is not None
                value = _message(workload, ch.table, "d", old, None, src, trx)
                out.append((topic, _key_message(workload, ch.table, old), value))
                out.append((topic, _key_message(workload, ch.table, old), None))
                old = None
                op = "c"
            else:
                op = {"insert": "c", "update": "u", "delete": "d"}[ch.kind]
            if op == "u" and ch.changed and new is not None and faults:
                new = _toast(workload, ch, new)
            value = _message(workload, ch.table, op, old, new, src, trx)
            image = new if new is not None else old
            assert image is not None
            out.append((topic, _key_message(workload, ch.table, image), value))
            if op == "d" and faults:
                out.append((topic, _key_message(workload, ch.table, image), None))
        if faults:
            collections = [
                {"data_collection": f"public.{t}", "event_count": n} for t, n in counts.items()
            ]
            end = {**meta, "id": f"{xid}:{commit}", "status": "END",
                   "event_count": sum(counts.values())}  # fmt: skip
            out.append(("app.transaction", None, {**end, "data_collections": collections}))
    if faults and len(out) > 4:
        # a connector restart: a run of messages delivered again
        start = rng.randrange(len(out) - 4)
        out.extend(out[start : start + rng.randrange(2, 6)])
    return out


def decode_options(workload: Workload) -> DialectOptions:
    """Key names for the decoder, and column types: canonical ones, and for a table sent in
    Debezium's encodings without schemas the semantic types its schema would name."""

    def declared(table: str, t: str) -> str:
        encoded = schemaless_table(workload, table) and not plain_table(workload, table)
        return SEMANTIC_DECLARED.get(t, t) if encoded else t

    return DialectOptions(
        table_keys={t: d.key for t, d in workload.tables.items()},
        column_types={
            t: {c: declared(t, ct) for c, ct in d.columns.items()}
            for t, d in workload.tables.items()
        },
    )


def render(job: RenderJob) -> RenderResult:
    """The registry's renderer: plain values in one file without faults; with faults, Kafka
    records (keys, tombstones) and plain values in several files, shuffled."""
    records = render_records(
        job.workload, faults=job.faults, transactions=job.transactions, seed=job.seed
    )
    rng = random.Random(job.seed)
    job.landing.mkdir(parents=True, exist_ok=True)
    files = 3 if job.faults else 1
    if job.faults:
        rng.shuffle(records)
    written: list[Path] = []
    offset = 0
    for i in range(files):
        lines: list[bytes] = []
        for topic, key, value in records[i::files]:
            if job.faults and i % 2 == 1:
                offset += 1
                record = {"topic": topic, "partition": 0, "offset": offset, "value": value}
                if key is not None:
                    record["key"] = key
                lines.append(orjson.dumps(record))
            elif value is not None:
                lines.append(orjson.dumps(value))
        name = f"debezium-{job.seed}-{len(list(job.landing.glob('*.jsonl'))):04d}.jsonl"
        written.append(land(job.landing / name, b"\n".join(lines) + b"\n"))
    messages = sum(1 for _, _, v in records if v is not None)
    return RenderResult(files=written, options=decode_options(job.workload), messages=messages)
