"""Runs the batch's staging statements (built by :class:`cdcflow.engine.stage.StageSql`):
registers their views, keeps the staged rows in local checkpoints and collects the counts.

Nothing here builds SQL: each step is one statement of :mod:`cdcflow.engine.stage` over the
views the steps before it registered.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from cdcflow.engine import multiset
from cdcflow.engine.deadletters import event_rows
from cdcflow.engine.encoding import newest_truncates_sql, sequence_sql
from cdcflow.engine.plan import TablePlan
from cdcflow.engine.stage import StageSql
from cdcflow.engine.statements import changelog_source_sql, merge_source_sql
from cdcflow.engine.stats import TableStats, stats_of, stats_sql
from cdcflow.spark.kind import functions, is_connect
from cdcflow.spark.sql import view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def sequenced(events: DataFrame, plans: Sequence[TablePlan]) -> DataFrame:
    """The events, with ``sequence`` taken from the columns that order a table's events
    (see :func:`cdcflow.engine.encoding.sequence_sql`)."""
    expr = sequence_sql(plans)
    if expr is None:
        return events
    F = functions(events.sparkSession)
    return events.withColumn("sequence", F.expr(expr))


def newest_truncates(
    spark: SparkSession, events: DataFrame, plans: Sequence[TablePlan]
) -> dict[str, str]:
    """The newest ``TRUNCATE`` of each table ordered by ``sequence_by`` columns, in their
    order (one small query, only for batches that hold such a ``TRUNCATE``)."""
    sql = newest_truncates_sql(view(sequenced(events, plans), "trunc"), plans)
    rows = spark.sql(sql).collect()
    return {r["_target"]: r["seq"] for r in rows if r["seq"] is not None}


def release_checkpoint(df: DataFrame) -> None:
    """Free the blocks behind a ``localCheckpoint`` now rather than when the JVM collects
    garbage (a pipeline that keeps following runs thousands of batches). A Spark Connect
    client releases the server's copy when the DataFrame is collected: nothing to do here."""
    if is_connect(df.sparkSession):
        return
    plan = df._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


