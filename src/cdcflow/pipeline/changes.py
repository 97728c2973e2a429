"""Change rows → canonical events, in Spark SQL.

A DataFrame of change rows — one row per change of one table, its columns the row's (as
Databricks' ``apply_changes`` takes: ``userId, name, city, operation, sequenceNum``) — becomes
canonical events that the pipeline's batch function applies as it applies any producer's: each
row an ``UPSERT`` of its image, a ``DELETE`` where the delete condition holds (its image the
before image), a ``TRUNCATE`` where the truncate condition does. Column types come from the
DataFrame's schema, values are written as wire strings (:func:`cdcflow.types.to_wire`), and the
ordering columns give the event's ``sequence`` (the order-preserving encoding of
:mod:`cdcflow.sequence`). Batch or streaming alike; no Python function runs per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdcflow.engine.encoding import encoded_sql
from cdcflow.errors import ConfigError, did_you_mean
from cdcflow.spark.kind import functions
from cdcflow.spark.sql import lit, q

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Spark types (``simpleString``) → canonical types, for the scalar types that have one.
_SCALARS = {
    "boolean": "boolean",
    "tinyint": "int",
    "smallint": "int",
    "int": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}
#: Canonical types an ordering column may have (those with an order-preserving encoding).
ORDERING_TYPES = ("int", "bigint", "date", "timestamp", "timestamp_ntz", "string")
_UTC_TEXT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


def canonical_type(spark_type: str) -> str:
    """The canonical type of a column of Spark type ``spark_type`` (``simpleString``): the
    scalars, decimals and arrays of them as themselves, ``varchar``/``char`` as ``string``,
    structs, maps and other arrays as ``json``, anything else as ``string``."""
    if spark_type in _SCALARS:
        return _SCALARS[spark_type]
    if spark_type.startswith(("varchar(", "char(")):
        return "string"
    if spark_type.startswith("decimal("):
        return spark_type.replace(" ", "")
    if spark_type.startswith("array<"):
        inner = canonical_type(spark_type[len("array<") : -1])
        plain = inner in _ARRAY_ELEMENTS or inner.startswith("decimal(")
        return f"array<{inner}>" if plain else "json"
    if spark_type.startswith(("struct<", "map<", "array<")):
        return "json"
    return "string"


_ARRAY_ELEMENTS = ("boolean", "int", "bigint", "float", "double", "string")


def wire_sql(column: str, spark_type: str) -> str:
    """Spark SQL of a column's value as its wire string (``NULL`` stays ``NULL``)."""
    c = q(column)
    kind = canonical_type(spark_type)
    if spark_type == "string" or spark_type.startswith(("varchar(", "char(")):
        return c
    if kind == "binary":
        return f"base64({c})"
    if kind == "timestamp":
        # an instant, written in UTC whatever the session's time zone
        return f"date_format(to_utc_timestamp({c}, current_timezone()), {lit(_UTC_TEXT)})"
    if kind == "json" or kind.startswith("array<"):
        return f"to_json({c})"
    return f"CAST({c} AS string)"


def _columns_named(found: Sequence[str], names: Sequence[str], what: str) -> None:
    for name in names:
        if name not in found:
            raise ConfigError(
                f"{what}: no column {name!r} in the change rows{did_you_mean(name, found)}",
                hint="columns: " + ", ".join(found),
            )


def change_events(
    rows: DataFrame,
    table: str,
    keys: Sequence[str],
    sequence_by: Sequence[str],
    deletes: str | Column | None = None,
    truncates: str | Column | None = None,
) -> DataFrame:
    """Canonical events of the change rows of ``table`` (batch or streaming): key columns
    ``keys``, ordered by ``sequence_by`` (compared in turn); ``deletes`` and ``truncates``:
    conditions over the rows' columns (Spark SQL text or a ``Column``) marking deletes and
    truncates."""
    from pyspark.errors import AnalysisException

    F = functions(rows.sparkSession)
    types = {f.name: f.dataType.simpleString() for f in rows.schema.fields}
    found = list(types)
    if not keys:
        raise ConfigError("keys: name the key columns of the change rows", hint="e.g. keys=['id']")
    _columns_named(found, keys, "keys")
    if not sequence_by:
        raise ConfigError(
            "sequence_by: name the column that orders each key's changes",
            hint="e.g. sequence_by='sequenceNum' (or several: ['epoch', 'seq'])",
        )
    _columns_named(found, sequence_by, "sequence_by")
    canonical = {c: canonical_type(t) for c, t in types.items()}
    for c in sequence_by:
        if canonical[c] not in ORDERING_TYPES:
            raise ConfigError(
                f"sequence_by: column {c!r} of type {types[c]} cannot order changes",
                hint="order by integers, dates, timestamps or text",
            )
    marks = []
    for name, condition in (("_cdc_truncate", truncates), ("_cdc_delete", deletes)):
        if condition is None:
            marks.append(F.lit(False).alias(name))
            continue
        mark = F.expr(condition) if isinstance(condition, str) else condition
        marks.append(F.coalesce(mark, F.lit(False)).alias(name))
    try:
        marked = rows.select(*(F.col(q(c)) for c in found), *marks)
        marked.schema  # noqa: B018  (a Spark Connect DataFrame is analysed when asked)
    except AnalysisException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"apply_as_deletes/apply_as_truncates is not a condition over the change rows' "
            f"columns ({first[:300]})",
            hint="columns: " + ", ".join(found),
        ) from None
    image = "map(" + ", ".join(f"{lit(c)}, {wire_sql(c, types[c])}" for c in found) + ")"
    key = "map(" + ", ".join(f"{lit(c)}, {wire_sql(c, types[c])}" for c in keys) + ")"
    kinds = "map(" + ", ".join(f"{lit(c)}, {lit(canonical[c])}" for c in found) + ")"
    parts = [encoded_sql(wire_sql(c, types[c]), canonical[c]) for c in sequence_by]
    operation = (
        "CASE WHEN _cdc_truncate THEN 'TRUNCATE' WHEN _cdc_delete THEN 'DELETE' ELSE 'UPSERT' END"
    )
    staged = marked.selectExpr(
        f"{operation} AS operation",
        f"{image} AS _image",
        f"CASE WHEN _cdc_truncate THEN CAST(NULL AS map<string,string>) ELSE {key} END AS key",
        f"concat({', '.join(str(p) for p in parts)}) AS sequence",
    )
    ident = f"sha2(to_json(named_struct('t', {lit(table)}, 'op', operation, 'row', _image)), 256)"
    return staged.selectExpr(
        f"concat('cdc-', substring({ident}, 1, 32)) AS id",
        f"{lit(table)} AS `table`",
        "operation",
        "sequence",
        "key",
        "CASE WHEN operation = 'UPSERT' THEN CAST(NULL AS map<string,string>) ELSE _image END "
        "AS before",
        "CASE WHEN operation = 'UPSERT' THEN _image END AS after",
        f"{kinds} AS types",
    )
