"""A pipeline's tables as the read commands list them, read by pyiceberg or by Spark.

:class:`Results` is what ``cdcflow tables``, ``show``, ``history``, ``dead-letters``,
``watermarks`` and ``status`` read: the replicas and their rows (sorted by key), the batch
history, maintenance actions, dead letters and resolved watermarks, as :class:`Listing` rows
of the values PySpark would give. :class:`IcebergResults` reads with pyiceberg (no JVM) and
:class:`SparkResults` with Spark (where pyiceberg cannot open the catalog); both give the same
rows, in the same order. Reading never creates a namespace or a table: a missing namespace is
``NAMESPACE_NOT_FOUND`` naming those that exist, a missing internal table reads as ``None``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdcflow.errors import CdcflowError, did_you_mean
from cdcflow.iceberg.layouts import (
    BATCHES,
    DEAD_LETTERS,
    KEY_PROPERTY,
    KEYLESS_PROPERTY,
    VALIDITY_COLUMNS,
    WATERMARKS,
)
from cdcflow.observe.status import History, unix
from cdcflow.observe.values import ANY, Shape, arrow_shape, python_value, spark_shape
from cdcflow.pipeline.report import TableFiles
from cdcflow.spark.errors import table_not_found

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog as IcebergCatalog
    from pyiceberg.table import Table as IcebergTable
    from pyspark.sql import DataFrame, SparkSession

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


def _sorted(table: pa.Table, order: Order) -> pa.Table:
    """``table`` sorted as Spark's ``ORDER BY`` would (see :data:`Order`); a dotted column is
    a struct's field."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not order or table.num_rows < 2:
        return table
    keyed = table
    keys = []
    for i, (name, ascending) in enumerate(order):
        column = name
        if "." in name:
            top, inner = name.split(".", 1)
            column = f"__sort{i}"
            keyed = keyed.append_column(column, pc.struct_field(keyed[top], inner))
        keys.append((column, "ascending" if ascending else "descending"))
    if int(pa.__version__.split(".")[0]) >= 25:  # nulls placed per key, as Spark does
        placed = [(c, o, "at_start" if o == "ascending" else "at_end") for c, o in keys]
        return table.take(pc.sort_indices(keyed, sort_keys=placed))
    placement = "at_start" if order[0][1] else "at_end"
    return table.take(pc.sort_indices(keyed, sort_keys=keys, null_placement=placement))


def _top(
    parts: Iterable[pa.RecordBatch | pa.Table], order: Order, limit: int | None
) -> tuple[pa.Table, int]:
    """The first ``limit`` rows (all: ``None``) of a stream of batches in ``order``, holding
    no more than a batch and ``limit`` rows at a time; and the rows seen."""
    import pyarrow as pa

    kept: list[pa.Table] = []
    seen = 0
    schema = None
    for part in parts:
        schema = part.schema
        seen += part.num_rows
        if not part.num_rows:
            continue
        kept.append(part if isinstance(part, pa.Table) else pa.Table.from_batches([part]))
        if limit is not None:
            both = pa.concat_tables(kept)
            kept = [(_sorted(both, order) if order else both).slice(0, limit)]
    if not kept:
        empty = pa.Table.from_batches([], schema=schema) if schema is not None else pa.table({})
        return empty, seen
    found = pa.concat_tables(kept)
    return (_sorted(found, order) if limit is None else found), seen


def _listing(table: pa.Table, total: int | None = None) -> Listing:
    shapes = [arrow_shape(f.type) for f in table.schema]
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = [
        tuple(python_value(col[r], shape) for col, shape in zip(columns, shapes, strict=True))
        for r in range(table.num_rows)
    ]
    return Listing(list(table.column_names), rows, shapes, total)


def _summary(table: IcebergTable) -> dict[str, str] | None:
    snap = table.current_snapshot()
    if snap is None:
        return None
    summary = snap.summary
    if summary is None:
        return {}
    return {str(k): str(v) for k, v in summary.additional_properties.items()}


