"""The dead-letter table: every message that could not be decoded or applied.

Columns: pipeline, batch, first-seen time, origin (file, byte offset, line, item in message),
dialect, table (when known), error code and message, and ``raw``: the message's own bytes for
decode failures; for events rejected after decoding (e.g. a column type conflict), the decoded
canonical event as JSON, with the origin locating the original message.
"""

from __future__ import annotations

from typing import Any

from cdcflow.engine.commit import commit_properties, committed_steps, ledger_props
from cdcflow.engine.sql import lit, view_name
from cdcflow.engine.tables import table_exists

DEAD_LETTER_COLUMNS = (
    "pipeline string, batch_id bigint, first_seen timestamp, origin string, offset bigint, "
    "line bigint, item int, dialect string, `table` string, error_code string, "
    "error_message string, raw binary"
)


def ensure_dead_letters(spark: Any, ident: str) -> None:
    """Create the dead-letter table if missing."""
    if not table_exists(spark, ident):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {ident} ({DEAD_LETTER_COLUMNS}) USING iceberg "
            "TBLPROPERTIES ('format-version'='2')"
        )


def rejected_rows(df: Any, pipeline: str, batch_id: int) -> Any:
    """Dead-letter rows of decode rejections (rows of the decoded frame with ``error_code``)."""
    return df.selectExpr(
        f"{lit(pipeline)} AS pipeline",
        f"CAST({batch_id} AS bigint) AS batch_id",
        "current_timestamp() AS first_seen",
        "origin",
        "offset",
        "line",
        "item",
        "dialect",
        "`table`",
        "error_code",
        "error_message",
        "raw",
    )


def event_rows(df: Any, pipeline: str, batch_id: int, code: str, message_sql: str) -> Any:
    """Dead-letter rows for decoded events rejected by the engine (``raw`` = event JSON)."""
    return df.selectExpr(
        f"{lit(pipeline)} AS pipeline",
        f"CAST({batch_id} AS bigint) AS batch_id",
        "current_timestamp() AS first_seen",
        "origin",
        "offset",
        "line",
        "item",
        "dialect",
        "`table`",
        f"{lit(code)} AS error_code",
        f"{message_sql} AS error_message",
        "CAST(to_json(struct(id, dialect, source, database, schema, `table`, operation, "
        "timestamp, transaction_id, sequence, position, key, before, after, partial, metadata, "
        "ddl_type, ddl_command, types)) AS binary) AS raw",
    )


def write_dead_letters(
    spark: Any, ident: str, rows: Any, pipeline: str, batch_id: int, check_ledger: bool
) -> int:
    """Append dead letters once per (pipeline, batch)."""
    if check_ledger and "dead_letters" in committed_steps(spark, ident, pipeline, batch_id):
        return 0
    view = view_name("dlq")
    rows.createOrReplaceTempView(view)
    n = int(spark.sql(f"SELECT count(*) AS n FROM {view}").collect()[0]["n"])
    if n:
        ensure_dead_letters(spark, ident)
        with commit_properties(spark, ledger_props(pipeline, batch_id, "dead_letters")):
            spark.sql(f"INSERT INTO {ident} SELECT * FROM {view}")
    spark.catalog.dropTempView(view)
    return n
