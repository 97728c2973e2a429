"""Resolved watermarks: how far each producer scope is known to be complete.

``RESOLVED`` events (a CockroachDB resolved timestamp, cdcflow's own unified stream) promise
that every change of their scope at or below their ``sequence`` has been emitted. Each batch
keeps the highest one per (source, dialect, scope, partition) in
``<namespace>__cdcflow.watermarks``; ``cdcflow watermarks`` reports them with their lag. The
scope is the event's table, else its ``metadata.topic``, else ``*`` (the whole feed); the
partition is ``metadata.partition``.

The update only ever raises a watermark, so a replayed batch changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcflow.spark.sql import lit, view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def watermarks_sql(
    spark: SparkSession, ident: str, events: DataFrame, batch_id: int, source: str = ""
) -> str:
    """The ``MERGE`` raising the watermarks of the scopes of the batch's ``RESOLVED`` events."""
    top = view(
        spark.sql(
            f"""
            SELECT coalesce(dialect, '') AS dialect,
                   coalesce(`table`, metadata['topic'], '*') AS scope,
                   coalesce(metadata['partition'], '') AS part,
                   max(sequence) AS sequence, max_by(timestamp, sequence) AS resolved_at
            FROM {view(events, "resolved")}
            WHERE operation = 'RESOLVED' AND sequence IS NOT NULL GROUP BY 1, 2, 3
            """
        ),
        "resolved_top",
    )
    b = int(batch_id)
    return f"""
        MERGE INTO {ident} t USING {top} s
        ON t.dialect = s.dialect AND t.scope = s.scope AND t.part = s.part
           AND (t.src IS NULL OR t.src = {lit(source)})
        WHEN MATCHED AND s.sequence > t.sequence THEN UPDATE SET
          t.sequence = s.sequence, t.resolved_at = s.resolved_at, t.batch_id = {b},
          t.updated_at = current_timestamp(), t.src = {lit(source)}
        WHEN NOT MATCHED THEN INSERT (dialect, scope, part, sequence, resolved_at, batch_id,
          updated_at, src)
        VALUES (s.dialect, s.scope, s.part, s.sequence, s.resolved_at, {b},
          current_timestamp(), {lit(source)})
    """
