"""The oracle: logical changes applied in commit order, in memory.

Its result is what every replica must equal: per table, key tuple → full row over
the table's final columns (columns added later are ``None`` in rows not written since).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cdcflow.simulation.workload import Change, Workload

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


#: Extra fields of a version in :func:`history`: its ordinal among its key's versions, and
#: what ends it (``next``: the key's next version; ``delete``: a delete, a truncate or a key
#: change; ``None``: it is the current version).
VERSION, ENDS = "__VERSION", "__ENDS"


def history(
    source: Workload, tracked: dict[str, Iterable[str]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The versions an ``scd2`` table must hold, per table: the changes applied in commit
    order, a version per change that alters a tracked column (``tracked``: per table, the
    columns whose changes open a version; default all), a delete, truncate or key change
    closing the open version."""
    defs = source.tables
    open_: dict[str, dict[tuple, dict[str, Any]]] = {name: {} for name in defs}
    done: dict[str, list[dict[str, Any]]] = {name: [] for name in defs}
    counts: dict[str, dict[tuple, int]] = {name: {} for name in defs}

    def close(table: str, kt: tuple, how: str | None) -> None:
        version = open_[table].pop(kt)
        done[table].append({**version, ENDS: how})

    def write(table: str, kt: tuple, row: dict[str, Any]) -> None:
        cols = tracked.get(table) if tracked else None
        current = open_[table].get(kt)
        if current is not None:
            watch = list(cols) if cols is not None else [c for c in row if c not in (VERSION,)]
            if all(current.get(c) == row.get(c) for c in watch):
                current.update(row)  # an untracked change: the version changes in place
                return
            close(table, kt, "next")
        n = counts[table].get(kt, 0)
        counts[table][kt] = n + 1
        open_[table][kt] = {**row, VERSION: n}

    for ch in source.changes():
        d = defs[ch.table]
        if ch.kind in ("insert", "update"):
            assert ch.after is not None
            new = tuple(ch.key[k] for k in d.key)
            if ch.kind == "update":
                assert ch.before is not None
                old = tuple(ch.before[k] for k in d.key)
                if old != new:
                    close(ch.table, old, "delete")
            write(ch.table, new, dict(ch.after))
        elif ch.kind == "delete":
            close(ch.table, tuple(ch.key[k] for k in d.key), "delete")
        elif ch.kind == "truncate":
            for kt in list(open_[ch.table]):
                close(ch.table, kt, "delete")
    out: dict[str, list[dict[str, Any]]] = {}
    for name in defs:
        cols = list(defs[name].columns)
        versions = done[name] + [{**v, ENDS: None} for v in open_[name].values()]
        out[name] = [
            {**{c: v.get(c) for c in cols}, VERSION: v[VERSION], ENDS: v[ENDS]} for v in versions
        ]
    return out
