"""Renderer: logical changes → CockroachDB changefeed messages, with the spec's delivery
behaviour.

Each table is watched by one changefeed (:data:`FEEDS`, chosen per table from the workload's
seed, so every run over one workload renders a table the same way):

* ``cloudstorage``: cloud-storage sink, ``wrapped`` envelope with ``diff``, ``key`` and
  ``updated``; files named as the sink names them
  (``<date>/<33-digit timestamp>-<uniquer>-<node>-<sink id>-<file id>-<topic>-<schema id>
  .ndjson``) and ``<timestamp>.RESOLVED`` files (some empty: read from the name);
* ``webhook``: webhook sink bodies ``{"payload": [...], "length": N}`` (some without
  ``length``) of ``wrapped`` messages with ``key``, ``topic`` and ``updated`` (no ``diff``:
  inserts and updates are ``UPSERT``), one body per line, resolved bodies between them;
* ``kafka``: Kafka records written as JSON lines (``topic``, ``partition``, ``offset``, ``key``
  = the key array as JSON text, ``value`` = the ``wrapped`` message with ``updated``), resolved
  messages on every partition;
* ``enriched``: ``envelope=enriched`` with ``enriched_properties=source`` and ``diff`` (``op``
  ``c``/``u``/``d``, ``source.primary_keys``/``ts_hlc``/``table_name``...), as JSON lines.

Every transaction has one HLC (``updated``): its commit time in nanoseconds and a logical
counter. As CockroachDB emits only the last write of a row in a transaction, the changes of one
transaction are collapsed per key (a key changed and changed back is one update; a key change
is a delete of the old key and an insert of the new one); :func:`event_operations` attributes
each message to the last change of its key in the transaction.

JSON carries no types: values are written as CockroachDB writes them (``DECIMAL`` as a number
with its scale, ``25.00``; ``TIMESTAMPTZ`` with ``Z`` and trailing zeros dropped; ``BYTES`` as
``\\x`` hex; ``JSONB`` as nested JSON) and :func:`decode_options` declares the types JSON
cannot show (float, timestamps, dates, bytes, JSONB); integers, text, booleans and decimals are
inferred by the decoder.

Delivery faults (``faults``): at-least-once duplicates and the re-emission of every message
after a checkpoint (out-of-order duplicates of earlier versions, delivered after newer
versions — never an unseen older version), files delivered out of order and one file
redelivered, and schema-change backfills: when a column is added the whole table is re-emitted
with the new column at the schema change's timestamp, sometimes preceded by the old-schema copy
(the non-declarative schema changer). Truncates are left out (:data:`FEATURES`): a changefeed
emits nothing for them.
"""

from __future__ import annotations

import datetime as dt
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.base import DialectOptions
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Change, Workload
from cdcflow.testing.render_savegress import RenderResult

#: Workload features a changefeed can express.
FEATURES = frozenset(
    {"insert", "update", "delete", "reinsert", "pk_change", "partial", "add_column"}
)
#: Change kinds that become messages (an added column shows in later rows and, with faults, in
#: a schema-change backfill).
EVENT_KINDS = frozenset({"insert", "update", "delete"})

#: Changefeed shapes, one per table.
FEEDS: tuple[str, ...] = ("cloudstorage", "webhook", "kafka", "enriched")
#: Feeds whose messages tell inserts from updates (``diff``, enriched ``op``).
DIFF_FEEDS = frozenset({"cloudstorage", "enriched"})

#: CockroachDB types declared for columns whose JSON values do not show their type.
DECLARED_TYPES: dict[str, str] = {
    "double": "FLOAT8",
    "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
    "date": "DATE",
    "json": "JSONB",
    "binary": "BYTES",
}


