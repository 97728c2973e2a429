"""The ``append`` sink: a changelog table of canonical events per source table.

Columns: ``_cdc`` (operation, sequence, source timestamp, event id, fingerprint, transaction id,
partial flag, applied-at) and the typed ``before`` and ``after`` images as structs. Rows are
inserted only when no row with the same event id and fingerprint exists, so redelivered and
replayed events appear once, whatever the checkpoint says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcflow.engine.commit import commit_properties, committed_steps, ledger_props
from cdcflow.engine.sql import lit, q, view_name
from cdcflow.engine.tables import CHANGELOG_STRUCT, SchemaPlan, spark_type, table_exists
from cdcflow.types import spark_from_wire


def _struct_type(types: Mapping[str, str]) -> str:
    if not types:
        return "struct<_empty:string>"
    return "struct<" + ", ".join(f"{q(c)}:{spark_type(t)}" for c, t in types.items()) + ">"


def ensure_changelog(spark: Any, ident: str, plan: SchemaPlan) -> None:
    """Create the changelog table, or add new columns to its images."""
    if not table_exists(spark, ident):
        st = _struct_type(plan.types)
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {ident} (_cdc {CHANGELOG_STRUCT}, before {st}, "
            f"after {st}) USING iceberg TBLPROPERTIES ('format-version'='2')"
        )
        return
    for image in ("before", "after"):
        for c, t in plan.add.items():
            spark.sql(f"ALTER TABLE {ident} ADD COLUMNS ({image}.{q(c)} {spark_type(t)})")
        for c, t in plan.widen.items():
            spark.sql(f"ALTER TABLE {ident} ALTER COLUMN {image}.{q(c)} TYPE {spark_type(t)}")


def apply_append(
    spark: Any,
    events: Any,
    ident: str,
    types: Mapping[str, str],
    pipeline: str,
    batch_id: int,
    check_ledger: bool,
) -> int:
    """Append one batch's events of one table to its changelog; returns rows offered."""
    if check_ledger and "append" in committed_steps(spark, ident, pipeline, batch_id):
        return 0
    src = view_name("changes")
    events.createOrReplaceTempView(src)

    def image(name: str) -> str:
        if not types:
            return "CAST(NULL AS struct<_empty:string>)"
        fields = ", ".join(
            f"{lit(c)}, {spark_from_wire(f'{name}[{lit(c)}]', t)}" for c, t in types.items()
        )
        return f"CASE WHEN {name} IS NULL THEN NULL ELSE named_struct({fields}) END"

    rows = view_name("changelog")
    spark.sql(
        f"""
        SELECT named_struct('operation', operation, 'sequence', sequence,
                            'source_timestamp', timestamp, 'event_id', id, 'fingerprint', _fp,
                            'transaction_id', transaction_id, 'partial', partial,
                            'applied_at', current_timestamp()) AS _cdc,
               {image("before")} AS before, {image("after")} AS after
        FROM (SELECT *, row_number() OVER (PARTITION BY id, _fp ORDER BY origin, offset, item)
                        AS _rn FROM {src}
              WHERE operation IN ('INSERT','UPDATE','UPSERT','SNAPSHOT','DELETE','TRUNCATE'))
        WHERE _rn = 1
        """
    ).createOrReplaceTempView(rows)
    n = spark.sql(f"SELECT count(*) AS n FROM {rows}").collect()[0]["n"]
    with commit_properties(spark, ledger_props(pipeline, batch_id, "append")):
        spark.sql(
            f"""
            MERGE INTO {ident} t USING {rows} s
            ON t._cdc.event_id = s._cdc.event_id AND t._cdc.fingerprint = s._cdc.fingerprint
            WHEN NOT MATCHED THEN INSERT *
            """
        )
    spark.catalog.dropTempView(src)
    spark.catalog.dropTempView(rows)
    return int(n)
