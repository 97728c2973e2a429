"""Renderer: logical changes → unified-format (``savegress``) messages in a landing zone.

Values are written as the spec's Postgres type table says (decimal → string, timestamps → ISO
text, bytea → base64, json → objects). The format carries no key names and no types, so
:func:`decode_options` gives the decoder both. Delivery faults the format allows: duplicates,
redelivered files, any reordering (order comes from ``position``), batch envelopes, the Kafka
message form and transaction markers.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import (
    PG_TYPES,
    RenderJob,
    RenderResult,
    pg_lsn,
    row_image,
    timestamp_text,
)
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Change, Workload


def wire_value(value: Any, ctype: str) -> Any:
    """A typed value as the unified format writes it for Postgres."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return timestamp_text(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if ctype == "json" and isinstance(value, str):
        return orjson.loads(value)
    return value


def _row(workload: Workload, table: str, row: Mapping[str, Any] | None) -> Any:
    return row_image(workload, table, row, wire_value)


def render_change(workload: Workload, ch: Change) -> dict[str, Any]:
    """One change as a unified-format event."""
    d = workload.tables[ch.table]
    doc: dict[str, Any] = {
        "id": f"evt-{ch.txid}-{ch.seq}",
        "source": "postgres",
        "schema": d.schema,
        "table": ch.table,
        "timestamp": ch.commit_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "transaction_id": ch.txid,
        "position": {"lsn": pg_lsn(ch.lsn), "sequence": ch.seq},
    }
    if ch.kind == "insert":
        doc.update(operation="INSERT", before=None, after=_row(workload, ch.table, ch.after))
    elif ch.kind == "update":
        doc.update(
            operation="UPDATE",
            before=_row(workload, ch.table, ch.before),
            after=_row(workload, ch.table, ch.after),
        )
    elif ch.kind == "delete":
        doc.update(operation="DELETE", before=_row(workload, ch.table, ch.before), after=None)
    elif ch.kind == "truncate":
        doc.update(operation="TRUNCATE")  # a cdcflow extension: the spec has no TRUNCATE
    elif ch.kind == "add_column":
        assert ch.column and ch.column_type
        doc.update(
            operation="DDL",
            ddl_type="ALTER_TABLE",
            ddl_command=f"ALTER TABLE {d.schema}.{ch.table} ADD COLUMN {ch.column} "
            f"{PG_TYPES[ch.column_type]}",
            before=None,
            after=None,
        )
    return doc


def render_messages(
    workload: Workload, *, markers: bool = False, transactions: slice | None = None
) -> list[dict[str, Any]]:
    """Events in commit order (with BEGIN/COMMIT markers when asked)."""
    out: list[dict[str, Any]] = []
    for tx in workload.transactions[transactions or slice(None)]:
        ts = tx.commit_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if markers:
            out.append(
                {
                    "operation": "BEGIN",
                    "transaction_id": tx.txid,
                    "timestamp": ts,
                    "position": {"lsn": pg_lsn(tx.lsn), "sequence": 0},
                }
            )
        out.extend(render_change(workload, ch) for ch in tx.changes)
        if markers:
            out.append(
                {
                    "operation": "COMMIT",
                    "transaction_id": tx.txid,
                    "timestamp": ts,
                    "position": {"lsn": pg_lsn(tx.lsn), "sequence": 1 << 30},
                }
            )
    return out


def decode_options(workload: Workload) -> DialectOptions:
    """Key names and Postgres column types the decoder needs for this workload."""
    return DialectOptions(
        table_keys={t: d.key for t, d in workload.tables.items()},
        column_types={
            t: {c: PG_TYPES[ct] for c, ct in d.columns.items()} for t, d in workload.tables.items()
        },
    )


