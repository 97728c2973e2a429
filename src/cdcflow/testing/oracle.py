"""The oracle: logical changes applied in commit order, in memory.

Its result is what every replica must equal: per table, key tuple → full row over
the table's final columns (columns added later are ``None`` in rows not written since).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cdcflow.testing.workload import Change, Workload

Tables = dict[str, dict[tuple, dict[str, Any]]]


def apply(source: Workload | Iterable[Change], tables: dict[str, Any] | None = None) -> Tables:
    """Apply changes in order; raises ``AssertionError`` on an impossible change."""
    if isinstance(source, Workload):
        defs = source.tables
        changes: Iterable[Change] = source.changes()
    else:
        if tables is None:
            raise ValueError("table definitions are needed when applying a list of changes")
        defs = tables
        changes = source
    state: Tables = {name: {} for name in defs}
    for ch in changes:
        rows = state.setdefault(ch.table, {})
        d = defs[ch.table]
        if ch.kind == "insert":
            kt = tuple(ch.key[k] for k in d.key)
            assert kt not in rows, f"insert of existing key {kt} in {ch.table}"
            assert ch.after is not None
            rows[kt] = dict(ch.after)
        elif ch.kind == "update":
            assert ch.before is not None and ch.after is not None
            old = tuple(ch.before[k] for k in d.key)
            new = tuple(ch.key[k] for k in d.key)
            assert old in rows, f"update of missing key {old} in {ch.table}"
            del rows[old]
            assert new not in rows, f"key change onto existing key {new} in {ch.table}"
            rows[new] = dict(ch.after)
        elif ch.kind == "delete":
            kt = tuple(ch.key[k] for k in d.key)
            assert kt in rows, f"delete of missing key {kt} in {ch.table}"
            del rows[kt]
        elif ch.kind == "truncate":
            rows.clear()
        elif ch.kind == "add_column":
            pass
        else:
            raise AssertionError(f"unknown change kind {ch.kind!r}")
    for name, rows in state.items():
        cols = list(defs[name].columns)
        for kt, row in rows.items():
            rows[kt] = {c: row.get(c) for c in cols}
    return state


def rows(table_result: dict[tuple, dict[str, Any]]) -> list[dict[str, Any]]:
    """A table's rows sorted by key."""
    return [table_result[k] for k in sorted(table_result, key=repr)]
