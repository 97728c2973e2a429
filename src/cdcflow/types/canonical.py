"""The canonical type system: type names, their Spark storage, and safe widening.

A canonical event carries typed row images (``before``/``after``/``key``) and, in ``types``, the
canonical type of each column. Canonical type names are Spark SQL names plus a few logical names
that Iceberg stores as strings or structs:

=====================  ==================================  ===================================
canonical type         Python value                        Iceberg / Spark column
=====================  ==================================  ===================================
``boolean``            ``bool``                            boolean
``int`` ``bigint``     ``int``                             int / bigint
``float`` ``double``   ``float``                           float / double
``decimal(p,s)``       ``decimal.Decimal``                 decimal(p,s), 1 ≤ p ≤ 38, s ≤ p
``string``             ``str``                             string
``binary``             ``bytes``                           binary
``date``               ``datetime.date``                   date
``timestamp``          aware ``datetime`` (UTC)            timestamp (with zone, UTC)
``timestamp_ntz``      naive ``datetime``                  timestamp_ntz (wall clock)
``time``               ``str`` ``HH:MM:SS[.ffffff]``       string (Spark has no time type)
``uuid``               ``str`` (lower case)                string
``json``               ``str`` (JSON text)                 string
``array<T>``           ``list``                            array<T>
``point``              ``{"x": float, "y": float}``        struct<x:double,y:double>
=====================  ==================================  ===================================

Any other name is not a type of cdcflow: :func:`spark_type` refuses it (``ValueTypeError``) and
the decoders reject an event declaring it (``BAD_TYPE``), so it never reaches a table's DDL.
"""

from __future__ import annotations

import re
from functools import lru_cache

DEFAULT_DECIMAL = "decimal(38,18)"
#: Iceberg's (and Spark's) largest decimal precision.
MAX_PRECISION = 38
_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_ARRAY_RE = re.compile(r"^array<(.+)>$")
#: A canonical decimal's name: precision and scale without leading zeros (checked: p ≤ 38, s ≤ p).
_CANONICAL_DECIMAL = r"decimal\(([1-9][0-9]?),\s*(0|[1-9][0-9]?)\)"
_CANONICAL_DECIMAL_RE = re.compile(f"^{_CANONICAL_DECIMAL}$")

SCALAR_TYPES = frozenset(
    {
        "boolean",
        "int",
        "bigint",
        "float",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "time",
        "uuid",
        "json",
        "point",
    }
)

#: Canonical types Spark stores otherwise (everything else is stored under its own name).
_STORED_AS = {
    "time": "string",
    "uuid": "string",
    "json": "string",
    "point": "struct<x:double,y:double>",
}


class ValueTypeError(ValueError):
    """A wire value does not parse as its declared type, or a type name is not canonical."""


def decimal_type(precision: int, scale: int) -> str:
    """Canonical name of a decimal type, clamped to Iceberg's maximum precision of 38."""
    if precision > MAX_PRECISION:
        precision = MAX_PRECISION
    if scale > precision:
        scale = precision
    return f"decimal({precision},{scale})"


@lru_cache(maxsize=1024)
def parse_decimal_type(t: str) -> tuple[int, int] | None:
    """``decimal(p,s)`` → (p, s), else ``None``."""
    m = _DECIMAL_RE.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


@lru_cache(maxsize=1024)
def is_valid_type(t: str) -> bool:
    """Whether ``t`` is a canonical type name (a decimal's precision 1 to 38, its scale at
    most its precision)."""
    if t in SCALAR_TYPES:
        return True
    m = _CANONICAL_DECIMAL_RE.match(t)
    if m is not None:
        p, s = int(m.group(1)), int(m.group(2))
        return p <= MAX_PRECISION and s <= p
    m = _ARRAY_RE.match(t)
    return m is not None and is_valid_type(m.group(1))