@dataclass(frozen=True)
class Net:
    """What a changefeed emits for one key of one transaction."""

    tx: int
    table: str
    kind: str  # insert | update | delete
    key: tuple[Any, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    change: Change


@dataclass(frozen=True)
class Backfill:
    """A schema change (added column) and the table's rows right after it."""

    tx: int
    table: str
    column: str
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class _Plan:
    nets: tuple[tuple[Net, ...], ...]  # per transaction
    backfills: tuple[tuple[Backfill, ...], ...]
    by_change: dict[int, list[Net]]


_CACHE: dict[int, tuple[Workload, _Plan]] = {}


def table_feed(workload: Workload, table: str) -> str:
    """The changefeed shape a table is rendered with (stable for a workload)."""
    names = sorted(workload.tables)
    return FEEDS[(names.index(table) + workload.seed) % len(FEEDS)]


def _plan(workload: Workload) -> _Plan:
    cached = _CACHE.get(id(workload))
    if cached is not None and cached[0] is workload:
        return cached[1]
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in workload.tables}
    nets: list[tuple[Net, ...]] = []
    backfills: list[tuple[Backfill, ...]] = []
    by_change: dict[int, list[Net]] = {}
    for n, tx in enumerate(workload.transactions):
        pre: dict[tuple[str, tuple[Any, ...]], dict[str, Any] | None] = {}
        last: dict[tuple[str, tuple[Any, ...]], Change] = {}
        order: list[tuple[str, tuple[Any, ...]]] = []
        added: list[tuple[str, str]] = []
        for ch in tx.changes:
            rows = state.setdefault(ch.table, {})
            keys = workload.tables[ch.table].key
            touched: list[tuple[Any, ...]] = []
            if ch.kind == "insert" and ch.after is not None:
                touched = [tuple(ch.after[k] for k in keys)]
            elif ch.kind == "update" and ch.before is not None and ch.after is not None:
                touched = [tuple(ch.before[k] for k in keys), tuple(ch.after[k] for k in keys)]
            elif ch.kind == "delete" and ch.before is not None:
                touched = [tuple(ch.before[k] for k in keys)]
            for kt in touched:
                if (ch.table, kt) not in pre:
                    pre[(ch.table, kt)] = dict(rows[kt]) if kt in rows else None
                    order.append((ch.table, kt))
                last[(ch.table, kt)] = ch
            if ch.kind == "insert" and ch.after is not None:
                rows[touched[0]] = dict(ch.after)
            elif ch.kind == "update" and ch.after is not None:
                rows.pop(touched[0], None)
                rows[touched[1]] = dict(ch.after)
            elif ch.kind == "delete":
                rows.pop(touched[0], None)
            elif ch.kind == "truncate":
                rows.clear()
            elif ch.kind == "add_column" and ch.column:
                for kt in rows:
                    rows[kt] = {**rows[kt], ch.column: None}
                added.append((ch.table, ch.column))
        out: list[Net] = []
        for table, kt in order:
            before = pre[(table, kt)]
            after = state[table].get(kt)
            if before is None and after is None:
                continue
            kind = "insert" if before is None else "delete" if after is None else "update"
            net = Net(n, table, kind, kt, before, dict(after) if after else None, last[(table, kt)])
            out.append(net)
            by_change.setdefault(id(net.change), []).append(net)
        # a key change: the old key's delete before the new key's insert
        out.sort(key=lambda x: 0 if x.kind == "delete" else 1)
        nets.append(tuple(out))
        # the backfill runs at the schema change's timestamp, after the transaction
        fills = [
            Backfill(n, table, column, tuple(dict(r) for r in state[table].values()))
            for table, column in added
        ]
        backfills.append(tuple(fills))
    for lst in by_change.values():
        lst.sort(key=lambda x: 0 if x.kind == "delete" else 1)
    plan = _Plan(tuple(nets), tuple(backfills), by_change)
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[id(workload)] = (workload, plan)
    return plan


def _operation(feed: str, kind: str) -> str:
    if kind == "delete":
        return "DELETE"
    if feed in DIFF_FEEDS:
        return "INSERT" if kind == "insert" else "UPDATE"
    return "UPSERT"


def event_operations(change: Change, workload: Workload) -> list[str]:
    """Canonical operations a change becomes when rendered without faults: the messages of the
    keys whose last change in its transaction it is (a key change is a delete and an insert;
    a row written twice in a transaction is one message)."""
    if change.kind not in EVENT_KINDS:
        return []
    feed = table_feed(workload, change.table)
    return [_operation(feed, n.kind) for n in _plan(workload).by_change.get(id(change), [])]


# ---------------------------------------------------------------------- values


def hlc(workload: Workload, tx: int, bump: int = 0) -> tuple[int, int]:
    """The HLC of a transaction (commit time in nanoseconds, logical counter); ``bump`` raises
    the logical counter (a schema change right after the transaction)."""
    commit = workload.transactions[tx].commit_time
    delta = commit - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    wall = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return wall + 17, tx % 3 + bump


def hlc_text(value: tuple[int, int]) -> str:
    """An HLC as changefeeds print it: ``wall.logical`` with 10 logical digits."""
    return f"{value[0]}.{value[1]:010d}"


