"""The read commands' tables read by pyiceberg, no JVM (:class:`IcebergResults`): the same rows, in
the same order, as :class:`cdcflow.observe.tables_spark.SparkResults`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from cdcflow.iceberg.layouts import (
    BATCHES,
    DEAD_LETTERS,
    WATERMARKS,
)
from cdcflow.observe.tables import (
    BATCH_ORDER,
    DEAD_LETTER_ORDER,
    HISTORY_COLUMNS,
    MAINTENANCE,
    MAINTENANCE_ORDER,
    Listing,
    Order,
    Results,
    Watermark,
    dead_letter_listing,
    group_watermarks,
    namespace_missing,
    sort_keys,
)
from cdcflow.observe.values import arrow_shape, python_value
from cdcflow.pipeline.report import TableFiles

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog as IcebergCatalog
    from pyiceberg.table import Table as IcebergTable

    from cdcflow.config import PipelineConfig
    from cdcflow.pipeline.replay import DeadLetterFilter


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
