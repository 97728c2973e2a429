"""Split messages in the pipeline: segments kept between batches and runs, reassembled when whole.

Decoders return segments of split messages as rows with ``operation`` ``SEGMENT``. Per batch:

1. the batch's segments are deduplicated (same source, dialect, group and index: the first
   delivered is kept) and checked against groups closed in earlier batches: a late duplicate of
   a reassembled message is dropped; a segment of a message already dead-lettered as incomplete
   is dead-lettered too (``SEGMENT_LATE``);
2. with the segments still pending from earlier batches they are grouped, and each group is
   judged by :func:`cdcflow.decode.spark.judge_groups` inside Spark (``mapInArrow``): a complete
   group is reassembled and decoded there, into events that join the batch; a group still incomplete
   after ``segment_wait`` is dead-lettered segment by segment (``SEGMENT_MISSING``), as is a
   group whose segments contradict each other;
3. one ``MERGE`` into the segments table (run by the caller) records the new segments and
   closes the groups judged in this batch (``resolved_batch``, ``outcome``).

Replays: "pending before batch B" is read as rows with ``batch_id < B`` not closed before ``B``,
which stays true after B's own commit; the decision time (which decides expiry) is stored in
the commit's snapshot summary, so a rerun of B after a crash judges every group as the first
attempt did and writes nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from cdcflow.decode.segments import LATE
from cdcflow.decode.spark import judge_groups
from cdcflow.dialects.model import DialectOptions
from cdcflow.event import spark_schema_ddl
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import SEGMENTS
from cdcflow.iceberg.write import Statement
from cdcflow.spark.sql import lit, view_name
from cdcflow.spark.worker import map_in_arrow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_COLS = (
    "src, dialect, grp, idx, final, total, raw, origin, offset, line, item, batch_id, first_seen"
)
_NOW_PROPERTY = "cdcflow.segments-now"
#: Counts by error code of a grouped subquery (``error_code``, ``n``) as one map value.
_BY_CODE = "map_from_entries(collect_list(struct(coalesce(error_code, ''), n)))"


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        if v:
            out[k] = out.get(k, 0) + v
    return out


@dataclass(frozen=True)
class SegmentResult:
    """What the segment stage gives a batch."""

    #: events and decode rejections of reassembled messages, in the decoded-events schema
    assembled: DataFrame
    #: dead-letter rows (incomplete, contradictory and late segments)
    dead: DataFrame
    segments: int
    complete: int
    pending: int
    dead_groups: int
    #: reassembled messages their dialect rejected, and segments of groups dead-lettered earlier
    rejected: int = 0
    late: int = 0
    #: segments of the groups dead-lettered by this batch (one dead letter each)
    dead_segments: int = 0
    #: the batch's dead letters of this stage (``rejected``, ``late``, ``dead_segments``) by
    #: error code
    codes: dict[str, int] = field(default_factory=dict)
    #: cached frame behind ``assembled``; release with :meth:`release` after the batch
    cache: DataFrame | None = None
    #: the write that records new segments and closes judged groups (run it before the batch's
    #: other commits)
    statements: list[Statement] = field(default_factory=list)

    def release(self) -> None:
        """Drop the cached reassembly results."""
        if self.cache is not None:
            self.cache.unpersist()


class SegmentStage:
    """The segments table of a pipeline and the per-batch reassembly step."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: str,
        pipeline: str,
        wait_seconds: float,
        options: Mapping[str, DialectOptions],
        source: str = "",
    ) -> None:
        self.catalog = catalog
        self.source = source
        self.namespace = namespace
        self.ident = catalog.ident(namespace, SEGMENTS)
        self.pipeline = pipeline
        self.wait = float(wait_seconds)
        self.options = dict(options)
        self.pending: bool | None = None

    def has_pending(self, spark: SparkSession) -> bool:
        """Whether segments wait for the rest of their message (looked up once per process,
        then kept up to date by :meth:`run`)."""
        if self.pending is None:
            self.pending = self.catalog.exists(spark, self.namespace, SEGMENTS) and bool(
                spark.sql(
                    f"SELECT 1 FROM {self.ident} WHERE resolved_batch IS NULL "
                    f"AND src = {lit(self.source)} LIMIT 1"
                ).collect()
            )
        return self.pending

    def _recorded_now(self, spark: SparkSession, batch_id: int) -> float | None:
        summary = self.catalog.summaries(
            spark, self.namespace, SEGMENTS, self.pipeline, batch_id
        ).get("segments")
        now = (summary or {}).get(_NOW_PROPERTY)
        return float(now) if now else None

    def run(
        self, spark: SparkSession, new_rows: DataFrame, batch_id: int, check: bool
    ) -> SegmentResult:
        """Judge the batch's segments (``new_rows``: decoded rows with ``operation`` SEGMENT)
        with those pending (the segments table must exist); the result carries the one write
        that records the outcome."""
        b = int(batch_id)
        recorded = self._recorded_now(spark, b) if check else None
        now = recorded if recorded is not None else time.time()
        v = self._views(spark, new_rows, b, int(now * 1_000_000))
        grouped = spark.sql(
            f"""
            SELECT src, dialect, grp,
                   collect_list(struct(idx, final, total, raw, origin, offset, line, batch_id,
                                       unix_micros(first_seen) AS seen)) AS pieces
            FROM {v.all} GROUP BY src, dialect, grp
            """
        )
        judged = map_in_arrow(
            grouped,
            partial(judge_groups, now=now, wait=self.wait, options=self.options),
            spark_schema_ddl() + ", _src string, _grp string, _status string",
        ).persist()
        judged.createOrReplaceTempView(v.judged)
        closing = f"""
            SELECT a.src, a.dialect, a.grp, a.idx, a.final, a.total, a.raw, a.origin, a.offset,
                   a.line, a.item, a.batch_id, a.first_seen,
                   CASE WHEN j._status = 'pending' THEN NULL ELSE CAST({b} AS bigint) END
                     AS resolved_batch,
                   CASE WHEN j._status = 'pending' THEN NULL ELSE j._status END AS outcome,
                   j.error_code, j.error_message
            FROM {v.all} a JOIN {v.judged} j
              ON j._status IS NOT NULL AND a.src = j._src AND a.dialect = j.dialect
             AND a.grp = j._grp
        """
        counts = spark.sql(_counts_sql(v, closing)).collect()[0]
        rejected_codes = {str(k): int(n) for k, n in (counts["rejected"] or {}).items()}
        dead_codes = {str(k): int(n) for k, n in (counts["dead_segments"] or {}).items()}
        statements: list[Statement] = []
        if recorded is None and (counts["fresh"] or counts["complete"] or counts["dead_groups"]):
            statements.append(self._record(spark, closing, b, now))
        self.pending = bool(counts["pending"])
        assembled = judged.where("_status IS NULL").drop("_src", "_grp", "_status")
        return SegmentResult(
            assembled=assembled,
            dead=spark.sql(_dead_sql(v, closing, lit(self.pipeline), f"CAST({b} AS bigint)")),
            segments=int(counts["segments"]),
            complete=int(counts["complete"]),
            pending=int(counts["pending"]),
            dead_groups=int(counts["dead_groups"]),
            rejected=sum(rejected_codes.values()),
            late=int(counts["late"]),
            dead_segments=sum(dead_codes.values()),
            codes=_add(_add(rejected_codes, dead_codes), {LATE: int(counts["late"])}),
            cache=judged,
            statements=statements,
        )

    def _views(self, spark: SparkSession, new_rows: DataFrame, b: int, now_us: int) -> _Views:
        """The batch's segments, those pending from earlier batches, the groups closed
        earlier, the first delivery of each new (group, index), and all to judge."""
        v = _Views()
        new_rows.selectExpr(
            "coalesce(metadata['cdcflow.source'], '') AS src",
            "dialect",
            "id AS grp",
            "CAST(metadata['segment.index'] AS int) AS idx",
            "CAST(metadata['segment.final'] AS boolean) AS final",
            "CAST(metadata['segment.total'] AS int) AS total",
            "raw",
            "origin",
            "offset",
            "line",
            "item",
            f"CAST({b} AS bigint) AS batch_id",
            f"timestamp_micros({now_us}) AS first_seen",
        ).createOrReplaceTempView(v.new)
        spark.sql(
            f"SELECT {_COLS} FROM {self.ident} WHERE src = {lit(self.source)} "
            f"AND batch_id < {b} AND (resolved_batch IS NULL OR resolved_batch >= {b})"
        ).createOrReplaceTempView(v.pending)
        spark.sql(
            f"SELECT src, dialect, grp, max(outcome) AS outcome FROM {self.ident} "
            f"WHERE src = {lit(self.source)} AND resolved_batch < {b} GROUP BY src, dialect, grp"
        ).createOrReplaceTempView(v.closed)
        # first delivery of each (group, index) in this batch, minus groups closed earlier and
        # segments already pending
        spark.sql(
            f"""
            SELECT {_COLS} FROM (
              SELECT *, row_number() OVER (PARTITION BY src, dialect, grp, idx
                                           ORDER BY origin, offset, line, item) AS _n
              FROM {v.new}) n
            WHERE _n = 1
              AND NOT EXISTS (SELECT 1 FROM {v.closed} c
                              WHERE c.src = n.src AND c.dialect = n.dialect AND c.grp = n.grp)
              AND NOT EXISTS (SELECT 1 FROM {v.pending} p
                              WHERE p.src = n.src AND p.dialect = n.dialect AND p.grp = n.grp
                                AND p.idx = n.idx)
            """
        ).createOrReplaceTempView(v.fresh)
        spark.sql(
            f"SELECT * FROM {v.pending} UNION ALL SELECT * FROM {v.fresh}"
        ).createOrReplaceTempView(v.all)
        return v

    def _record(self, spark: SparkSession, closing: str, b: int, now: float) -> Statement:
        """The write that records the batch's new segments and the groups it closed."""
        source = view_name("seg_merge")
        spark.sql(
            f"SELECT * FROM ({closing}) WHERE outcome IS NOT NULL OR batch_id = {b}"
        ).createOrReplaceTempView(source)
        return Statement(
            self.namespace,
            SEGMENTS,
            "segments",
            f"""
                    MERGE INTO {self.ident} t USING {source} s
                    ON t.src = s.src AND t.dialect = s.dialect AND t.grp = s.grp
                       AND t.idx = s.idx AND t.batch_id = s.batch_id
                    WHEN MATCHED THEN UPDATE SET
                      t.resolved_batch = s.resolved_batch, t.outcome = s.outcome
                    WHEN NOT MATCHED THEN INSERT ({_COLS.replace(" ", "")},
                      resolved_batch, outcome)
                    VALUES ({", ".join("s." + c.strip() for c in _COLS.split(","))},
                      s.resolved_batch, s.outcome)
                    """,
            extra={_NOW_PROPERTY: repr(now)},
        )

    def expire_sql(self, retention_seconds: int) -> str:
        """Forget groups closed longer ago than the retention (a redelivery after that is
        reassembled and applied again, which the merge's ordering makes harmless)."""
        return (
            f"DELETE FROM {self.ident} WHERE resolved_batch IS NOT NULL AND first_seen < "
            f"current_timestamp() - make_interval(0, 0, 0, 0, 0, 0, {int(retention_seconds)})"
        )


