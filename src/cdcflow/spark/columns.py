"""What a ``pyspark.sql.Column`` given to the API stands for, on Spark 3.5 and 4.x alike.

Spark 3.5's ``Column`` wraps a Catalyst expression; Spark 4's wraps a ``ColumnNode``. The API
needs two things of one: the Spark SQL text of a condition over the canonical event's columns
(resolved against them, so it reads the same on every line), and the column names of a
``sequence_by`` (a column, or a struct of columns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdcflow.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column


def condition_sql(value: Column, what: str) -> str:
    """The Spark SQL text of a condition over the canonical event's columns (``operation``,
    ``after``, ``metadata``…), as Spark resolves it. Needs a running session."""
    from pyspark.sql import SparkSession

    from cdcflow.event import spark_schema_ddl

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError(
            f"{what} given as a Column needs a running SparkSession to be read",
            hint="start the session first (cdcflow.api.session()), or give Spark SQL text",
        )
    frame = spark.createDataFrame([], spark_schema_ddl())
    try:
        plan = frame.select(value.alias("_c"))._jdf.queryExecution().analyzed()
        return str(plan.projectList().apply(0).child().sql())
    except Exception as e:  # Spark's analysis error: the condition names unknown columns
        raise ConfigError(
            f"{what} is not a condition over the canonical event's columns: {e}",
            hint="use operation, before, after, metadata, table, … e.g. F.col('after')['op'] "
            "== 'D'",
        ) from None


def _column_nodes() -> bool:
    """Whether the running PySpark's ``Column`` wraps a ``ColumnNode`` (Spark 4) rather than a
    Catalyst expression (Spark 3.5). Asked of the version: a py4j object answers ``hasattr``
    for any name."""
    import pyspark

    return int(pyspark.__version__.split(".")[0]) >= 4


def column_names(value: Column) -> list[str] | None:
    """The names of a column, or of the columns of a struct of columns; ``None`` for any other
    expression."""
    jc: Any = value._jc
    if _column_nodes():  # Spark 4: a ColumnNode
        node = jc.node()
        kind = str(node.getClass().getSimpleName())
        if kind == "UnresolvedAttribute":
            return [str(node.nameParts().mkString("."))]
        if kind == "UnresolvedFunction" and str(node.functionName()) == "struct":
            args = node.arguments()
            parts = [args.apply(i) for i in range(args.size())]
            if all(str(p.getClass().getSimpleName()) == "UnresolvedAttribute" for p in parts):
                return [str(p.nameParts().mkString(".")) for p in parts]
        return None
    expr = jc.expr()  # Spark 3.5: a Catalyst expression
    kind = str(expr.getClass().getSimpleName())
    if kind == "UnresolvedAttribute":
        return [str(expr.name())]
    if kind == "CreateNamedStruct":
        values = expr.valExprs()
        parts = [values.apply(i) for i in range(values.size())]
        if all(str(p.getClass().getSimpleName()) == "UnresolvedAttribute" for p in parts):
            return [str(p.name()) for p in parts]
    return None


def column_sql(value: Column) -> str:
    """The expression of a column as text, for messages."""
    jc: Any = value._jc
    return str(jc.node().sql() if _column_nodes() else jc.expr().sql())
