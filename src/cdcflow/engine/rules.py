"""Table rules applied to row events before anything else looks at the batch:
``tables.<t>.apply_as_deletes``, ``apply_as_truncates`` and ``ignore_null_updates``.

A producer may mark a deleted row in the row itself (an ``op`` column, a ``deleted`` flag)
instead of sending a delete: a table's ``apply_as_deletes`` condition, a Spark SQL expression
over the canonical event's fields, turns such a row event into a ``DELETE`` of its key whose
before image is the event's row image. ``apply_as_truncates`` turns an event into a
``TRUNCATE`` of its table at the event's sequence. ``ignore_null_updates`` drops a row event's
``NULL`` values, so the event changes only the columns it gives a value (a partial event).
Dedup, ordering, tombstones and soft deletes then treat each event as what it stands for.
Events the producer already sent as deletes stay deletes; markers, table events and
rejections are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cdcflow.errors import ConfigError
from cdcflow.spark.sql import lit, q

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.config import PipelineConfig

#: Operations a rule applies to.
MARKABLE = ("INSERT", "UPDATE", "UPSERT", "SNAPSHOT")
#: The table settings that are conditions over canonical events.
CONDITIONS = ("apply_as_deletes", "apply_as_truncates")


def conditions(cfg: PipelineConfig, setting: str) -> dict[str, str | None]:
    """A rule's condition for each table entry of a configuration (``ignore_null_updates``:
    ``true`` for the tables that set it)."""
    if setting == "ignore_null_updates":
        return {n: "true" if t.ignore_null_updates else None for n, t in cfg.tables.items()}
    return {name: getattr(t, setting) for name, t in cfg.tables.items()}


def marked_sql(conditions: Mapping[str, str | None], target: str) -> str | None:
    """SQL: whether a row event is marked by the condition of its target table
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


def applied(
    columns: Sequence[str],
    *,
    deletes: str | None = None,
    truncates: str | None = None,
    nulls: str | None = None,
) -> list[str]:
    """Select expressions over decoded rows (``columns``) applying the rules' marks (SQL of
    :func:`marked_sql`): ``truncates`` first (a ``TRUNCATE`` without key, its row image as the
    before image), then ``deletes`` (a ``DELETE`` likewise), then ``nulls`` (``NULL`` values
    dropped from the after image, which becomes partial)."""
    trunc, dele, null = truncates or "false", deletes or "false", nulls or "false"
    gone = f"({trunc} OR {dele})"
    has_null = "exists(map_values(after), v -> v IS NULL)"
    changed = {
        "operation": (
            f"CASE WHEN {trunc} THEN 'TRUNCATE' WHEN {dele} THEN 'DELETE' ELSE operation END"
        ),
        "key": f"CASE WHEN {trunc} THEN CAST(NULL AS map<string,string>) ELSE key END",
        # the row image stays as the before image: it holds the sequence_by columns
        "before": f"CASE WHEN {gone} THEN coalesce(after, before) ELSE before END",
        "after": (
            f"CASE WHEN {gone} THEN CAST(NULL AS map<string,string>) "
            f"WHEN {null} THEN map_filter(after, (k, v) -> v IS NOT NULL) ELSE after END"
        ),
        "partial": (
            f"CASE WHEN {gone} THEN false WHEN {null} AND {has_null} THEN true ELSE partial END"
        ),
    }
    return [f"{changed[c]} AS {q(c)}" if c in changed else q(c) for c in columns]


def check_conditions(spark: SparkSession, cfg: PipelineConfig) -> None:
    """Refuse a condition Spark cannot read over canonical events, naming the table and the
    setting (Spark analyses it without running a job)."""
    from cdcflow.event import spark_schema_ddl

    empty = spark.createDataFrame([], spark_schema_ddl())
    for setting in CONDITIONS:
        for name, condition in sorted(conditions(cfg, setting).items()):
            if not condition:
                continue
            try:
                empty.selectExpr(f"coalesce(({condition}), false) AS d")
            except Exception as e:  # Spark's parse and analysis errors alike
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(
                    f"tables.{name}.{setting}: {condition!r} is not a "
                    f"condition over canonical events ({first[:300]})",
                    hint="use the event's fields: operation, table, key['id'], after['op'], "
                    "metadata['…'] …",
                ) from None
