"""Seeded, reproducible workloads of logical changes over several tables.

A workload is what happened at the source, in commit order: transactions of inserts, updates
(full or partial), deletes, re-inserts of deleted keys, primary-key changes, truncates and added
columns. Renderers turn it into a dialect's messages; :mod:`cdcflow.simulation.oracle` applies it.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

ALL_FEATURES = frozenset(
    {"insert", "update", "delete", "reinsert", "pk_change", "partial", "truncate", "add_column"}
)


@dataclass(frozen=True)
class TableDef:
    """A source table: key columns and canonical column types (keys included, in order)."""

    name: str
    key: tuple[str, ...]
    columns: dict[str, str]
    schema: str = "public"


@dataclass(frozen=True)
class Change:
    """One logical change. ``key`` is the row's key after the change (for deletes, the deleted
    key); ``before``/``after`` are full rows; ``changed`` names the columns a partial update
    touched (empty: the whole row)."""

    kind: str  # insert | update | delete | truncate | add_column
    table: str
    key: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    txid: str
    lsn: int
    seq: int
    commit_time: dt.datetime
    changed: frozenset[str] = frozenset()
    column: str | None = None
    column_type: str | None = None


@dataclass(frozen=True)
class Transaction:
    """Changes committed together at one commit LSN."""

    txid: str
    lsn: int
    commit_time: dt.datetime
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Workload:
    """Tables (final definitions) and transactions in commit order."""

    tables: dict[str, TableDef]
    initial_tables: dict[str, TableDef]
    transactions: tuple[Transaction, ...]
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def changes(self, transactions: slice | None = None) -> Iterator[Change]:
        """Changes in commit order (optionally of a slice of the transactions)."""
        for tx in self.transactions[transactions or slice(None)]:
            yield from tx.changes


_TEMPLATES: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
    (
        "accounts",
        ("id",),
        {
            "id": "bigint",
            "name": "string",
            "balance": "decimal(10,2)",
            "active": "boolean",
            "opened": "timestamp",
        },
    ),
    (
        "orders",
        ("region", "order_no"),
        {
            "region": "string",
            "order_no": "int",
            "amount": "decimal(10,2)",
            "placed": "timestamp_ntz",
            "note": "string",
            "ship_date": "date",
        },
    ),
    (
        "events",
        ("id",),
        {"id": "bigint", "payload": "json", "score": "double", "blob": "binary"},
    ),
]
_ADDED_TYPES = ("string", "bigint", "decimal(10,2)")
_WORDS = ("alpha", "beta", "gamma", "delta", "Zoë", "naïve", "東京", "o'brien", 'say "hi"', "")


def _value(rng: random.Random, t: str) -> Any:
    if rng.random() < 0.08:
        return None
    if t == "bigint":
        return rng.randrange(-(10**12), 10**12)
    if t == "int":
        return rng.randrange(-(2**31), 2**31)
    if t.startswith("decimal"):
        return Decimal(rng.randrange(-(10**8), 10**8)).scaleb(-2)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "string":
        return f"{rng.choice(_WORDS)}-{rng.randrange(1000)}"
    if t == "double":
        return round(rng.uniform(-1e6, 1e6), 3)
    if t == "timestamp":
        return dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
            microseconds=rng.randrange(10**14)
        )
    if t == "timestamp_ntz":
        return dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**14))
    if t == "date":
        return dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(3000))
    if t == "json":
        return orjson.dumps({"k": rng.randrange(100), "tags": [rng.choice(_WORDS)]}).decode()
    if t == "binary":
        return base64.b64decode(base64.b64encode(rng.randbytes(rng.randrange(0, 12))))
    raise ValueError(f"no generator for {t}")


def _key_value(rng: random.Random, t: str, n: int) -> Any:
    if t == "string":
        return rng.choice(("EU", "US", "APAC", "LATAM"))
    return n


class _State:
    def __init__(self, rng: random.Random, defs: dict[str, TableDef]) -> None:
        self.rng = rng
        self.defs = dict(defs)
        self.rows: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in defs}
        self.deleted: dict[str, list[tuple]] = {t: [] for t in defs}
        self.counter = 0
        self.added = 0

    def key_of(self, table: str, row: dict[str, Any]) -> tuple:
        return tuple(row[k] for k in self.defs[table].key)

    def new_key(self, table: str) -> dict[str, Any]:
        d = self.defs[table]
        while True:
            self.counter += 1
            key = {k: _key_value(self.rng, d.columns[k], self.counter) for k in d.key}
            kt = tuple(key[k] for k in d.key)
            if kt not in self.rows[table]:
                return key

    def new_row(self, table: str, key: dict[str, Any]) -> dict[str, Any]:
        d = self.defs[table]
        row = {c: _value(self.rng, t) for c, t in d.columns.items() if c not in d.key}
        return {**key, **row}


def generate(
    seed: int,
    *,
    tables: int = 3,
    transactions: int = 50,
    max_changes_per_tx: int = 4,
    features: frozenset[str] | None = None,
) -> Workload:
    """A reproducible workload: same seed and arguments → same workload."""
    rng = random.Random(seed)
    feats = ALL_FEATURES if features is None else features
    defs: dict[str, TableDef] = {}
    for i in range(tables):
        name, key, cols = _TEMPLATES[i % len(_TEMPLATES)]
        if i >= len(_TEMPLATES):
            name = f"{name}{i // len(_TEMPLATES)}"
        defs[name] = TableDef(name=name, key=key, columns=dict(cols))
    initial = dict(defs)
    st = _State(rng, defs)
    lsn = 0x1000
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    txs: list[Transaction] = []
    for n in range(transactions):
        lsn += rng.randrange(1, 5000)
        txid = f"tx-{seed}-{n}"
        commit = t0 + dt.timedelta(seconds=n, microseconds=rng.randrange(10**6))
        changes: list[Change] = []
        for seq in range(1, rng.randrange(1, max_changes_per_tx + 1) + 1):
            table = rng.choice(sorted(st.defs))
            ch = _one_change(st, feats, table, txid, lsn, seq, commit)
            if ch is not None:
                changes.append(ch)
        if changes:
            txs.append(Transaction(txid, lsn, commit, tuple(changes)))
    return Workload(
        tables=dict(st.defs), initial_tables=initial, transactions=tuple(txs), seed=seed
    )


def _one_change(
    st: _State,
    feats: frozenset[str],
    table: str,
    txid: str,
    lsn: int,
    seq: int,
    commit: dt.datetime,
) -> Change | None:
    rng = st.rng
    rows = st.rows[table]
    d = st.defs[table]
    coords: dict[str, Any] = {"txid": txid, "lsn": lsn, "seq": seq, "commit_time": commit}
    roll = rng.random()
    choices = [
        ("insert", 0.34),
        ("update", 0.24),
        ("partial", 0.1),
        ("delete", 0.1),
        ("reinsert", 0.08),
        ("pk_change", 0.06),
        ("truncate", 0.015),
        ("add_column", 0.03),
    ]
    total = sum(w for k, w in choices if k in feats)
    acc = 0.0
    kind = "insert"
    for k, w in choices:
        if k not in feats:
            continue
        acc += w / total
        if roll <= acc:
            kind = k
            break
    if kind in ("update", "partial", "delete", "pk_change") and not rows:
        kind = "insert" if "insert" in feats else kind
        if not rows and kind != "insert":
            return None
    if kind == "reinsert" and not st.deleted[table]:
        kind = "insert"
    if kind == "insert" and "insert" not in feats:
        return None

    if kind in ("insert", "reinsert"):
        if kind == "reinsert":
            kt = st.deleted[table].pop(rng.randrange(len(st.deleted[table])))
            if kt in rows:
                return None
            key = dict(zip(d.key, kt, strict=True))
        else:
            key = st.new_key(table)
        row = st.new_row(table, key)
        rows[st.key_of(table, row)] = row
        return Change("insert", table, key, None, row, **coords)
    if kind in ("update", "partial"):
        kt = rng.choice(sorted(rows, key=repr))
        old = rows[kt]
        fresh = st.new_row(table, {k: old[k] for k in d.key})
        non_key = [c for c in d.columns if c not in d.key]
        changed: frozenset[str] = frozenset()
        if kind == "partial" and len(non_key) > 1:
            pick = rng.sample(non_key, rng.randrange(1, len(non_key)))
            changed = frozenset(pick)
            new = {**old, **{c: fresh[c] for c in pick}}
        else:
            new = fresh
        rows[kt] = new
        return Change(
            "update", table, {k: new[k] for k in d.key}, old, new, changed=changed, **coords
        )
    if kind == "delete":
        kt = rng.choice(sorted(rows, key=repr))
        old = rows.pop(kt)
        st.deleted[table].append(kt)
        return Change("delete", table, {k: old[k] for k in d.key}, old, None, **coords)
    if kind == "pk_change":
        kt = rng.choice(sorted(rows, key=repr))
        old = rows.pop(kt)
        key = st.new_key(table)
        new = {**old, **key}
        rows[st.key_of(table, new)] = new
        st.deleted[table].append(kt)
        return Change("update", table, key, old, new, **coords)
    if kind == "truncate":
        st.deleted[table].extend(rows)
        rows.clear()
        return Change("truncate", table, {}, None, None, **coords)
    # add_column
    st.added += 1
    col = f"extra{st.added}"
    ctype = rng.choice(_ADDED_TYPES)
    st.defs[table] = TableDef(d.name, d.key, {**d.columns, col: ctype}, d.schema)
    for kt, row in rows.items():
        rows[kt] = {**row, col: None}
    return Change("add_column", table, {}, None, None, column=col, column_type=ctype, **coords)
