"""A batch's counts per table — events, duplicates and conflicts, winners, events buried by
tombstones or a ``TRUNCATE``, deletes, writes and rejections by code — from one small aggregate
over the staged rows the batch builds anyway (no Spark job of its own)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdcflow.engine import multiset
from cdcflow.engine.encoding import ROW_OPS
from cdcflow.engine.plan import BatchTables
from cdcflow.spark.sql import lit, string_array, string_map


@dataclass(frozen=True)
class TableStats:
    """Counts of one table's events in the batch, from the stats aggregate."""

    events: int = 0
    conflicts: int = 0
    winners: int = 0
    buried: int = 0
    deletes: int = 0
    writes: int = 0
    live: int = 0
    rejected: Mapping[str, int] | None = None
    #: keyless tables: events replacing a different copy logged by an earlier batch
    replaced: int = 0

    @property
    def duplicates(self) -> int:
        """Exact copies of events (redeliveries)."""
        return self.events - self.winners - self.conflicts


def stats_sql(
    tables: BatchTables,
    validated: str,
    staged: str | None,
    winners: str | None,
    multiset_staged: str | None = None,
) -> str | None:
    """Counts of every table, from the staged rows (``staged``: the merge tables',
    ``winners``: the scd2 tables', ``multiset_staged``: the keyless tables', where staged)
    in one small aggregate: events, conflicts, winners, events buried by tombstones or a
    ``TRUNCATE``, deletes and writes, and rejections by code (read by :func:`stats_of`).
    Rejections of tables that are not written per key (changelogs, tables whose keys are
    unknown, keyless tables) are counted over the batch, for those without keys only when
    a rule other than ``KEY_UNKNOWN`` applies to them. ``None`` when there is nothing to
    count."""
    parts = []
    if staged is not None:
        # buried: every event of a key whose newest lost to its tombstone, a delete that
        # is its tombstone's own replay
        parts.append(
            "SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, "
            "sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, "
            "sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) "
            "+ count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, "
            "count_if(_live AND NOT _exists) AS deletes, "
            "count_if(_live AND (_exists OR _soft)) AS writes, "
            f"count_if(_live) AS live, 0L AS replaced FROM {staged} GROUP BY 1, 2"
        )
    marked = [p for p in [*tables.merge, *tables.multiset] if p.watermark]
    if marked:
        # events at or below a TRUNCATE the table already reflects
        marks = string_map({p.target: lit(p.watermark) for p in marked})
        parts.append(
            "SELECT _target, CAST(NULL AS string) AS code, 0L AS n, 0L AS conflicts, "
            "0L AS winners, count(*) AS buried, 0L AS deletes, 0L AS writes, 0L AS live, "
            f"0L AS replaced FROM {validated} WHERE _reject IS NULL AND operation IN "
            f"{ROW_OPS} AND array_contains({string_array(p.target for p in marked)}, "
            f"_target) AND NOT coalesce(sequence > element_at({marks}, _target), false) "
            "GROUP BY 1"
        )
    if winners is not None:
        # scd2: no event is stale (late ones become history); deletes and writes are the
        # winning events of each kind
        parts.append(
            "SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, "
            "sum(_n_in) AS n, sum(_nfp - 1) AS conflicts, count(*) AS winners, 0L AS buried, "
            "count_if(_op IN ('DELETE', 'TRUNCATE')) AS deletes, "
            "count_if(_op NOT IN ('DELETE', 'TRUNCATE')) AS writes, count(*) AS live, "
            f"0L AS replaced FROM {winners} GROUP BY 1, 2"
        )
    if multiset_staged is not None:
        parts.append(multiset.stats_sql(multiset_staged))
    merged = {p.target for p in tables.keyed}
    others = [p for t, p in tables.plans.items() if t not in merged]
    if any(p.bad_shapes or p.schema.conflicts or p.foreign or p.multiset for p in others):
        parts.append(
            "SELECT _target, _reject AS code, count(*) AS n, 0L AS conflicts, 0L AS winners, "
            "0L AS buried, 0L AS deletes, 0L AS writes, 0L AS live, 0L AS replaced "
            f"FROM {validated} WHERE _reject IS NOT NULL AND NOT array_contains("
            f"{string_array(sorted(merged))}, _target) GROUP BY 1, 2"
        )
    return " UNION ALL ".join(parts) if parts else None


def stats_of(tables: BatchTables, rows: Iterable[Mapping[str, Any]]) -> dict[str, TableStats]:
    """The counts of every table from the rows of :func:`stats_sql`."""
    merged = {p.target for p in tables.keyed}
    others = [p for t, p in tables.plans.items() if t not in merged]
    out: dict[str, TableStats] = {}
    rejected: dict[str, dict[str, int]] = {}
    counted = set()
    for r in rows:
        if r["code"] is not None:
            rejected.setdefault(r["_target"], {})[r["code"]] = int(r["n"])
            counted.add(r["_target"])
            continue
        base = out.get(r["_target"], TableStats())
        out[r["_target"]] = TableStats(
            events=base.events + int(r["n"]),
            conflicts=base.conflicts + int(r["conflicts"]),
            winners=base.winners + int(r["winners"]),
            buried=base.buried + int(r["buried"]),
            deletes=base.deletes + int(r["deletes"]),
            writes=base.writes + int(r["writes"]),
            live=base.live + int(r["live"]),
            replaced=base.replaced + int(r["replaced"]),
        )
    for p in others:
        if p.key_problem and p.meta.keyed_events and p.target not in counted:
            rejected.setdefault(p.target, {})[p.key_code] = p.meta.keyed_events
    for target, codes in rejected.items():
        out[target] = dataclasses.replace(out.get(target, TableStats()), rejected=codes)
    return out
