"""The read commands' tables read by Spark (:class:`SparkResults`), where pyiceberg cannot open
the catalog: the same rows, in the same order, as
:class:`cdcflow.observe.tables_iceberg.IcebergResults`."""

from __future__ import annotations

from collections.abc import Sequence
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
from cdcflow.observe.values import spark_shape
from cdcflow.pipeline.report import TableFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.config import PipelineConfig
    from cdcflow.pipeline.replay import DeadLetterFilter


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
            snap = table.current() if table is not None else None
            if table is None or snap is None or not snap.summary:
                continue
            found = TableFiles.of(snap.summary, table.snapshot_count())
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