class IcebergResults(Results):
    """Reads with pyiceberg: catalog calls, metadata and data files, no JVM."""

    via = "pyiceberg"

    def __init__(self, cfg: PipelineConfig, catalog: IcebergCatalog) -> None:
        super().__init__(cfg)
        self.catalog = catalog
        self._names: list[str] | None = None
        self._loaded: dict[tuple[str, str], IcebergTable | None] = {}
        self._internal: set[str] | None = None

    def replica_names(self) -> list[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        if self._names is None:
            try:
                found = self.catalog.list_tables(self.namespace)
            except NoSuchNamespaceError:
                listed = [".".join(ns) for ns in self.catalog.list_namespaces()]
                raise namespace_missing(self.cfg, listed) from None
            self._names = sorted(ident[-1] for ident in found)
        return list(self._names)

    def _table(self, namespace: str, name: str) -> IcebergTable | None:
        key = (namespace, name)
        if key not in self._loaded:
            if namespace == self.internal and name not in self._internal_names():
                self._loaded[key] = None
            else:
                from pyiceberg.exceptions import NoSuchTableError

                try:
                    self._loaded[key] = self.catalog.load_table((namespace, name))
                except NoSuchTableError:
                    self._loaded[key] = None
        return self._loaded[key]

    def _internal_names(self) -> set[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        if self._internal is None:
            self.replica_names()  # the pipeline's namespace must exist
            try:
                self._internal = {i[-1] for i in self.catalog.list_tables(self.internal)}
            except NoSuchNamespaceError:
                self._internal = set()
        return self._internal

    def files(self, names: Sequence[str]) -> dict[str, TableFiles]:
        out: dict[str, TableFiles] = {}
        for name in names:
            table = self._table(self.namespace, name)
            if table is None:
                continue
            summary = _summary(table)
            found = TableFiles.of(summary, len(table.metadata.snapshots)) if summary else None
            if found is not None:
                out[name] = found
        return out

    def row_counts(self, names: Sequence[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in names:
            table = self._table(self.namespace, name)
            if table is None:
                continue
            summary = _summary(table)
            if summary is None:
                counts[name] = 0
            elif summary.get("total-delete-files", "0") == "0" and "total-records" in summary:
                counts[name] = int(summary["total-records"])
            else:
                # the narrowest read that applies the deletes: one column
                first = table.schema().fields[0].name
                reader = table.scan(selected_fields=(first,)).to_arrow_batch_reader()
                counts[name] = sum(b.num_rows for b in reader)
        return counts

    def show(self, name: str, limit: int) -> Listing:
        self._check_name(name)
        table = self._table(self.namespace, name)
        assert table is not None
        names = [f.name for f in table.schema().fields]
        order = sort_keys(dict(table.properties), names)
        top, seen = _top(table.scan().to_arrow_batch_reader(), order, limit)
        return _listing(top, seen)

    def _read(
        self,
        name: str,
        order: Order,
        limit: int | None,
        keep: Callable[[pa.Table], pa.Table] | None = None,
        fields: Sequence[str] = ("*",),
    ) -> Listing | None:
        table = self._table(self.internal, name)
        if table is None:
            return None
        import pyarrow as pa

        reader = table.scan(selected_fields=tuple(fields)).to_arrow_batch_reader()
        parts = (keep(pa.Table.from_batches([b])) for b in reader) if keep is not None else reader
        found, _ = _top(parts, order, limit)
        return _listing(found)

    def batches(self, limit: int) -> Listing | None:
        return self._read(BATCHES, BATCH_ORDER, limit)

    def maintenance(self, limit: int | None = None) -> Listing | None:
        return self._read(MAINTENANCE, MAINTENANCE_ORDER, limit)

    def dead_letters(
        self,
        chosen: DeadLetterFilter,
        source_ids: Sequence[str] | None,
        limit: int,
        cut: int | None,
    ) -> Listing | None:
        import pyarrow as pa
        import pyarrow.compute as pc

        def keep(t: pa.Table) -> pa.Table:
            masks = []
            if not chosen.include_replayed:
                masks.append(pc.is_null(t["replayed_at"]))
            wanted = [("error_code", chosen.codes), ("table", chosen.tables)]
            if chosen.sources:
                wanted.append(("source", source_ids or ()))
            for column, values in wanted:
                if values or column == "source":
                    listed = pa.array(list(values), pa.string())
                    masks.append(pc.fill_null(pc.is_in(t[column], value_set=listed), False))
            since = chosen.since_time()
            if since is not None:
                moment = pa.scalar(since, t["first_seen"].type)
                masks.append(pc.fill_null(pc.greater_equal(t["first_seen"], moment), False))
            if not masks:
                return t
            combined = masks[0]
            for mask in masks[1:]:
                combined = pc.and_(combined, mask)
            return t.filter(combined)

        found = self._read(DEAD_LETTERS, DEAD_LETTER_ORDER, limit, keep)
        if found is None:
            return None
        return dead_letter_listing(found, chosen.include_replayed, cut)

    def open_dead_letters(self) -> dict[str, int]:
        table = self._table(self.internal, DEAD_LETTERS)
        if table is None:
            return {}
        found = table.scan(selected_fields=("table", "replayed_at")).to_arrow()
        out: dict[str, int] = {}
        for name, replayed in zip(
            found["table"].to_pylist(), found["replayed_at"].to_pylist(), strict=True
        ):
            if replayed is None:
                out[name or ""] = out.get(name or "", 0) + 1
        return out

    def watermarks(self) -> list[Watermark] | None:
        found = self._read(WATERMARKS, (), None)
        return None if found is None else group_watermarks(found)

    def _history_columns(self) -> Listing | None:
        table = self._table(self.internal, BATCHES)
        if table is None:
            return None
        present = {f.name for f in table.schema().fields}
        wanted = [c for c in HISTORY_COLUMNS if c in present]
        return _listing(table.scan(selected_fields=tuple(wanted)).to_arrow())


# ---------------------------------------------------------------------------- Spark


class SparkResults(Results):
    """Reads with Spark (a Hadoop catalog, and what pyiceberg cannot open)."""

    via = "spark"

    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        from cdcflow.iceberg.catalog import Catalog

        super().__init__(cfg)
        self.spark = spark
        self.catalog = Catalog(cfg.catalog.name)
        self._checked = False

    def _check_namespace(self) -> None:
        if self._checked:
            return
        from cdcflow.spark.sql import q

        rows = self.spark.sql(f"SHOW NAMESPACES IN {q(self.cfg.catalog.name)}").collect()
        found = [str(r[0]) for r in rows]
        if self.namespace not in found:
            raise namespace_missing(self.cfg, found)
        self._checked = True

    def replica_names(self) -> list[str]:
        from cdcflow.pipeline.results import replica_names

        self._check_namespace()
        return replica_names(self.cfg, self.spark)

    def files(self, names: Sequence[str]) -> dict[str, TableFiles]:
        out: dict[str, TableFiles] = {}
        for name in names:
            table = self.catalog.load(self.spark, self.namespace, name)
            summary = self.catalog.current_summary(self.spark, self.namespace, name)
            if table is None or not summary:
                continue
            snapshots = int(table.operations().current().snapshots().size())
            found = TableFiles.of(summary, snapshots)
            if found is not None:
                out[name] = found
        return out

    def row_counts(self, names: Sequence[str]) -> dict[str, int]:
        from cdcflow.pipeline.results import row_counts

        return row_counts(self.cfg, self.spark, list(names))

    def show(self, name: str, limit: int) -> Listing:
        from cdcflow.pipeline.results import replica

        self._check_namespace()
        df = replica(self.cfg, self.spark, name)
        info = self.catalog.info(self.spark, self.namespace, name)
        order = sort_keys(dict(info.properties) if info else {}, df.columns)
        total = self.row_counts([name]).get(name)
        return _frame_listing(_ordered(df, order).limit(int(limit)), total)

    def _internal_frame(self, name: str) -> DataFrame | None:
        self._check_namespace()
        if not self.catalog.exists(self.spark, self.internal, name):
            return None
        return self.spark.table(self.catalog.ident(self.internal, name))

    def batches(self, limit: int) -> Listing | None:
        df = self._internal_frame(BATCHES)
        return None if df is None else _frame_listing(_ordered(df, BATCH_ORDER).limit(limit))

    def maintenance(self, limit: int | None = None) -> Listing | None:
        df = self._internal_frame(MAINTENANCE)
        if df is None:
            return None
        df = _ordered(df, MAINTENANCE_ORDER)
        return _frame_listing(df if limit is None else df.limit(limit))

    def dead_letters(
        self,
        chosen: DeadLetterFilter,
        source_ids: Sequence[str] | None,
        limit: int,
        cut: int | None,
    ) -> Listing | None:
        df = self._internal_frame(DEAD_LETTERS)
        if df is None:
            return None
        found = _ordered(df.where(chosen.where(source_ids)), DEAD_LETTER_ORDER).limit(int(limit))
        return dead_letter_listing(_frame_listing(found), chosen.include_replayed, cut)

    def open_dead_letters(self) -> dict[str, int]:
        df = self._internal_frame(DEAD_LETTERS)
        if df is None:
            return {}
        rows = df.where("replayed_at IS NULL").groupBy("table").count().collect()
        return {(r["table"] or ""): int(r["count"]) for r in rows}

    def watermarks(self) -> list[Watermark] | None:
        df = self._internal_frame(WATERMARKS)
        return None if df is None else group_watermarks(_frame_listing(df))

    def _history_columns(self) -> Listing | None:
        df = self._internal_frame(BATCHES)
        if df is None:
            return None
        return _frame_listing(df.select(*[c for c in HISTORY_COLUMNS if c in df.columns]))


def _ordered(df: DataFrame, order: Order) -> DataFrame:
    from pyspark.sql.functions import col

    if not order:
        return df
    return df.orderBy(*[col(c).asc() if up else col(c).desc() for c, up in order])


def _frame_listing(df: DataFrame, total: int | None = None) -> Listing:
    shapes = [spark_shape(f.dataType) for f in df.schema.fields]
    return Listing(list(df.columns), [tuple(r) for r in df.collect()], shapes, total)


# ---------------------------------------------------------------------------- shared


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
