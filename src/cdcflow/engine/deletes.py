"""Events applied as deletes: ``tables.<t>.apply_as_deletes`` conditions.

A producer may mark a deleted row in the row itself (an ``op`` column, a ``deleted`` flag)
instead of sending a delete. A table's condition, a Spark SQL expression over the canonical
event's fields, turns such a row event into a ``DELETE`` of its key whose before image is the
event's row image, before anything else looks at the batch — so dedup, ordering, tombstones and
soft deletes treat it as the delete it stands for. Events the producer already sent as deletes
stay deletes; markers, table events and rejections are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cdcflow.errors import ConfigError
from cdcflow.spark.sql import lit, q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Operations a condition may turn into ``DELETE``.
MARKABLE = ("INSERT", "UPDATE", "UPSERT", "SNAPSHOT")


def marked_sql(conditions: Mapping[str, str | None], target: str) -> str | None:
    """SQL: whether an event is applied as a delete, by the condition of its target table
    (``conditions``: per table entry of the configuration, ``default`` for tables without an
    entry of their own; ``target``: SQL of the event's replica name) — ``None`` when no table
    has a condition."""
    otherwise = conditions.get("default")
    named = {t: c for t, c in conditions.items() if t != "default"}
    if otherwise is None and not any(named.values()):
        return None
    branches = " ".join(
        f"WHEN {lit(t)} THEN {f'({cond})' if cond else 'false'}"
        for t, cond in sorted(named.items())
    )
    chosen = f"CASE {target} {branches} ELSE {f'({otherwise})' if otherwise else 'false'} END"
    if not branches:
        chosen = f"({otherwise})"
    ops = ", ".join(lit(o) for o in MARKABLE)
    return f"(error_code IS NULL AND operation IN ({ops}) AND coalesce({chosen}, false))"


def as_deletes(columns: Sequence[str], marked: str) -> list[str]:
    """Select expressions over decoded rows (``columns``) that apply the ``marked`` events as
    deletes: operation ``DELETE``, the row image as the before image, no after image."""
    changed = {
        "operation": f"CASE WHEN {marked} THEN 'DELETE' ELSE operation END",
        "before": f"CASE WHEN {marked} THEN coalesce(after, before) ELSE before END",
        "after": f"CASE WHEN {marked} THEN CAST(NULL AS map<string,string>) ELSE after END",
        "partial": f"CASE WHEN {marked} THEN false ELSE partial END",
    }
    return [f"{changed[c]} AS {q(c)}" if c in changed else q(c) for c in columns]


def check_conditions(spark: SparkSession, conditions: Mapping[str, str | None]) -> None:
    """Refuse a condition Spark cannot read over canonical events, naming the table (Spark
    analyses it without running a job)."""
    from cdcflow.event import spark_schema_ddl

    empty = spark.createDataFrame([], spark_schema_ddl())
    for name, condition in sorted(conditions.items()):
        if not condition:
            continue
        try:
            empty.selectExpr(f"coalesce(({condition}), false) AS d")
        except Exception as e:  # Spark's parse and analysis errors alike
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"tables.{name}.apply_as_deletes: {condition!r} is not a "
                f"condition over canonical events ({first[:300]})",
                hint="use the event's fields: operation, table, key['id'], after['op'], "
                "metadata['…'] …",
            ) from None
