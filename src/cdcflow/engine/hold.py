"""Consistency mode: hold events until a consistent point, so no half-applied source
transaction (or a point the producer has not declared complete) is ever visible.

``consistency: transactions`` — an event that names a ``transaction_id`` is held until the
``COMMIT`` marker of that transaction has been seen (in this batch or an earlier one); events
without a transaction are applied at once. For producers that mark every transaction
(``BEGIN``/``COMMIT``), e.g. the unified format. A ``COMMIT`` that says how many row events
its transaction has (``metadata.event_count``, as Debezium's transaction ``END`` does) releases
it in its own batch only when that many distinct events of it have arrived: a producer writes
a transaction's events and its ``END`` to different topics and partitions, and a batch can
read the ``END`` before an event written ahead of it. A transaction still short of its count
is released by the next batch (an event dead-lettered, or of a table the source does not
read, never arrives).

``consistency: resolved`` — an event is held until a ``RESOLVED`` watermark of its scope
(its table, or ``*`` for a whole feed; the lowest over the scope's partitions) reaches its
``sequence``. For producers whose resolved timestamps and event sequences share one clock,
e.g. CockroachDB's HLCs.

Held events wait in ``<namespace>__cdcflow.held`` between batches and runs. As for split
messages, "held before batch B" is read as rows of earlier batches not released before B, and
one ``MERGE`` per batch records what is newly held and what is released, so a replayed batch
decides exactly as its first attempt did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.engine.meta import MARKERS
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import HELD, WATERMARKS, held_event_columns
from cdcflow.iceberg.write import Statement
from cdcflow.spark.sql import lit, view_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MODES = ("none", "transactions", "resolved")
_MARKERS = "(" + ", ".join(lit(m) for m in MARKERS) + ")"


def _expected(row: str = "") -> str:
    """The number of row events a ``COMMIT`` (``row``: its alias) says its transaction has,
    when it says."""
    return f"try_cast({row + '.' if row else ''}metadata['event_count'] AS bigint)"


#: Transactions of a batch without their ``COMMIT`` in it, looked up by name in the held table
#: (its files' bounds on ``transaction_id`` leave most of them unread); more are looked up by a
#: join.
OPEN_LIMIT = 1000


@dataclass(frozen=True)
class HoldResult:
    """Events to apply in this batch (released ones from earlier batches included), and the
    write that records what is newly held and what is released (run it before the batch's
    other commits). ``unchanged``: the events are the batch's own, none held or released
    (the batch's figures stand)."""

    events: DataFrame
    held: int
    released: int
    statements: list[Statement] = field(default_factory=list)
    #: cached judgement behind the statements; release with :meth:`release` once they ran
    cache: DataFrame | None = None
    unchanged: bool = False

    def release(self) -> None:
        """Drop the cached judgement."""
        if self.cache is not None:
            self.cache.unpersist()


class HoldStage:
    """The held-events table of a pipeline and the per-batch hold/release step."""

    def __init__(
        self, catalog: Catalog, namespace: str, pipeline: str, mode: str, source: str = ""
    ) -> None:
        self.catalog = catalog
        self.source = source
        self.namespace = namespace
        self.ident = catalog.ident(namespace, HELD)
        self.watermarks = catalog.ident(namespace, WATERMARKS)
        self.pipeline = pipeline
        self.mode = mode
        #: events still held after the last batch this stage judged in this run (``None``:
        #: not known, e.g. before the first batch, whose judgement may be a replay's)
        self.pending: int | None = None

    def run(
        self, spark: SparkSession, events: DataFrame, batch_id: int, check: bool, commits: int
    ) -> HoldResult:
        """Split ``events`` (this batch's decoded events, with ``_fp``/``_target``, of which
        ``commits`` are ``COMMIT`` markers) and those held earlier into released and
        still-held (the held table must exist). ``check``: the batch may be a replay, so
        nothing known from earlier batches of this run is taken for granted."""
        b = int(batch_id)
        if check:
            self.pending = None
        cols = held_event_columns()
        sel = ", ".join(f"`{c}`" for c in cols)
        new_view = view_name("hold_new")
        events.select(*cols).createOrReplaceTempView(new_view)
        open_txs: list[str] | None = None
        if self.mode == "transactions":
            open_txs = self._open_transactions(spark, new_view)
            if open_txs == [] and self.pending == 0:
                # every transaction of the batch is complete in it and nothing waits from
                # earlier: its events pass as they are, its COMMITs are recorded for events
                # of theirs that later batches may still bring
                recorded = self._insert(sel, new_view, b, "operation = 'COMMIT'")
                return HoldResult(events, 0, 0, [recorded] if commits else [], unchanged=True)
        # rows of tables from before sources had their own queries have no _source
        mine = f"(_source IS NULL OR _source = {lit(self.source)})"
        all_view = view_name("hold_all")
        earlier = (
            f"SELECT {sel}, batch_id FROM {self.ident} WHERE {mine} AND batch_id < {b} "
            f"AND (released_batch IS NULL OR released_batch >= {b}) UNION ALL "
            if self.pending != 0
            else ""
        )
        spark.sql(
            f"""
            {earlier}
            SELECT {sel}, CAST({b} AS bigint) AS batch_id FROM {new_view}
            WHERE operation NOT IN {_MARKERS} OR operation = 'COMMIT'
            """
        ).createOrReplaceTempView(all_view)
        joins, ready = self._ready_condition(spark, new_view, all_view, b, open_txs)
        judged_view = view_name("hold_judged")
        judged = spark.sql(
            f"SELECT a.*, a.operation = 'COMMIT' OR coalesce({ready}, false) AS _ready "
            f"FROM {all_view} a {joins}"
        ).persist()
        statements: list[Statement] = []
        try:
            judged.createOrReplaceTempView(judged_view)
            counts = spark.sql(
                f"""
                SELECT count_if(NOT _ready) AS held,
                       count_if(_ready AND batch_id < {b} AND operation <> 'COMMIT')
                         AS released,
                       count_if(NOT _ready OR (batch_id = {b} AND operation = 'COMMIT')
                                OR (_ready AND batch_id < {b})) AS changes
                FROM {judged_view}
                """
            ).collect()[0]
            if counts["changes"] and not counts["released"]:
                # nothing held earlier changes: the batch's own rows are appended
                statements.append(
                    self._insert(
                        sel,
                        judged_view,
                        b,
                        f"batch_id = {b} AND (NOT _ready OR operation = 'COMMIT')",
                    )
                )
            elif counts["changes"]:
                source = view_name("hold_merge")
                spark.sql(
                    f"""
                    SELECT {sel}, batch_id,
                           CASE WHEN _ready THEN CAST({b} AS bigint) END AS released_batch
                    FROM {judged_view}
                    WHERE NOT _ready OR (batch_id = {b} AND operation = 'COMMIT')
                       OR (_ready AND batch_id < {b})
                    """
                ).createOrReplaceTempView(source)
                statements.append(
                    Statement(
                        self.namespace,
                        HELD,
                        "hold",
                        f"""
                        MERGE INTO {self.ident} t USING {source} s
                        ON t._fp = s._fp AND t.batch_id = s.batch_id
                           AND t.origin <=> s.origin AND t.offset <=> s.offset
                           AND t.item <=> s.item
                        WHEN MATCHED THEN UPDATE SET t.released_batch = s.released_batch
                        WHEN NOT MATCHED THEN INSERT *
                        """,
                        once=True,
                    )
                )
            held, released = int(counts["held"]), int(counts["released"])
            if not held and not released:
                self.pending = 0
                judged.unpersist()
                return HoldResult(events, 0, 0, statements, unchanged=True)
            ready_rows = spark.sql(
                f"SELECT {sel} FROM {judged_view} WHERE _ready AND operation <> 'COMMIT'"
            )
            markers = spark.sql(f"SELECT {sel} FROM {new_view} WHERE operation IN {_MARKERS}")
            out = ready_rows.unionByName(markers).localCheckpoint(eager=True)
        except BaseException:
            judged.unpersist()
            raise
        self.pending = held
        return HoldResult(out, held, released, statements, judged)

    def _insert(self, sel: str, rows: str, b: int, where: str) -> Statement:
        """The append of the batch's rows of ``rows`` that ``where`` picks (a replay that
        finds it committed skips it)."""
        return Statement(
            self.namespace,
            HELD,
            "hold",
            f"INSERT INTO {self.ident} ({sel}, batch_id, released_batch) "
            f"SELECT {sel}, CAST({b} AS bigint) AS batch_id, "
            f"CASE WHEN operation = 'COMMIT' THEN CAST({b} AS bigint) END AS released_batch "
            f"FROM {rows} WHERE {where}",
            once=True,
        )

    def _open_transactions(self, spark: SparkSession, new_view: str) -> list[str] | None:
        """The transactions of the batch's events without their ``COMMIT`` in the batch, or
        whose ``COMMIT`` counts more events than the batch holds (at most
        :data:`OPEN_LIMIT`; ``None`` when there are more)."""
        rows = spark.sql(
            f"""
            SELECT s.transaction_id FROM (
              SELECT transaction_id, count(DISTINCT id) AS n FROM {new_view}
              WHERE transaction_id IS NOT NULL AND operation NOT IN {_MARKERS}
              GROUP BY transaction_id) s
            LEFT JOIN (
              SELECT transaction_id, max({_expected()}) AS expected FROM {new_view}
              WHERE operation = 'COMMIT' GROUP BY transaction_id) c
              ON c.transaction_id = s.transaction_id
            WHERE c.transaction_id IS NULL OR s.n < c.expected
            LIMIT {OPEN_LIMIT + 1}
            """
        ).collect()
        found = [str(r[0]) for r in rows]
        return None if len(found) > OPEN_LIMIT else found

    def _ready_condition(
        self,
        spark: SparkSession,
        new_view: str,
        all_view: str,
        b: int,
        open_txs: list[str] | None,
    ) -> tuple[str, str]:
        """(joins, condition) deciding whether a row ``a`` of ``all_view`` (the batch's rows
        and those held earlier) may be applied now. ``open_txs``: the batch's transactions
        without a complete ``COMMIT`` in it, when known — only theirs and those held earlier
        can have been committed in an earlier batch."""
        if self.mode == "transactions":
            commits = view_name("hold_commits")
            recorded = ""
            if open_txs is None or open_txs or self.pending != 0:
                among: list[str] = []
                if open_txs:
                    among.append(f"transaction_id IN ({', '.join(lit(t) for t in open_txs)})")
                if self.pending != 0 and open_txs is not None:
                    among.append(
                        f"transaction_id IN (SELECT transaction_id FROM {all_view} "
                        f"WHERE batch_id < {b})"
                    )
                recorded = (
                    f"SELECT transaction_id FROM {self.ident} "
                    f"WHERE operation = 'COMMIT' AND batch_id < {b} "
                    + (f"AND ({' OR '.join(among)}) " if among else "")
                    + f"AND (_source IS NULL OR _source = {lit(self.source)}) UNION ALL "
                )
            # a COMMIT of this batch completes its transaction when the events it counts are
            # here (held earlier or in the batch); one of an earlier batch does in any case
            spark.sql(
                f"""
                SELECT DISTINCT transaction_id FROM (
                  {recorded}
                  SELECT c.transaction_id FROM {new_view} c
                  LEFT JOIN (
                    SELECT transaction_id, count(DISTINCT id) AS n FROM {all_view}
                    WHERE operation <> 'COMMIT' GROUP BY transaction_id) s
                    ON s.transaction_id = c.transaction_id
                  WHERE c.operation = 'COMMIT'
                    AND NOT coalesce(coalesce(s.n, 0) < {_expected("c")}, false))
                WHERE transaction_id IS NOT NULL
                """
            ).createOrReplaceTempView(commits)
            return (
                f"LEFT JOIN {commits} c ON c.transaction_id = a.transaction_id",
                "a.transaction_id IS NULL OR c.transaction_id IS NOT NULL",
            )
        # resolved: the lowest watermark over the partitions of the event's table or of the feed
        if not self.catalog.exists(spark, self.namespace, WATERMARKS):
            return "", "false"
        marks = view_name("hold_marks")
        spark.sql(
            f"SELECT dialect, scope, min(sequence) AS sequence FROM {self.watermarks} "
            f"WHERE src IS NULL OR src = {lit(self.source)} GROUP BY dialect, scope"
        ).createOrReplaceTempView(marks)
        return (
            f"LEFT JOIN {marks} wt ON wt.dialect = coalesce(a.dialect, '') "
            "AND wt.scope = a.`table` "
            f"LEFT JOIN {marks} wf ON wf.dialect = coalesce(a.dialect, '') AND wf.scope = '*'",
            "a.sequence <= greatest(wt.sequence, wf.sequence)",
        )
