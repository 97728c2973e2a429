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
3. one ``MERGE`` into the segments table records the new segments and closes the groups judged
   in this batch (``resolved_batch``, ``outcome``).

Replays: "pending before batch B" is read as rows with ``batch_id < B`` not closed before ``B``,
which stays true after B's own commit; the decision time (which decides expiry) is stored in
the commit's snapshot summary, so a rerun of B after a crash judges every group as the first
attempt did and writes nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from cdcflow.decode.spark import judge_groups
from cdcflow.dialects.base import DialectOptions
from cdcflow.engine.commit import commit_properties, ledger_props
from cdcflow.engine.sql import lit, view_name
from cdcflow.engine.tables import table_exists
from cdcflow.event import spark_schema_ddl

SEGMENT_COLUMNS = (
    "src string, dialect string, grp string, idx int, final boolean, total int, raw binary, "
    "origin string, offset bigint, line bigint, item int, batch_id bigint, "
    "first_seen timestamp, resolved_batch bigint, outcome string"
)
_COLS = (
    "src, dialect, grp, idx, final, total, raw, origin, offset, line, item, batch_id, first_seen"
)
_NOW_PROPERTY = "cdcflow.segments-now"


@dataclass(frozen=True)
class SegmentResult:
    """What the segment stage gives a batch."""

    #: events and decode rejections of reassembled messages, in the decoded-events schema
    assembled: Any
    #: dead-letter rows (incomplete, contradictory and late segments)
    dead: Any
    segments: int
    complete: int
    pending: int
    dead_groups: int
    #: cached frame behind ``assembled``; release with :meth:`release` after the batch
    cache: Any = None

    def release(self) -> None:
        """Drop the cached reassembly results."""
        if self.cache is not None:
            self.cache.unpersist()


