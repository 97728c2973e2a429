"""What a planned batch writes, and in which order: plain data from the tables' plans and the
batch's counts (no Spark).

Two decisions live here, each a pure function the Iceberg layer only carries out:

* :func:`table_ddl`: what one table's DDL is in this batch — created (with which columns and
  properties), altered (columns added or widened, properties set) or left alone;
* :func:`batch_plan`: once the batch is staged and counted, the :class:`BatchPlan` — per
  table an ordered list of :class:`Step` (a truncate, the guarded ``MERGE`` or, into a
  replica the batch creates, an append, the truncate watermark after the rows it removes, a
  changelog append, an scd2 table's versions, a keyless table's copies), the internal
  tables' steps (the history log, the keyless tables' log, tombstones, watermarks) and which
  step waits for which (an scd2 table's versions after the history log holds the batch, a
  keyless table's copies after its log does).

:class:`cdcflow.pipeline.writes.BatchWrites` executes a plan: a table's steps in their order,
``parallel_tables`` tables at a time, each statement under the commit ledger; the statements'
text comes from :mod:`cdcflow.engine.stage` and :mod:`cdcflow.engine.history`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cdcflow.engine import multiset
from cdcflow.engine.history import create_history_columns
from cdcflow.engine.plan import TablePlan
from cdcflow.engine.statements import create_changelog_columns, create_replica_columns
from cdcflow.engine.stats import TableStats
from cdcflow.iceberg.layouts import (
    CDC_STRUCT,
    CHANGELOG_STRUCT,
    HISTORY_STRUCT,
    KEY_PROPERTY,
    MULTISET_STRUCT,
    TRUNCATE_PROPERTY,
)

StepKind = Literal[
    "truncate",
    "merge",
    "insert",
    "mark_truncate",
    "changelog",
    "versions",
    "multiset",
    "log",
    "multiset_log",
    "tombstones",
    "watermarks",
]


@dataclass(frozen=True)
class Step:
    """One write of the batch: ``kind`` on table ``target`` (a table plan's target; empty for
    an internal table), once every step named in ``after`` has committed."""

    kind: StepKind
    target: str = ""
    after: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The step's name, unique in its batch (``merge:shop.items``, ``log``)."""
        return f"{self.kind}:{self.target}" if self.target else self.kind


