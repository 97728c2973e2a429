"""Resolved watermarks: how far each producer scope is known to be complete.

``RESOLVED`` events (a CockroachDB resolved timestamp, cdcflow's own unified stream) promise
that every change of their scope at or below their ``sequence`` has been emitted. Each batch
keeps the highest one per (dialect, scope, partition) in ``<namespace>__cdcflow.watermarks``;
``cdcflow watermarks`` reports them with their lag. The scope is the event's table, else its
``metadata.topic``, else ``*`` (the whole feed); the partition is ``metadata.partition``.

The update only ever raises a watermark, so a replayed batch changes nothing: no ledger needed.
"""

from __future__ import annotations

from typing import Any

from cdcflow.engine.sql import view_name

WATERMARK_COLUMNS = (
    "dialect string, scope string, part string, sequence string, resolved_at timestamp, "
    "batch_id bigint, updated_at timestamp"
)


def record_watermarks(spark: Any, ident: str, resolved: Any, batch_id: int) -> None:
    """Raise the watermarks of the scopes of ``resolved`` (decoded RESOLVED events)."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {ident} ({WATERMARK_COLUMNS}) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    src = view_name("resolved")
    resolved.createOrReplaceTempView(src)
    top = view_name("resolved_top")
    spark.sql(
        f"""
        SELECT coalesce(dialect, '') AS dialect,
               coalesce(`table`, metadata['topic'], '*') AS scope,
               coalesce(metadata['partition'], '') AS part,
               max(sequence) AS sequence, max_by(timestamp, sequence) AS resolved_at
        FROM {src} WHERE sequence IS NOT NULL GROUP BY 1, 2, 3
        """
    ).createOrReplaceTempView(top)
    spark.sql(
        f"""
        MERGE INTO {ident} t USING {top} s
        ON t.dialect = s.dialect AND t.scope = s.scope AND t.part = s.part
        WHEN MATCHED AND s.sequence > t.sequence THEN UPDATE SET
          t.sequence = s.sequence, t.resolved_at = s.resolved_at, t.batch_id = {int(batch_id)},
          t.updated_at = current_timestamp()
        WHEN NOT MATCHED THEN INSERT (dialect, scope, part, sequence, resolved_at, batch_id,
          updated_at)
        VALUES (s.dialect, s.scope, s.part, s.sequence, s.resolved_at, {int(batch_id)},
          current_timestamp())
        """
    )
    for v in (src, top):
        spark.catalog.dropTempView(v)