class BatchStage:
    """The staging of one batch over its events (canonical rows with ``_fp`` and
    ``_target``), for the given table plans: registers the validated events, then (on
    :meth:`stage`) the staged rows."""

    def __init__(self, spark: SparkSession, events: DataFrame, plans: Sequence[TablePlan]) -> None:
        self.spark = spark
        self.sql = StageSql(plans)
        #: the batch's plans by how they are written
        self.tables = self.sql.tables
        self.source = view(sequenced(events, plans), "events")
        self.validated = view(self.spark.sql(self.sql.validated_sql(self.source)), "validated")
        self.staged: DataFrame | None = None
        self.staged_view: str | None = None
        #: scd2 tables: per (table, key, sequence) the winning event (see engine.history)
        self.winners_view: str | None = None
        #: keyless tables: per (table, event id) the winning copy, against the log (see
        #: engine.multiset)
        self.multiset_view: str | None = None
        self._checkpoints: list[DataFrame] = []

    @property
    def has_rules(self) -> bool:
        """Whether the engine may reject events of the batch."""
        return self.sql.has_rules

    def rejected(self, pipeline: str, batch_id: int) -> DataFrame:
        """Dead-letter rows of the events the engine rejects."""
        df = self.spark.sql(self.sql.rejected_sql(self.validated))
        return event_rows(df, pipeline, batch_id, "_reject", "_reason")

    def stage(
        self,
        tombstones: str | None,
        looked_up: Collection[str] | None = None,
        log: str | None = None,
        ledger: tuple[str, int] = ("", 0),
    ) -> None:
        """Build and keep the staged rows of every merge table (``tombstones``: the tombstone
        table's identifier when some replica of the batch may have tombstones, ``looked_up``:
        those replicas, ``None``: every one), the winning events of every scd2 table and the
        winning copies of the keyless tables' events against their log (``log``: its
        identifier when it exists; ``ledger``: the batch's pipeline and id, which tell its own
        log rows). They are checkpointed locally: every later query of the batch (one per
        table) starts from them instead of re-analysing the whole plan."""
        if self.tables.multiset:
            found = view(self.spark.sql(self.sql.multiset_winners_sql(self.validated)), "mset")
            copies = self.spark.sql(self.sql.multiset_staged_sql(found, log, *ledger))
            copies = copies.localCheckpoint(eager=True)
            self._checkpoints.append(copies)
            self.multiset_view = view(copies, "multiset")
        if not self.tables.keyed:
            return
        rows = view(self.spark.sql(self.sql.rows_sql(self.validated)), "rows")
        if self.tables.history:
            winners = self.spark.sql(self.sql.winners_sql(rows, self.validated)).localCheckpoint(
                eager=True
            )
            self._checkpoints.append(winners)
            self.winners_view = view(winners, "winners")
        if not self.tables.merge:
            return
        if self.tables.history:
            rows = view(self.spark.sql(self.sql.merge_rows_sql(rows)), "rows")
        # the collapsed rows are read twice by the tombstone look-up (the batch's keys, then
        # the rows): kept once (measured: one checkpoint over both costs more than two)
        collapsed = self.spark.sql(
            self.sql.collapsed_sql(rows, tombstones is not None)
        ).localCheckpoint(eager=True)
        self._checkpoints.append(collapsed)
        staged = self.spark.sql(
            self.sql.staged_sql(view(collapsed, "collapsed"), tombstones, looked_up)
        )
        if tombstones is not None:
            # the tombstone look-up runs once, not once per table
            staged = staged.localCheckpoint(eager=True)
            self._checkpoints.append(staged)
        self.staged = staged
        self.staged_view = view(staged, "staged")

    def stats(self) -> dict[str, TableStats]:
        """Counts of every table (one small aggregate, see
        :func:`cdcflow.engine.stats.stats_sql`)."""
        sql = stats_sql(
            self.tables, self.validated, self.staged_view, self.winners_view, self.multiset_view
        )
        rows = self.spark.sql(sql).collect() if sql is not None else []
        return stats_of(self.tables, (r.asDict() for r in rows))

    def release(self) -> None:
        """Drop the batch's staged rows (the blocks of its local checkpoints)."""
        for df in self._checkpoints:
            release_checkpoint(df)
        self._checkpoints.clear()
        self.staged = None

    # ------------------------------------------------------------------ per table

    def merge_source(self, plan: TablePlan) -> str:
        """Register the typed ``MERGE`` source of one table; returns the view name."""
        assert self.staged_view is not None
        return view(self.spark.sql(merge_source_sql(self.staged_view, plan)), "source")

    def changelog_source(self, plan: TablePlan) -> str:
        """Register the changelog rows of one append table; returns the view name."""
        sql = changelog_source_sql(self.validated, plan)
        return view(self.spark.sql(sql), "changelog")

    def history_log_source(self) -> str:
        """Register the batch's events of the scd2 tables as history log rows."""
        assert self.winners_view is not None
        return view(self.spark.sql(self.sql.history_log_source_sql(self.winners_view)), "log")

    def multiset_log_source(self) -> str:
        """Register the log rows of the keyless tables' events the batch logs."""
        assert self.multiset_view is not None
        sql = self.sql.multiset_log_source_sql(self.multiset_view)
        return view(self.spark.sql(sql), "mlog")

    def multiset_source(self, plan: TablePlan, log: str) -> str:
        """Register the rows one keyless table must hold for the images the batch touched
        (counted from ``log``, which holds the batch's events); returns the view name."""
        assert self.multiset_view is not None
        touched = view(
            self.spark.sql(multiset.touched_sql(self.multiset_view, log, plan)), "touched"
        )
        return view(self.spark.sql(multiset.source_sql(touched, log, plan)), "copies")

    def deletes_source(self) -> str:
        """Register the batch's live deletes of hard-delete tables (for the tombstones)."""
        assert self.staged_view is not None
        return view(self.spark.sql(self.sql.deletes_source_sql(self.staged_view)), "deletes")