@dataclass(frozen=True)
class _Views:
    """The names of one judgement's temporary views."""

    new: str = field(default_factory=lambda: view_name("seg_new"))
    pending: str = field(default_factory=lambda: view_name("seg_pending"))
    closed: str = field(default_factory=lambda: view_name("seg_closed"))
    fresh: str = field(default_factory=lambda: view_name("seg_fresh"))
    all: str = field(default_factory=lambda: view_name("seg_all"))
    judged: str = field(default_factory=lambda: view_name("seg_judged"))


def _counts_sql(v: _Views, closing: str) -> str:
    """One row of the judgement's counts (``closing``: the rows that record it)."""
    return f"""
            SELECT
              (SELECT count(*) FROM {v.new}) AS segments,
              (SELECT count(*) FROM {v.judged} WHERE _status = 'complete') AS complete,
              (SELECT count(*) FROM {v.judged} WHERE _status = 'pending') AS pending,
              (SELECT count(*) FROM {v.judged}
                 WHERE _status IN ('invalid', 'expired')) AS dead_groups,
              (SELECT count(*) FROM {v.fresh}) AS fresh,
              (SELECT {_BY_CODE} FROM (SELECT error_code, count(*) AS n FROM {v.judged}
                 WHERE _status IS NULL AND error_code IS NOT NULL GROUP BY 1)) AS rejected,
              (SELECT count(*) FROM {v.new} n JOIN {v.closed} c
                 ON c.src = n.src AND c.dialect = n.dialect AND c.grp = n.grp
               WHERE c.outcome <> 'complete') AS late,
              (SELECT {_BY_CODE} FROM (SELECT error_code, count(*) AS n FROM ({closing})
                 WHERE outcome IN ('invalid', 'expired') GROUP BY 1)) AS dead_segments
            """


