"""The text of typed values inside the batch's SQL: a key's values normalised to their
column type (so ``1.50`` and ``1.5`` in a ``decimal(10,1)`` key are one key), and each table's
``sequence_by`` columns encoded so that text order is the columns' order (the event's
``sequence`` for tables ordered by their own columns). Plain text, no Spark."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cdcflow.engine.meta import KEY_VALUES, ROW_OPERATIONS
from cdcflow.engine.plan import TablePlan
from cdcflow.spark.sql import lit, string_array
from cdcflow.types.canonical import storage_type

#: the row operations, as an SQL list
ROW_OPS = "(" + ", ".join(lit(o) for o in ROW_OPERATIONS) + ")"
#: the operations that carry a key (row operations and ``TRUNCATE``), as an SQL list
KEYED_OPS = "(" + ", ".join(lit(o) for o in (*ROW_OPERATIONS, "TRUNCATE")) + ")"


def normalise(value: str, t: str) -> str:
    """SQL turning a wire string into the canonical text of its typed value (``1.50`` in a
    ``decimal(10,1)`` column is ``1.5``), so equal keys compare equal as text; ``NULL`` for
    a value the type cannot read (an event of another type, which the engine rejects: with
    ANSI casts a failing ``CAST`` would fail the whole batch, at every rerun)."""
    st = storage_type(t)
    if t in ("string", "uuid", "json", "time"):
        return value
    if t == "binary":
        return f"base64(try_to_binary({value}, 'base64'))"
    if t == "point" or t.startswith("array<"):
        return f"to_json(from_json({value}, {lit(st)}))"
    return f"CAST(try_cast({value} AS {st}) AS string)"


def typed_text(column: str, spark_type_name: str) -> str:
    """SQL giving a typed column's value as the text :func:`normalise` gives its wire string
    (``spark_type_name`` as a Spark ``simpleString``)."""
    if spark_type_name == "binary":
        return f"base64({column})"
    if spark_type_name.startswith(("array<", "struct<")):
        return f"to_json({column})"
    return f"CAST({column} AS string)"


def key_values_sql(
    keys: Mapping[str, Sequence[tuple[str, str]]], value: Callable[[str, int], str]
) -> str:
    """``array<string>`` of an event's key values, normalised to their column types, per
    target table (``keys``: each table's key columns and types; ``NULL`` for other tables).
    ``value(column, i)`` gives the SQL of the ``i``-th key column's wire string. Tables keyed
    alike share one branch; no lambda (Spark interprets those row by row)."""
    alike: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for target, columns in keys.items():
        alike.setdefault(tuple(columns), []).append(target)
    branches = [
        f"WHEN _target IN ({', '.join(lit(t) for t in targets)}) THEN array("
        + ", ".join(normalise(value(c, i), t) for i, (c, t) in enumerate(columns))
        + ")"
        for columns, targets in alike.items()
        if columns
    ]
    return f"CASE {' '.join(branches)} END" if branches else "CAST(NULL AS array<string>)"


def event_key_value(column: str, i: int, image: str) -> str:
    """SQL of an event's wire string of its ``i``-th key column: from ``key``, else the
    positional ``metadata.key_values``, else the row image (``image``, a SQL expression)."""
    return (
        f"coalesce(key[{lit(column)}], "
        f"get(from_json(metadata[{lit(KEY_VALUES)}], 'array<string>'), {i}), "
        f"{image}[{lit(column)}])"
    )


def has_null_sql(values: str, size: int) -> str:
    """SQL: whether an array of at most ``size`` elements holds a ``NULL`` (no lambda)."""
    return (
        "("
        + " OR ".join(f"(size({values}) > {i} AND get({values}, {i}) IS NULL)" for i in range(size))
        + ")"
        if size
        else "false"
    )


# --------------------------------------------------------------------------- sequence_by


def encoded_integer(n: str) -> str:
    """SQL of :func:`cdcflow.sequence.encode` of one integer (``n``: a ``decimal(38,0)``
    expression), so a column's values order like the producers' sequences."""
    digits = f"CAST(abs({n}) AS string)"
    return (
        f"CASE WHEN {n} >= 0 THEN concat('p', lpad(CAST(length({digits}) AS string), 2, '0'), "
        f"{digits}, '!') ELSE concat('n', lpad(CAST(99 - length({digits}) AS string), 2, '0'), "
        f"translate({digits}, '0123456789', '9876543210'), '!') END"
    )


def encoded_sql(value: str, t: str | None) -> str | None:
    """SQL of the order-preserving encoding of a wire string of type ``t`` (integers, dates,
    timestamps and text), ``None`` for types without one."""
    if t in ("int", "bigint"):
        return encoded_integer(f"try_cast({value} AS decimal(38,0))")
    if t in ("timestamp", "timestamp_ntz"):
        return encoded_integer(
            f"CAST(unix_micros(try_cast({value} AS timestamp)) AS decimal(38,0))"
        )
    if t == "date":
        return encoded_integer(f"CAST(unix_date(try_cast({value} AS date)) AS decimal(38,0))")
    if t in ("string", "uuid"):
        # characters up to '"' are escaped as in cdcflow.sequence
        chars = (
            f"transform(split({value}, ''), c -> CASE WHEN ascii(c) BETWEEN 1 AND 34 "
            "THEN concat('\"', char(35 + ascii(c))) ELSE c END)"
        )
        return f"concat('s', array_join({chars}, ''), '!')"
    return None


def sequence_sql(plans: Sequence[TablePlan]) -> str | None:
    """The events' ``sequence`` taken from the columns that order a table's events
    (``sequence_by``, compared in turn: their encodings one after the other): each the
    ``after`` image's value, else the ``before`` image's (deletes); ``NULL`` (rejected as
    ``SEQUENCE_MISSING``) when the event lacks one or a column's type cannot order events.
    ``None`` when no table is ordered by its columns."""
    branches = []
    for p in plans:
        if not p.sequence_by:
            continue
        parts = [
            encoded_sql(f"coalesce(after[{lit(c)}], before[{lit(c)}])", t)
            for c, t in zip(p.sequence_by, p.sequence_types, strict=True)
        ]
        found = [e for e in parts if e is not None]
        encoded = f"concat({', '.join(found)})" if len(found) == len(parts) else None
        branches.append(f"WHEN {lit(p.target)} THEN {encoded or 'CAST(NULL AS string)'}")
    if not branches:
        return None
    return f"CASE _target {' '.join(branches)} ELSE sequence END"


def newest_truncates_sql(events: str, plans: Sequence[TablePlan]) -> str:
    """The newest ``TRUNCATE`` of each table ordered by ``sequence_by`` columns, in their
    order (``events``: the view of the events with their ``sequence`` so ordered)."""
    targets = string_array(p.target for p in plans)
    return (
        f"SELECT _target, max(sequence) AS seq FROM {events} "
        f"WHERE operation = 'TRUNCATE' AND error_code IS NULL "
        f"AND array_contains({targets}, _target) GROUP BY _target"
    )
