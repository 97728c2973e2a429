"""What a CockroachDB changefeed emits for a workload: each table's messages in emission
order, with the spec's delivery behaviour (the landing forms: :mod:`.render`).

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
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import row_image, timestamp_text
from cdcflow.simulation.workload import Change, Workload

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
        return _frac(timestamp_text(value, utc="")) + ("Z" if value.tzinfo is not None else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if ctype == "json" and isinstance(value, str):
        return orjson.Fragment(value)
    return value


def _row(workload: Workload, table: str, row: Mapping[str, Any] | None) -> Any:
    return row_image(
        workload, table, None if row is None else dict(sorted(row.items())), crdb_value
    )


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
class Message:
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
) -> Message:
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
    return Message(table, at, doc, karr)


def messages(
    workload: Workload, window: range, rng: random.Random | None, feed: str | None = None
) -> list[Message]:
    plan = _plan(workload)
    out: list[Message] = []
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


def redelivered(msgs: list[Message], rng: random.Random) -> list[Message]:
    """At-least-once delivery: some messages twice, and everything after a checkpoint emitted
    again after newer messages (out-of-order duplicates of versions already seen)."""
    out = [m for m in msgs for _ in range(2 if rng.random() < 0.1 else 1)]
    if len(msgs) > 2:
        cut = rng.randrange(len(msgs))
        out = out + msgs[cut : cut + rng.randrange(1, 12)]
    return out