@dataclass(frozen=True)
class BatchPlan:
    """The writes of one staged batch: each table's steps in the order they run, and the
    internal tables' steps (the history log, the keyless tables' log, tombstones, watermarks,
    in that order)."""

    tables: Mapping[str, tuple[Step, ...]] = field(default_factory=dict)
    internal: tuple[Step, ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step: the internal ones first, then each table's in turn."""
        return (*self.internal, *(s for steps in self.tables.values() for s in steps))

    def lines(self) -> list[str]:
        """The plan as text, a step per line (``merge:shop.items after log``)."""
        return [s.name + (f" after {', '.join(s.after)}" if s.after else "") for s in self.steps]


@dataclass(frozen=True)
class TableDdl:
    """One table's DDL in this batch: created with ``columns`` (the column list's SQL) when
    they are given, else altered — ``add`` and ``widen`` columns (name → canonical type) and
    set ``properties``; ``prefixes``: where the columns sit (a changelog's in its ``before``
    and ``after`` structs)."""

    target: str
    name: str
    columns: str | None = None
    add: Mapping[str, str] = field(default_factory=dict)
    widen: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    prefixes: tuple[str, ...] = ("",)

    @property
    def creates(self) -> bool:
        return self.columns is not None


def table_ddl(plan: TablePlan) -> TableDdl | None:
    """The DDL one table's plan asks for before its rows are written, ``None`` when it asks
    for none. The truncate watermark is not part of it: it is set after the rows it removes
    are gone (a ``mark_truncate`` step)."""
    schema = plan.schema
    props = {k: v for k, v in plan.properties.items() if k != TRUNCATE_PROPERTY}
    add, widen = dict(schema.add), dict(schema.widen)
    t, name = plan.target, plan.name
    if plan.mode == "append":
        if not plan.exists:
            columns = create_changelog_columns(plan, CHANGELOG_STRUCT)
            return TableDdl(t, name, columns, properties=props)
        if add or widen or props:
            prefixes = ("before.", "after.")
            return TableDdl(t, name, None, add, widen, props, prefixes)
        return None
    if plan.multiset:
        if not plan.exists:
            if not plan.writes_rows:
                return None
            return TableDdl(
                t, name, multiset.create_columns(plan, MULTISET_STRUCT), properties=props
            )
        if add or widen or props:
            return TableDdl(t, name, None, add, widen, props)
        return None
    if plan.keys is None:
        # rows cannot be written (no keys known): the columns of a table that has them still
        # follow a batch of DDL only
        if plan.exists and not plan.meta.row_events and (add or widen):
            return TableDdl(t, name, None, add, widen)
        return None
    if not plan.exists:
        if not plan.writes_rows:
            return None
        props[KEY_PROPERTY] = ",".join(plan.keys)
        if plan.mode == "scd2":
            return TableDdl(t, name, create_history_columns(plan, HISTORY_STRUCT), properties=props)
        return TableDdl(t, name, create_replica_columns(plan, CDC_STRUCT), properties=props)
    if add or widen or props:
        return TableDdl(t, name, None, add, widen, props)
    return None


def table_steps(
    plan: TablePlan, stats: TableStats, logged: bool, logged_multiset: bool = False
) -> tuple[Step, ...]:
    """One table's steps, in order (``stats``: its counts in the staged batch; ``logged``:
    the batch writes the history log, which an scd2 table's versions are computed from;
    ``logged_multiset``: it writes the keyless tables' log, which their copies are counted
    from)."""
    t = plan.target
    if plan.mode == "scd2":
        if plan.keys is not None and stats.live and logged:
            return (Step("versions", t, after=("log",)),)
        return ()
    if plan.mode == "append":
        rejected = sum((stats.rejected or {}).values())
        return (Step("changelog", t),) if plan.meta.events > rejected else ()
    steps: list[Step] = []
    if plan.multiset:
        if stats.writes or plan.truncate is not None:
            # the copies are counted from the log: after it holds the batch's events
            steps.append(Step("multiset", t, after=("multiset_log",) if logged_multiset else ()))
        if plan.truncate is not None:
            steps.append(Step("mark_truncate", t))
        return tuple(steps)
    truncate = plan.truncate if plan.keys is not None else None
    if truncate is not None and not stats.live:
        steps.append(Step("truncate", t))
    if plan.keys is not None and stats.live:
        # a TRUNCATE with changes after it: one commit (the MERGE deletes the older rows); a
        # replica the batch creates holds no row, so its rows are appended (a replay finds
        # the table existing and merges)
        steps.append(Step("merge" if plan.exists else "insert", t))
    if truncate is not None:
        # the watermark after the rows: a crash before it repeats an idempotent statement
        steps.append(Step("mark_truncate", t))
    return tuple(steps)


def batch_plan(
    plans: Sequence[TablePlan],
    stats: Mapping[str, TableStats],
    *,
    logged: bool,
    watermarks: bool,
) -> BatchPlan:
    """The writes of a staged batch (``logged``: it has winning events of scd2 tables for
    the history log; ``watermarks``: it carries ``RESOLVED`` watermarks to record)."""
    # the keyless tables' log: the events they apply for the first time
    counted = any(stats.get(p.target, TableStats()).live for p in plans if p.multiset)
    tables = {
        p.target: table_steps(p, stats.get(p.target, TableStats()), logged, counted) for p in plans
    }
    internal: list[Step] = []
    if logged:
        internal.append(Step("log"))
    if counted:
        internal.append(Step("multiset_log"))
    # a hard delete leaves a tombstone; a soft-deleted row keeps its sequence in the replica
    hard = {
        p.target
        for p in plans
        if p.mode == "merge" and p.keys and p.writes_rows and not p.soft_deletes
    }
    if any(s.deletes for t, s in stats.items() if t in hard):
        internal.append(Step("tombstones"))
    if watermarks:
        internal.append(Step("watermarks"))
    return BatchPlan(tables, tuple(internal))