def spark_type(t: str) -> str:
    """Spark SQL type used for a canonical type in a replica table; ``ValueTypeError`` for a
    name that is not a canonical type."""
    if not is_valid_type(t):
        raise ValueTypeError(f"not a canonical type: {t!r} ({CANONICAL_TYPES_TEXT})")
    return _stored(t)


def _stored(t: str) -> str:
    m = _ARRAY_RE.match(t)
    if m:
        return f"array<{_stored(m.group(1))}>"
    return _STORED_AS.get(t, t)


def storage_type(t: str) -> str:
    """The Spark type values of type ``t`` are stored as: :func:`spark_type` of a canonical
    type, the name itself for a column type read from an existing table (a Spark type such
    as ``smallint``). For comparing storage and casting into existing columns, never for the
    DDL of new or widened columns (:func:`spark_type`)."""
    return _stored(t) if is_valid_type(t) else t


#: The canonical types in words, for messages.
CANONICAL_TYPES_TEXT = (
    f"canonical types are {', '.join(sorted(SCALAR_TYPES))}, decimal(p,s) with p ≤ 38 and "
    "s ≤ p, and array<T>"
)


def spark_from_wire(expr: str, t: str) -> str:
    """Spark SQL expression turning a wire string ``expr`` back into column type ``t`` (a
    canonical type, or the Spark type of an existing column: see :func:`storage_type`)."""
    st = storage_type(t)
    if t in ("string", "time", "uuid", "json"):
        return expr
    if t == "binary":
        return f"unbase64({expr})"
    if t == "point" or t.startswith("array<"):
        return f"from_json({expr}, '{st}')"
    return f"cast({expr} as {st})"


def canonical_type_sql(expr: str) -> str:
    """Spark SQL condition: the string ``expr`` is a canonical type name (what
    :func:`is_valid_type` says, for type names given as Spark columns)."""
    scalars = "|".join(sorted(SCALAR_TYPES))
    inner = f"regexp_replace(regexp_replace({expr}, '^(array<)+', ''), '>+$', '')"
    opened = f"(size(split({expr}, 'array<')) - 1)"
    closed = f"(length({expr}) - length(replace({expr}, '>', '')))"
    pattern = _CANONICAL_DECIMAL.replace("\\", "\\\\")
    p, s = (f"cast(regexp_extract({inner}, '^{pattern}$', {i}) AS int)" for i in (1, 2))
    # CASE, not AND: Spark does not promise to skip the casts of a name that is no decimal
    decimal = (
        f"CASE WHEN {inner} RLIKE '^{pattern}$' THEN {p} <= {MAX_PRECISION} AND {s} <= {p} END"
    )
    return (
        f"coalesce({opened} = {closed} AND ({inner} RLIKE '^({scalars})$' "
        f"OR coalesce({decimal}, false)), false)"
    )


_INT_RANK = {"int": 1, "bigint": 2}
_FLOAT_RANK = {"float": 1, "double": 2}


def widen(old: str, new: str) -> str | None:
    """The type a column must have to hold values of both ``old`` and ``new`` without loss,
    limited to the widenings Iceberg allows (int→bigint, float→double, decimal precision up with
    the same scale). ``None`` when no such safe type exists.
    """
    if old == new:
        return old
    if old in _INT_RANK and new in _INT_RANK:
        return old if _INT_RANK[old] >= _INT_RANK[new] else new
    if old in _FLOAT_RANK and new in _FLOAT_RANK:
        return old if _FLOAT_RANK[old] >= _FLOAT_RANK[new] else new
    do, dn = parse_decimal_type(old), parse_decimal_type(new)
    if do and dn:
        if do[1] != dn[1]:
            return None
        return old if do[0] >= dn[0] else new
    if do and new in _INT_RANK:
        # an integer fits a decimal column when the integer part has room for it
        digits = 10 if new == "int" else 19
        return old if do[0] - do[1] >= digits else None
    # Same storage type (e.g. json stored in a string column): the column type stays.
    if storage_type(old) == storage_type(new) == "string":
        return old
    return None
