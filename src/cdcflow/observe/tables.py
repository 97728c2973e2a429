"""A pipeline's tables as the read commands list them, read by pyiceberg or by Spark.

:class:`Results` is what ``cdcflow tables``, ``show``, ``history``, ``dead-letters``,
``watermarks`` and ``status`` read: the replicas and their rows (sorted by key), the batch
history, maintenance actions, dead letters and resolved watermarks, as :class:`Listing` rows
of the values PySpark would give. :class:`~cdcflow.observe.tables_iceberg.IcebergResults`
reads with pyiceberg (no JVM) and :class:`~cdcflow.observe.tables_spark.SparkResults` with
Spark (where pyiceberg cannot open the catalog); both give the same rows, in the same order.
Reading never creates a namespace or a table: a missing namespace is
``NAMESPACE_NOT_FOUND`` naming those that exist, a missing internal table reads as ``None``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdcflow.errors import CdcflowError, did_you_mean
from cdcflow.iceberg.layouts import (
    KEY_PROPERTY,
    KEYLESS_PROPERTY,
    VALIDITY_COLUMNS,
)
from cdcflow.observe.status import History, unix
from cdcflow.observe.values import ANY, Shape
from cdcflow.pipeline.report import TableFiles
from cdcflow.spark.errors import table_not_found

if TYPE_CHECKING:
    from cdcflow.config import PipelineConfig
    from cdcflow.pipeline.replay import DeadLetterFilter

#: The maintenance table (:mod:`cdcflow.iceberg.maintain`), named here without importing it.
MAINTENANCE = "maintenance"
#: Internal tables live in ``<namespace>__cdcflow``.
INTERNAL = "__cdcflow"

#: A sort: (column, ascending); a dotted name is a struct's field. Nulls go where Spark's
#: ``ORDER BY`` puts them: first ascending, last descending (before pyarrow 25, where the
#: first column's direction says, for every column).
Order = Sequence[tuple[str, bool]]
BATCH_ORDER: Order = (("started_at", False), ("batch_id", False))
#: Actions of one round share their time: then by table, a rewrite before an expiry.
MAINTENANCE_ORDER: Order = (
    ("at", False),
    ("batch_id", False),
    ("namespace", True),
    ("table", True),
    ("action", False),
)
DEAD_LETTER_ORDER: Order = (
    ("first_seen", True),
    ("batch_id", True),
    ("origin", True),
    ("offset", True),
    ("item", True),
)
#: The batch history's columns the status reads (``source_times`` is missing from tables
#: written before it was recorded).
HISTORY_COLUMNS = (
    "pipeline",
    "source",
    "batch_id",
    "finished_at",
    "seconds",
    "events",
    "tables",
    "source_times",
)
#: The columns a dead-letter listing shows, after ``replayed_at`` when asked for.
DEAD_LETTER_COLUMNS = (
    "source",
    "batch",
    "first_seen",
    "origin",
    "line",
    "offset",
    "item",
    "dialect",
    "table",
    "error_code",
    "error_message",
    "raw",
)


class NamespaceNotFound(CdcflowError):
    """The pipeline's namespace is not in the catalog."""

    code = "NAMESPACE_NOT_FOUND"


@dataclass(frozen=True)
class Listing:
    """Rows to print: column names, rows of the values PySpark gives, each column's shape;
    ``total``: the rows there are in all, when the listing is cut."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    shapes: list[Shape] = field(default_factory=list)
    total: int | None = None

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as column → value."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


@dataclass(frozen=True)
class Watermark:
    """How far one scope of a source is resolved: its oldest partition's point."""

    source: str
    dialect: str
    scope: str
    partitions: int
    resolved_to: dt.datetime | None


def sort_keys(properties: dict[str, str], columns: Iterable[str]) -> list[tuple[str, bool]]:
    """How ``show`` orders a replica: by its key columns, then a history table by the
    version's start, a changelog by sequence; a table without a key by its rows' images, the
    copies of one image together."""
    names = list(columns)
    if properties.get(KEYLESS_PROPERTY) == "true" and "_cdc" in names:
        return [("_cdc.image", True), ("_cdc.copy", True)]
    keys = [k for k in properties.get(KEY_PROPERTY, "").split(",") if k and k in names]
    if VALIDITY_COLUMNS[0] in names:
        keys.append(VALIDITY_COLUMNS[0])
    elif "_cdc" in names and (not keys or "after" in names):
        keys.append("_cdc.sequence")
    return [(k, True) for k in keys]