def _frac(text: str) -> str:
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def crdb_value(value: Any, ctype: str) -> Any:
    """A typed value as a CockroachDB JSON changefeed writes it."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return orjson.Fragment(format(value, "f"))
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return _frac(value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")) + "Z"
        return _frac(value.strftime("%Y-%m-%dT%H:%M:%S.%f"))
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if ctype == "json" and isinstance(value, str):
        return orjson.Fragment(value)
    return value


def _row(workload: Workload, table: str, row: Mapping[str, Any] | None) -> Any:
    if row is None:
        return None
    cols = workload.tables[table].columns
    return {c: crdb_value(v, cols.get(c, "string")) for c, v in sorted(row.items())}


def _key(workload: Workload, table: str, kt: tuple[Any, ...]) -> list[Any]:
    cols = workload.tables[table].columns
    keys = workload.tables[table].key
    return [crdb_value(v, cols[k]) for k, v in zip(keys, kt, strict=True)]


def decode_options(workload: Workload) -> DialectOptions:
    """Keys (key arrays carry no names) and the types JSON cannot show."""
    types = {
        t: {c: DECLARED_TYPES[ct] for c, ct in d.columns.items() if ct in DECLARED_TYPES}
        for t, d in workload.tables.items()
    }
    return DialectOptions(
        table_keys={t: d.key for t, d in workload.tables.items()},
        column_types={t: c for t, c in types.items() if c},
    )


# ---------------------------------------------------------------------- messages


@dataclass
class _Msg:
    """One rendered message of a table's feed, in emission order."""

    table: str
    hlc: tuple[int, int]
    doc: Any  # the message (value) as a JSON-able object; None for a tombstone
    key: list[Any]


def _message(
    workload: Workload,
    feed: str,
    table: str,
    kind: str,
    key: tuple[Any, ...],
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    at: tuple[int, int],
) -> _Msg:
    updated = hlc_text(at)
    karr = _key(workload, table, key)
    a, b = _row(workload, table, after), _row(workload, table, before)
    doc: Any
    if feed == "cloudstorage":
        doc = {"after": a, "before": b, "key": karr, "updated": updated}
    elif feed == "webhook":
        doc = {"after": a, "key": karr, "topic": table, "updated": updated}
    elif feed == "kafka":
        doc = {"after": a, "updated": updated}
    else:
        d = workload.tables[table]
        doc = {
            "after": a,
            "before": b,
            "op": {"insert": "c", "update": "u", "delete": "d"}[kind],
            "source": {
                "changefeed_sink": "kafka",
                "cluster_id": "585e6512-ea54-490a-8f1d-50c8d182a2e6",
                "database_name": "cdcdemo",
                "job_id": "1072079179268751361",
                "node_id": "1",
                "origin": "cockroachdb",
                "primary_keys": list(d.key),
                "schema_name": d.schema,
                "table_name": table,
                "ts_hlc": updated,
                "ts_ns": at[0],
            },
            "ts_ns": at[0] + 600_000_000,
        }
    return _Msg(table, at, doc, karr)


def _messages(
    workload: Workload, window: range, rng: random.Random | None, feed: str | None = None
) -> list[_Msg]:
    plan = _plan(workload)
    out: list[_Msg] = []
    given = feed
    for n in window:
        for net in plan.nets[n]:
            feed = given or table_feed(workload, net.table)
            out.append(
                _message(
                    workload,
                    feed,
                    net.table,
                    net.kind,
                    net.key,
                    net.before,
                    net.after,
                    hlc(workload, n),
                )
            )
        if rng is None:
            continue
        for fill in plan.backfills[n]:
            feed = given or table_feed(workload, fill.table)
            keys = workload.tables[fill.table].key
            old_copy = rng.random() < 0.5
            for row in fill.rows:
                kt = tuple(row[k] for k in keys)
                old = {c: v for c, v in row.items() if c != fill.column}
                if old_copy:
                    out.append(
                        _message(
                            workload, feed, fill.table, "update", kt, old, old, hlc(workload, n, 3)
                        )
                    )
                out.append(
                    _message(
                        workload, feed, fill.table, "update", kt, old, row, hlc(workload, n, 4)
                    )
                )
    return out


# ---------------------------------------------------------------------- files


def name_timestamp(at: tuple[int, int]) -> str:
    """The 33-digit timestamp of cloud-storage file names for an HLC."""
    wall, logical = at
    secs, nanos = divmod(wall, 1_000_000_000)
    base = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=secs)
    return f"{base.strftime('%Y%m%d%H%M%S')}{nanos:09d}{logical:010d}"