class SegmentStage:
    """The segments table of a pipeline and the per-batch reassembly step."""

    def __init__(
        self,
        ident: str,
        pipeline: str,
        wait_seconds: float,
        options: Mapping[str, DialectOptions],
    ) -> None:
        self.ident = ident
        self.pipeline = pipeline
        self.wait = float(wait_seconds)
        self.options = dict(options)
        self.pending: bool | None = None

    def has_pending(self, spark: Any) -> bool:
        """Whether segments wait for the rest of their message (looked up once per process,
        then kept up to date by :meth:`run`)."""
        if self.pending is None:
            self.pending = table_exists(spark, self.ident) and bool(
                spark.sql(
                    f"SELECT 1 FROM {self.ident} WHERE resolved_batch IS NULL LIMIT 1"
                ).collect()
            )
        return self.pending

    def _recorded_now(self, spark: Any, batch_id: int) -> float | None:
        rows = spark.sql(
            f"SELECT summary[{lit(_NOW_PROPERTY)}] AS now FROM {self.ident}.snapshots "
            f"WHERE summary['cdcflow.pipeline'] = {lit(self.pipeline)} "
            f"AND summary['cdcflow.batch'] = '{batch_id}' "
            "AND summary['cdcflow.step'] = 'segments'"
        ).collect()
        return float(rows[0]["now"]) if rows and rows[0]["now"] else None

    def run(self, spark: Any, new_rows: Any, batch_id: int, check: bool) -> SegmentResult:
        """Judge the batch's segments (``new_rows``: decoded rows with ``operation`` SEGMENT)
        with those pending; write the segments table once."""
        b = int(batch_id)
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.ident} ({SEGMENT_COLUMNS}) USING iceberg "
            "TBLPROPERTIES ('format-version'='2')"
        )
        recorded = self._recorded_now(spark, b) if check else None
        now = recorded if recorded is not None else time.time()
        now_us = int(now * 1_000_000)

        new_view = view_name("seg_new")
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
        ).createOrReplaceTempView(new_view)
        pending_view = view_name("seg_pending")
        spark.sql(
            f"SELECT {_COLS} FROM {self.ident} WHERE batch_id < {b} "
            f"AND (resolved_batch IS NULL OR resolved_batch >= {b})"
        ).createOrReplaceTempView(pending_view)
        closed_view = view_name("seg_closed")
        spark.sql(
            f"SELECT src, dialect, grp, max(outcome) AS outcome FROM {self.ident} "
            f"WHERE resolved_batch < {b} GROUP BY src, dialect, grp"
        ).createOrReplaceTempView(closed_view)
        # first delivery of each (group, index) in this batch, minus groups closed earlier and
        # segments already pending
        fresh_view = view_name("seg_fresh")
        spark.sql(
            f"""
            SELECT {_COLS} FROM (
              SELECT *, row_number() OVER (PARTITION BY src, dialect, grp, idx
                                           ORDER BY origin, offset, line, item) AS _n
              FROM {new_view}) n
            WHERE _n = 1
              AND NOT EXISTS (SELECT 1 FROM {closed_view} c
                              WHERE c.src = n.src AND c.dialect = n.dialect AND c.grp = n.grp)
              AND NOT EXISTS (SELECT 1 FROM {pending_view} p
                              WHERE p.src = n.src AND p.dialect = n.dialect AND p.grp = n.grp
                                AND p.idx = n.idx)
            """
        ).createOrReplaceTempView(fresh_view)
        all_view = view_name("seg_all")
        spark.sql(
            f"SELECT * FROM {pending_view} UNION ALL SELECT * FROM {fresh_view}"
        ).createOrReplaceTempView(all_view)
        grouped = spark.sql(
            f"""
            SELECT src, dialect, grp,
                   collect_list(struct(idx, final, total, raw, origin, offset, line, batch_id,
                                       unix_micros(first_seen) AS seen)) AS pieces
            FROM {all_view} GROUP BY src, dialect, grp
            """
        )
        judged = grouped.mapInArrow(
            partial(judge_groups, now=now, wait=self.wait, options=self.options),
            spark_schema_ddl() + ", _src string, _grp string, _status string",
        ).persist()
        judged_view = view_name("seg_judged")
        judged.createOrReplaceTempView(judged_view)

        counts = spark.sql(
            f"""
            SELECT
              (SELECT count(*) FROM {new_view}) AS segments,
              (SELECT count(*) FROM {judged_view} WHERE _status = 'complete') AS complete,
              (SELECT count(*) FROM {judged_view} WHERE _status = 'pending') AS pending,
              (SELECT count(*) FROM {judged_view}
                 WHERE _status IN ('invalid', 'expired')) AS dead_groups,
              (SELECT count(*) FROM {fresh_view}) AS fresh
            """
        ).collect()[0]

        closing = f"""
            SELECT a.src, a.dialect, a.grp, a.idx, a.final, a.total, a.raw, a.origin, a.offset,
                   a.line, a.item, a.batch_id, a.first_seen,
                   CASE WHEN j._status = 'pending' THEN NULL ELSE CAST({b} AS bigint) END
                     AS resolved_batch,
                   CASE WHEN j._status = 'pending' THEN NULL ELSE j._status END AS outcome,
                   j.error_code, j.error_message
            FROM {all_view} a JOIN {judged_view} j
              ON j._status IS NOT NULL AND a.src = j._src AND a.dialect = j.dialect
             AND a.grp = j._grp
        """
        if recorded is None and (counts["fresh"] or counts["complete"] or counts["dead_groups"]):
            source = view_name("seg_merge")
            spark.sql(
                f"SELECT * FROM ({closing}) WHERE outcome IS NOT NULL OR batch_id = {b}"
            ).createOrReplaceTempView(source)
            props = {**ledger_props(self.pipeline, b, "segments"), _NOW_PROPERTY: repr(now)}
            with commit_properties(spark, props):
                spark.sql(
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
                    """
                )
        self.pending = bool(counts["pending"])

        pipeline, bl = lit(self.pipeline), f"CAST({b} AS bigint)"
        dead = spark.sql(
            f"""
            SELECT {pipeline} AS pipeline, {bl} AS batch_id, current_timestamp() AS first_seen,
                   origin, offset, line, item, dialect, CAST(NULL AS string) AS `table`,
                   error_code, error_message, raw
            FROM ({closing}) WHERE outcome IN ('invalid', 'expired')
            UNION ALL
            SELECT {pipeline}, {bl}, current_timestamp(), n.origin, n.offset, n.line, n.item,
                   n.dialect, CAST(NULL AS string), 'SEGMENT_LATE',
                   concat('segment ', n.idx, ' of split message ', n.grp,
                          ' arrived after the message was dead-lettered as ', c.outcome),
                   n.raw
            FROM {new_view} n JOIN {closed_view} c
              ON c.src = n.src AND c.dialect = n.dialect AND c.grp = n.grp
            WHERE c.outcome <> 'complete'
            """
        )
        assembled = judged.where("_status IS NULL").drop("_src", "_grp", "_status")
        return SegmentResult(
            assembled=assembled,
            dead=dead,
            segments=int(counts["segments"]),
            complete=int(counts["complete"]),
            pending=int(counts["pending"]),
            dead_groups=int(counts["dead_groups"]),
            cache=judged,
        )

    def expire_closed(self, spark: Any, retention_seconds: int) -> None:
        """Forget groups closed longer ago than the retention (a redelivery after that is
        reassembled and applied again, which the merge's ordering makes harmless)."""
        if table_exists(spark, self.ident):
            spark.sql(
                f"DELETE FROM {self.ident} WHERE resolved_batch IS NOT NULL AND first_seen < "
                f"current_timestamp() - make_interval(0, 0, 0, 0, 0, 0, {retention_seconds})"
            )