def kafka_message(doc: dict[str, Any], workload: Workload) -> dict[str, Any]:
    """The event in the format's Kafka message form: key, value and ``savegress-*`` headers."""
    table = doc.get("table")
    key = ""
    if table:
        d = workload.tables[table]
        image = doc.get("after") or doc.get("before") or {}
        key = f"{table}:" + ",".join(str(image.get(k)) for k in d.key)
    return {
        "key": key,
        "value": doc,
        "headers": {
            "savegress-event-id": doc.get("id", ""),
            "savegress-operation": doc["operation"],
            "savegress-table": table or "",
            "savegress-timestamp": str(
                int(
                    dt.datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00")).timestamp()
                    * 1000
                )
            ),
        },
    }


_counter = [0]


def _write(landing: Path, lines: list[bytes], seed: int) -> Path:
    landing.mkdir(parents=True, exist_ok=True)
    _counter[0] += 1
    existing = len(list(landing.glob("*.jsonl")))
    name = f"{existing:06d}-{seed}-{_counter[0]}.jsonl"
    return land(landing / name, b"\n".join(lines) + b"\n")


def render_to_landing(
    workload: Workload,
    landing: Path,
    *,
    seed: int,
    files: int = 4,
    batch_envelopes: bool = False,
    duplicates: float = 0.1,
    redeliver_files: int = 0,
    reorder: bool = True,
    markers: bool = False,
    kafka_form: bool = False,
    transactions: slice | None = None,
) -> RenderResult:
    """Render (part of) a workload into JSON-lines files with delivery faults."""
    rng = random.Random(seed)
    docs = render_messages(workload, markers=markers, transactions=transactions)
    docs = docs + [d for d in docs if rng.random() < duplicates]
    if reorder:
        rng.shuffle(docs)
    chunks = [docs[i::files] for i in range(files)] if docs else []
    written: list[Path] = []
    contents: list[list[bytes]] = []
    for i, chunk in enumerate(chunks):
        if not chunk:
            continue
        lines: list[bytes]
        if batch_envelopes and i % 2 == 0:
            lines = []
            for j in range(0, len(chunk), 5):
                part = chunk[j : j + 5]
                lines.append(
                    orjson.dumps(
                        {
                            "batch_id": f"batch-{seed}-{i}-{j}",
                            "batch_size": len(part),
                            "batch_timestamp": "2025-01-15T10:30:00Z",
                            "events": part,
                        }
                    )
                )
        elif kafka_form and i % 2 == 1:
            lines = [orjson.dumps(kafka_message(d, workload)) for d in chunk]
        else:
            lines = [orjson.dumps(d) for d in chunk]
        contents.append(lines)
        written.append(_write(landing, lines, seed))
    for _ in range(redeliver_files):
        if contents:
            written.append(_write(landing, rng.choice(contents), seed))
    return RenderResult(files=written, options=decode_options(workload), messages=len(docs))


def render(job: RenderJob) -> RenderResult:
    """The registry's renderer: every fault the format allows when ``faults``."""
    if not job.faults:
        return render_to_landing(
            job.workload,
            job.landing,
            seed=job.seed,
            duplicates=0.0,
            reorder=False,
            transactions=job.transactions,
            files=1,
        )
    return render_to_landing(
        job.workload,
        job.landing,
        seed=job.seed,
        batch_envelopes=True,
        kafka_form=True,
        markers=True,
        duplicates=0.15,
        redeliver_files=1,
        transactions=job.transactions,
    )


def render_transport(
    workload: Workload, landing: Path, transport: str, *, seed: int
) -> RenderResult:
    """The workload in a transport of the format's own: ``protobuf`` (the gRPC ``CDCEvent``
    messages, length-delimited, in one ``.pb`` file). Events the message cannot carry (a
    ``TRUNCATE``, which its Operation enum lacks) are left out."""
    if transport != "protobuf":
        raise ValueError(f"the unified format has no transport {transport!r} of its own")
    from cdcflow.dialects.savegress.proto import event_to_proto
    from cdcflow.transports.protobuf import write_delimited
    from cdcflow.types import ValueTypeError

    messages: list[bytes] = []
    for doc in render_messages(workload):
        try:
            messages.append(event_to_proto(doc))
        except ValueTypeError:
            continue
    path = land(landing / f"events-{seed}.pb", write_delimited(messages))
    return RenderResult(files=[path], options=decode_options(workload), messages=len(messages))