def _lines(docs: list[Any]) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def _with_faults(msgs: list[_Msg], rng: random.Random) -> list[_Msg]:
    """At-least-once delivery: some messages twice, and everything after a checkpoint emitted
    again after newer messages (out-of-order duplicates of versions already seen)."""
    out = [m for m in msgs for _ in range(2 if rng.random() < 0.1 else 1)]
    if len(msgs) > 2:
        cut = rng.randrange(len(msgs))
        out = out + msgs[cut : cut + rng.randrange(1, 12)]
    return out


def render(
    workload: Workload,
    landing: Path,
    *,
    seed: int,
    transactions: slice | None = None,
    faults: bool = True,
) -> RenderResult:
    """The registry's renderer: each table's changefeed into the landing zone (cloud-storage
    files, webhook bodies, Kafka records, enriched messages) with resolved messages, and with
    delivery faults and schema-change backfills when ``faults``."""
    rng = random.Random(seed)
    window = range(len(workload.transactions))[transactions or slice(None)]
    msgs = _messages(workload, window, rng if faults else None)
    per_feed: dict[str, dict[str, list[_Msg]]] = {}
    for m in msgs:
        per_feed.setdefault(table_feed(workload, m.table), {}).setdefault(m.table, []).append(m)
    resolved = hlc_text(hlc(workload, window[-1], 5)) if len(window) else None
    uniquer = f"{zlib.crc32(f'{workload.seed}-{seed}'.encode()):08x}{seed & 0xFFFFFFFF:08x}"
    written: list[Path] = []
    counter = 0
    total = 0
    for feed, tables in sorted(per_feed.items()):
        for table, tmsgs in sorted(tables.items()):
            if faults:
                tmsgs = _with_faults(tmsgs, rng)
            total += len(tmsgs)
            size = rng.randrange(3, 15) if faults else max(1, len(tmsgs))
            chunks = [tmsgs[i : i + size] for i in range(0, len(tmsgs), size)]
            for chunk in chunks:
                counter += 1
                written.append(
                    _write_chunk(
                        workload,
                        landing,
                        feed,
                        table,
                        chunk,
                        seed,
                        counter,
                        uniquer,
                        rng if faults else None,
                    )
                )
    if resolved is not None:
        written.extend(_write_resolved(landing, per_feed, resolved, seed, rng, faults))
    if faults and written:
        data_files = [p for p in written if not p.name.endswith(".RESOLVED")]
        if data_files:
            again = rng.choice(data_files)
            written.append(
                land(again.with_name(f"{again.stem}-redelivered{again.suffix}"), again.read_bytes())
                if not _is_cloud(again)
                else land(_cloud_again(again, seed), again.read_bytes())
            )
    return RenderResult(files=written, options=decode_options(workload), messages=total)


def kafka_messages(
    workload: Workload, *, seed: int, transactions: slice | None = None, faults: bool = True
) -> tuple[list[tuple[str, list[Any], dict[str, Any]]], str | None]:
    """The changefeed of every table through a Kafka sink: (table, key array, value) in the
    order each table's feed emits them (with at-least-once redelivery and schema-change
    backfills when ``faults``), and the resolved timestamp closing the window."""
    rng = random.Random(seed)
    window = range(len(workload.transactions))[transactions or slice(None)]
    msgs = _messages(workload, window, rng if faults else None, feed="kafka")
    per_table: dict[str, list[_Msg]] = {}
    for m in msgs:
        per_table.setdefault(m.table, []).append(m)
    out: list[tuple[str, list[Any], dict[str, Any]]] = []
    for table, tmsgs in sorted(per_table.items()):
        for m in _with_faults(tmsgs, rng) if faults else tmsgs:
            out.append((table, m.key, m.doc))
    resolved = hlc_text(hlc(workload, window[-1], 5)) if len(window) else None
    return out, resolved


def _is_cloud(path: Path) -> bool:
    return path.suffix == ".ndjson" and path.name[:1].isdigit()


def _cloud_again(path: Path, seed: int) -> Path:
    """A redelivered cloud-storage file: the same content under a new file id."""
    parts = path.name.split("-")
    parts[4] = f"{99_000_000 + seed % 1_000_000:08d}"
    return path.with_name("-".join(parts))