def _dead_sql(v: _Views, closing: str, pipeline: str, batch: str) -> str:
    """The dead letters of the judgement: the segments of groups that cannot be completed,
    and segments arriving after their group was dead-lettered."""
    return f"""
            SELECT {pipeline} AS pipeline, {batch} AS batch_id, current_timestamp() AS first_seen,
                   origin, offset, line, item, dialect, CAST(NULL AS string) AS `table`,
                   error_code, error_message, raw, src AS source, 'message' AS kind,
                   CAST(NULL AS timestamp) AS replayed_at, CAST(NULL AS bigint) AS replay_batch
            FROM ({closing}) WHERE outcome IN ('invalid', 'expired')
            UNION ALL
            SELECT {pipeline}, {batch}, current_timestamp(), n.origin, n.offset, n.line, n.item,
                   n.dialect, CAST(NULL AS string), {lit(LATE)},
                   concat('segment ', n.idx, ' of split message ', n.grp,
                          ' arrived after the message was dead-lettered as ', c.outcome),
                   n.raw, n.src, 'message', CAST(NULL AS timestamp), CAST(NULL AS bigint)
            FROM {v.new} n JOIN {v.closed} c
              ON c.src = n.src AND c.dialect = n.dialect AND c.grp = n.grp
            WHERE c.outcome <> 'complete'
            """
