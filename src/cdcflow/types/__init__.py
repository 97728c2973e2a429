"""Column types in three places, one rule each:

- :mod:`cdcflow.types.canonical`: the canonical type system (names, Spark storage, widening);
- :mod:`cdcflow.types.values`: values of those types (conversion, the type of a JSON value,
  wire strings);
- :mod:`cdcflow.types.vendors`: vendor type names → canonical types, one module of tables per
  vendor, read by one algorithm (:func:`~cdcflow.types.vendors.source_type`).

The names the rest of cdcflow uses are importable from here.
"""

from __future__ import annotations

from cdcflow.types.canonical import (
    CANONICAL_TYPES_TEXT,
    DEFAULT_DECIMAL,
    MAX_PRECISION,
    SCALAR_TYPES,
    ValueTypeError,
    canonical_type_sql,
    decimal_type,
    is_valid_type,
    parse_decimal_type,
    spark_from_wire,
    spark_type,
    storage_type,
    widen,
)
from cdcflow.types.values import (
    UTC,
    convert,
    decimal_text,
    from_wire,
    infer_type,
    json_bytes,
    json_default,
    parse_timestamp,
    parse_timestamp_ntz,
    plain_decimal_wire,
    to_wire,
    wire_json,
    wire_value,
)
from cdcflow.types.vendors import source_type
from cdcflow.types.vendors.cockroachdb import cockroachdb_type

__all__ = [
    "CANONICAL_TYPES_TEXT",
    "DEFAULT_DECIMAL",
    "MAX_PRECISION",
    "SCALAR_TYPES",
    "UTC",
    "ValueTypeError",
    "canonical_type_sql",
    "cockroachdb_type",
    "convert",
    "decimal_text",
    "decimal_type",
    "from_wire",
    "infer_type",
    "is_valid_type",
    "json_bytes",
    "json_default",
    "parse_decimal_type",
    "parse_timestamp",
    "parse_timestamp_ntz",
    "plain_decimal_wire",
    "source_type",
    "spark_from_wire",
    "spark_type",
    "storage_type",
    "to_wire",
    "widen",
    "wire_json",
    "wire_value",
]