def _write_chunk(
    workload: Workload,
    landing: Path,
    feed: str,
    table: str,
    chunk: list[_Msg],
    seed: int,
    counter: int,
    uniquer: str,
    rng: random.Random | None,
) -> Path:
    if feed == "cloudstorage":
        first = min(m.hlc for m in chunk)
        ts = name_timestamp(first)
        folder = landing / f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}"
        if rng is not None and rng.random() < 0.3:
            folder = folder / ts[8:10]
        name = f"{ts}-{uniquer}-1-{seed % 100}-{counter:08d}-{table}-1.ndjson"
        return land(folder / name, _lines([m.doc for m in chunk]))
    if feed == "webhook":
        bodies: list[Any] = []
        size = 1 if rng is None else rng.randrange(1, 5)
        for i in range(0, len(chunk), size):
            payload = [m.doc for m in chunk[i : i + size]]
            body: dict[str, Any] = {"payload": payload, "length": len(payload)}
            if rng is not None and rng.random() < 0.2:
                del body["length"]
            bodies.append(body)
        return land(landing / f"webhook-{seed}-{counter:05d}.ndjson", _lines(bodies))
    if feed == "kafka":
        records = []
        for i, m in enumerate(chunk):
            partition = zlib.crc32(orjson.dumps(m.key)) % 2
            records.append(
                {
                    "topic": table,
                    "partition": partition,
                    "offset": counter * 1000 + i,
                    "key": orjson.dumps(m.key).decode(),
                    "value": None if m.doc is None else orjson.dumps(m.doc).decode(),
                }
            )
        return land(landing / f"kafka-{seed}-{counter:05d}.jsonl", _lines(records))
    return land(landing / f"enriched-{seed}-{counter:05d}.ndjson", _lines([m.doc for m in chunk]))


def _write_resolved(
    landing: Path,
    per_feed: Mapping[str, Mapping[str, list[_Msg]]],
    resolved: str,
    seed: int,
    rng: random.Random,
    faults: bool,
) -> list[Path]:
    """Resolved messages in each feed's form, at the end of the rendered window."""
    out: list[Path] = []
    wall, _, logical = resolved.partition(".")
    at = (int(wall), int(logical))
    if "cloudstorage" in per_feed:
        ts = name_timestamp(at)
        content = b"" if faults and rng.random() < 0.5 else orjson.dumps({"resolved": resolved})
        out.append(land(landing / f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}" / f"{ts}.RESOLVED", content))
    if "webhook" in per_feed:
        out.append(
            land(landing / f"webhook-{seed}-resolved.ndjson", _lines([{"resolved": resolved}]))
        )
    records = []
    for table in sorted(per_feed.get("kafka", {})):
        value = {"resolved": resolved}
        for partition in (0, 1):
            records.append(
                {
                    "topic": table,
                    "partition": partition,
                    "offset": 10**9 + partition,
                    "key": None,
                    "value": orjson.dumps(value).decode(),
                }
            )
    if records:
        out.append(land(landing / f"kafka-{seed}-resolved.jsonl", _lines(records)))
    return out


def render_transport(
    workload: Workload, landing: Path, transport: str, *, seed: int
) -> RenderResult:
    """The workload in a transport of the changefeed's own: ``csv`` (a ``format=csv``
    initial scan of each table's final rows, one cloud-storage CSV file per table)."""
    if transport != "csv":
        raise ValueError(f"changefeeds have no transport {transport!r} of their own")
    import csv
    import io

    from cdcflow.simulation import oracle

    state = oracle.apply(workload)
    ts = name_timestamp(hlc(workload, len(workload.transactions) - 1, 9))
    files: list[Path] = []
    rows_written = 0
    columns: dict[str, list[str]] = {}
    for n, (table, rows) in enumerate(sorted(state.items())):
        cols = list(workload.tables[table].columns)
        columns[table] = cols
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for row in oracle.rows(rows):
            writer.writerow([_csv_text(row[c], workload.tables[table].columns[c]) for c in cols])
            rows_written += 1
        name = f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}/{ts}-{seed:016x}-1-1-{n:08d}-{table}-1.csv"
        files.append(land(landing / name, out.getvalue().encode()))
    opts = decode_options(workload)
    options = DialectOptions(
        table_keys=opts.table_keys,
        column_types=opts.column_types,
        extra={"csv_columns": columns},
    )
    return RenderResult(files=files, options=options, messages=rows_written)


def _csv_text(value: Any, ctype: str) -> str:
    """A value as CockroachDB's CSV output writes it (NULL as an empty field)."""
    written = crdb_value(value, ctype)
    if written is None:
        return ""
    if isinstance(written, orjson.Fragment):
        return orjson.dumps(written).decode()
    if isinstance(written, bool):
        return "true" if written else "false"
    if isinstance(written, dict | list):
        return orjson.dumps(written).decode()
    return str(written)
