"""The hand-written jobs cdcflow is measured against, as a data engineer writes them: Spark's
``from_json`` with a schema, then per table a dedup by ``row_number`` and a ``MERGE`` (and its
scd2 form)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import BASELINE_SCHEMA, FORMAT, MULTI_COLUMNS

if TYPE_CHECKING:
    pass

#: A PostgreSQL LSN (``16/B374D848``) as the number it stands for: as text ``0/FFFF`` sorts
#: after ``0/10000``
LSN_NUMBER = (
    "CAST(conv(split(e.position.lsn, '/')[0], 16, 10) AS bigint) * 4294967296 + "
    "CAST(conv(split(e.position.lsn, '/')[1], 16, 10) AS bigint)"
)


def handwritten(spark: Any, folder: Path, table: str) -> None:
    """The minimal pipeline people write by hand: dedup by row_number, one MERGE, no guards.
    Its events are ordered by the LSN's number (the (b) files span LSNs of several hex
    widths, where ordering by the text would keep older events)."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} (id bigint, name string, qty bigint, "
        "price decimal(10,2), updated_at timestamp) USING iceberg "
        f"TBLPROPERTIES ('format-version'='{FORMAT}', 'write.merge.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
    )
    src = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
    src.createOrReplaceTempView("bench_raw")
    spark.sql(f"""
        SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op, e.after.name AS name,
               e.after.qty AS qty, CAST(e.after.price AS decimal(10,2)) AS price,
               CAST(e.after.updated_at AS timestamp) AS updated_at,
               row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                  ORDER BY {LSN_NUMBER} DESC) AS rn
        FROM bench_raw
    """).where("rn = 1").createOrReplaceTempView("bench_latest")
    spark.sql(f"""
        MERGE INTO {table} t USING bench_latest s ON t.id = s.id
        WHEN MATCHED AND s.op = 'DELETE' THEN DELETE
        WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, price = s.price,
             updated_at = s.updated_at
        WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT (id, name, qty, price, updated_at)
             VALUES (s.id, s.name, s.qty, s.price, s.updated_at)
    """)


def _hand_start(
    spark: Any, files: list[Path] | Any, namespace: str, tables: int, columns: str, view: str
) -> Any:
    """The hand-written jobs' start: their tables, and the batch parsed once (cached) as
    ``view``. ``files``: JSON-lines files, or a DataFrame of the lines (a string ``value``)."""
    for t in range(tables):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS cdc.{namespace}.t{t:03d} ({columns}) USING iceberg "
            f"TBLPROPERTIES ('format-version'='{FORMAT}', 'write.merge.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
        )
    lines = spark.read.text([str(f) for f in files]) if isinstance(files, list) else files
    src = lines.selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e").cache()
    src.createOrReplaceTempView(view)
    return src


def handwritten_tables(spark: Any, files: list[Path] | Any, namespace: str, tables: int) -> None:
    """What people write by hand for many tables: parse the batch once, then per table a
    row_number dedup and one MERGE, one table after another."""
    src = _hand_start(spark, files, namespace, tables, MULTI_COLUMNS, "bench_multi_raw")
    try:
        for t in range(tables):
            name = f"t{t:03d}"
            spark.sql(f"""
                SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op,
                       e.after.name AS name, e.after.qty AS qty,
                       CAST(e.after.price AS decimal(10,2)) AS price,
                       CAST(e.after.updated_at AS timestamp) AS updated_at,
                       row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                          ORDER BY e.position.lsn DESC) AS rn
                FROM bench_multi_raw WHERE e.`table` = '{name}'
            """).where("rn = 1").createOrReplaceTempView("bench_multi_latest")
            spark.sql(f"""
                MERGE INTO cdc.{namespace}.{name} t USING bench_multi_latest s ON t.id = s.id
                WHEN MATCHED AND s.op = 'DELETE' THEN DELETE
                WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, price = s.price,
                     updated_at = s.updated_at
                WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT *
            """)
    finally:
        src.unpersist()


HISTORY_COLUMNS = f"{MULTI_COLUMNS}, __START_AT string, __END_AT string, __CURRENT boolean"


def handwritten_history(spark: Any, files: list[Path], namespace: str, tables: int) -> None:
    """The SCD type 2 job people write by hand: the newest event per key of the batch, then one
    MERGE of a staged union that closes the current version and inserts the new one (a key's
    earlier events in the same batch, and events arriving late, are not kept as versions)."""
    src = _hand_start(spark, files, namespace, tables, HISTORY_COLUMNS, "bench_hist_raw")
    changed = "(t.name <=> s.name AND t.qty <=> s.qty AND t.price <=> s.price) = false"
    try:
        for t in range(tables):
            name = f"t{t:03d}"
            spark.sql(f"""
                SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op,
                       e.after.name AS name, e.after.qty AS qty,
                       CAST(e.after.price AS decimal(10,2)) AS price,
                       CAST(e.after.updated_at AS timestamp) AS updated_at,
                       e.position.lsn AS lsn,
                       row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                          ORDER BY e.position.lsn DESC) AS rn
                FROM bench_hist_raw WHERE e.`table` = '{name}'
            """).where("rn = 1").createOrReplaceTempView("bench_hist_latest")
            spark.sql(f"""
                MERGE INTO cdc.{namespace}.{name} t
                USING (
                    SELECT s.id AS merge_key, s.* FROM bench_hist_latest s
                    UNION ALL
                    SELECT NULL AS merge_key, s.* FROM bench_hist_latest s
                    JOIN cdc.{namespace}.{name} t ON t.id = s.id AND t.__CURRENT
                    WHERE s.op <> 'DELETE' AND {changed}
                ) s
                ON t.id = s.merge_key AND t.__CURRENT
                WHEN MATCHED AND (s.op = 'DELETE' OR {changed}) THEN
                    UPDATE SET __END_AT = s.lsn, __CURRENT = false
                WHEN NOT MATCHED AND s.op <> 'DELETE' THEN
                    INSERT (id, name, qty, price, updated_at, __START_AT, __END_AT, __CURRENT)
                    VALUES (s.id, s.name, s.qty, s.price, s.updated_at, s.lsn, NULL, true)
            """)
    finally:
        src.unpersist()
