"""CockroachDB (names as ``SHOW COLUMNS`` prints them, plus aliases). Changefeed JSON carries no
types: declared column types go through this table. ``TIMESTAMP`` is wall-clock time
(timestamp_ntz), ``TIMESTAMPTZ`` an instant; ``DECIMAL`` without precision keeps 18 fractional
digits; ``BIT``/``VARBIT`` are bit strings ('0101'); ``INTERVAL``, ``INET``, ``ENUM`` and
``TIMETZ`` are kept as text; ``STRING[]``-style arrays go through the generic array handling.
"""

from __future__ import annotations

import re

from cdcflow.types.canonical import DEFAULT_DECIMAL
from cdcflow.types.vendors import DECIMAL, STANDARD_NUMBERS, VendorTypes, source_type

NAMES: dict[str, str] = {
    "int": "bigint",
    "int8": "bigint",
    "int64": "bigint",
    "integer": "bigint",
    "bigint": "bigint",
    "int4": "int",
    "int2": "int",
    "smallint": "int",
    "serial": "bigint",
    "bigserial": "bigint",
    "float": "double",
    "float8": "double",
    "double precision": "double",
    "real": "float",
    "float4": "float",
    "decimal": DEFAULT_DECIMAL,
    "numeric": DEFAULT_DECIMAL,
    "dec": DEFAULT_DECIMAL,
    "bool": "boolean",
    "boolean": "boolean",
    "string": "string",
    "text": "string",
    "varchar": "string",
    "character varying": "string",
    "char": "string",
    "character": "string",
    "name": "string",
    "citext": "string",
    "bytes": "binary",
    "bytea": "binary",
    "blob": "binary",
    "date": "date",
    "time": "time",
    "time without time zone": "time",
    "timetz": "string",
    "timestamp": "timestamp_ntz",
    "timestamp without time zone": "timestamp_ntz",
    "timestamptz": "timestamp",
    "timestamp with time zone": "timestamp",
    "interval": "string",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
    "inet": "string",
    "bit": "string",
    "varbit": "string",
    "bit varying": "string",
    "enum": "string",
    "oid": "bigint",
    "geometry": "string",
    "geography": "string",
    "ltree": "string",
    "tsvector": "string",
    "tsquery": "string",
}

TYPES = VendorTypes(
    "cockroachdb",
    NAMES,
    numbers={**STANDARD_NUMBERS, "dec": DECIMAL},
    # TIMESTAMP is wall-clock time, INT and FLOAT are 64-bit
    names_first=True,
    # internal array names: _int8
    arrays=(re.compile(r"^_(.+)$"),),
)


def cockroachdb_type(native: str) -> str:
    """Canonical type of a CockroachDB column type (:func:`source_type` of ``cockroachdb``)."""
    return source_type("cockroachdb", native)
