"""Dead-letter rows: every message that could not be decoded or applied.

Columns (:data:`cdcflow.iceberg.layouts.DEAD_LETTER_FIELDS`): pipeline, batch, first-seen
time, origin (file, byte offset, line, item in message), dialect, table (when known), error code
and message, and ``raw``: the message's own bytes for decode failures; for events rejected after
decoding (e.g. a column type conflict), the decoded canonical event as JSON, with the origin
locating the original message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcflow.spark.sql import lit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: How timestamps are written in an event's JSON form (microseconds kept).
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"

#: The canonical event as JSON, for the ``raw`` of events rejected after decoding (read back
#: by a replay with the same timestamp format).
EVENT_JSON = (
    "CAST(to_json(struct(id, dialect, source, database, schema, `table`, operation, "
    "timestamp, transaction_id, sequence, position, key, before, after, partial, metadata, "
    f"ddl_type, ddl_command, types), map('timestampFormat', {lit(TIMESTAMP_FORMAT)})) AS binary)"
)


def _head(pipeline: str, batch_id: int) -> list[str]:
    """Columns before the error (``_source``: the configured source, a working column of the
    batch)."""
    return [
        f"{lit(pipeline)} AS pipeline",
        f"CAST({int(batch_id)} AS bigint) AS batch_id",
        "current_timestamp() AS first_seen",
        "origin",
        "offset",
        "line",
        "item",
        "dialect",
        "`table`",
    ]


def rejected_rows(df: DataFrame, pipeline: str, batch_id: int) -> DataFrame:
    """Dead-letter rows of decode rejections (rows of the decoded frame with ``error_code``)."""
    return df.selectExpr(
        *_head(pipeline, batch_id), "error_code", "error_message", "raw", *_tail("message")
    )


def event_rows(
    df: DataFrame, pipeline: str, batch_id: int, code_sql: str, message_sql: str
) -> DataFrame:
    """Dead-letter rows for decoded events rejected by the engine or an output (``raw`` = the
    event as JSON); ``code_sql``/``message_sql`` are SQL expressions over ``df``."""
    return df.selectExpr(
        *_head(pipeline, batch_id),
        f"{code_sql} AS error_code",
        f"{message_sql} AS error_message",
        f"{EVENT_JSON} AS raw",
        *_tail("event"),
    )


def _tail(kind: str) -> list[str]:
    return [
        "_source AS source",
        f"{lit(kind)} AS kind",
        "CAST(NULL AS timestamp) AS replayed_at",
        "CAST(NULL AS bigint) AS replay_batch",
    ]


def coded_rows(
    df: DataFrame, pipeline: str, batch_id: int, code: str, message_sql: str
) -> DataFrame:
    """:func:`event_rows` with one fixed error code."""
    return event_rows(df, pipeline, batch_id, lit(code), message_sql)