def namespace_missing(cfg: PipelineConfig, found: Iterable[str]) -> NamespaceNotFound:
    """``NAMESPACE_NOT_FOUND`` for the pipeline's namespace, naming the pipelines' namespaces
    the catalog holds."""
    names = sorted(n for n in found if not n.endswith(INTERNAL))
    where = f"catalog {cfg.catalog.name!r}"
    listed = ", ".join(names) if names else "none: no pipeline has run with it"
    return NamespaceNotFound(
        f"no namespace {cfg.namespace!r} in {where}{did_you_mean(cfg.namespace, names)}",
        hint=f"namespaces of {where}: {listed} (the configuration's namespace: names it)",
    )


class Results:
    """A pipeline's tables, read one way or another (see the module's text)."""

    #: how it reads: ``pyiceberg`` or ``spark``
    via = ""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.namespace = cfg.namespace
        self.internal = cfg.namespace + INTERNAL
        self.where = f"{cfg.catalog.name}.{cfg.namespace}"

    def replica_names(self) -> list[str]:
        """The pipeline's replica (and changelog) tables, sorted."""
        raise NotImplementedError

    def files(self, names: Sequence[str]) -> dict[str, TableFiles]:
        """Each table's figures from its current snapshot (tables without one left out)."""
        raise NotImplementedError

    def row_counts(self, names: Sequence[str]) -> dict[str, int]:
        """Rows of each table: from its current snapshot's summary where that is exact (no
        delete files), else counted."""
        raise NotImplementedError

    def show(self, name: str, limit: int) -> Listing:
        """The first ``limit`` rows of a replica in key order, with the number of rows in
        all; ``TABLE_NOT_FOUND`` naming the replicas when there is no such table."""
        raise NotImplementedError

    def batches(self, limit: int) -> Listing | None:
        """The newest batches of the history, newest first (every column)."""
        raise NotImplementedError

    def maintenance(self, limit: int | None = None) -> Listing | None:
        """Maintenance actions, newest first."""
        raise NotImplementedError

    def dead_letters(
        self,
        chosen: DeadLetterFilter,
        source_ids: Sequence[str] | None,
        limit: int,
        cut: int | None,
    ) -> Listing | None:
        """The chosen dead letters, oldest first (:data:`DEAD_LETTER_COLUMNS`; ``raw`` cut to
        ``cut`` bytes unless ``None``; a Kafka record's origin with ``@<offset>``)."""
        raise NotImplementedError

    def open_dead_letters(self) -> dict[str, int]:
        """Dead letters not replayed, by table (``""``: without one)."""
        raise NotImplementedError

    def table_batches(self) -> History:
        """The batch history as the status needs it (:class:`~cdcflow.observe.status.History`)."""
        found = self._history_columns()
        history = History()
        for r in found.dicts() if found else []:
            times = {k: unix(v) for k, v in (r.get("source_times") or {}).items()}
            history.add(
                str(r.get("source") or r["pipeline"]),
                int(r["batch_id"]),
                unix(r["finished_at"]),
                float(r["seconds"] or 0.0),
                int(r["events"] or 0),
                (r.get("tables") or {}).keys(),
                times,
            )
        history.batches.sort(key=lambda b: (b.at, b.source, b.batch_id))
        return history

    def _history_columns(self) -> Listing | None:
        """The batch history's columns :meth:`table_batches` reads, every batch."""
        raise NotImplementedError

    def watermarks(self) -> list[Watermark] | None:
        """Per source, dialect and scope, how far it is resolved, sorted."""
        raise NotImplementedError

    def _check_name(self, name: str) -> None:
        names = self.replica_names()
        if name not in names:
            raise table_not_found(name, names, self.where)


# ---------------------------------------------------------------------------- pyiceberg


def dead_letter_listing(found: Listing, replayed: bool, cut: int | None) -> Listing:
    """The dead-letter table's rows as ``cdcflow dead-letters`` lists them."""
    columns = [*DEAD_LETTER_COLUMNS, *(["replayed_at"] if replayed else [])]
    rows = []
    for r in found.dicts():
        origin = r["origin"]
        if origin is not None and origin.startswith("kafka://"):
            origin = None if r["offset"] is None else f"{origin}@{r['offset']}"
        raw = r["raw"]
        if raw is not None and cut is not None:
            raw = bytes(raw[:cut])
        row = {**r, "batch": r["batch_id"], "origin": origin, "raw": raw}
        rows.append(tuple(row[c] for c in columns))
    return Listing(columns, rows, [ANY] * len(columns))


def group_watermarks(found: Listing) -> list[Watermark]:
    """The watermark table's rows (one per partition) grouped per source, dialect and scope."""
    groups: dict[tuple[str, str, str], list[dt.datetime | None]] = {}
    for r in found.dicts():
        key = (r.get("src") or "", r["dialect"], r["scope"])
        groups.setdefault(key, []).append(r["resolved_at"])
    out = []
    for (source, dialect, scope), points in sorted(groups.items()):
        known = [p for p in points if p is not None]
        out.append(Watermark(source, dialect, scope, len(points), min(known) if known else None))
    return out
