"""Postgres, from the unified format's type-mapping table plus the usual aliases."""

from __future__ import annotations

import re

from cdcflow.types.canonical import DEFAULT_DECIMAL
from cdcflow.types.vendors import VendorTypes

NAMES: dict[str, str] = {
    "smallint": "int",
    "int2": "int",
    "integer": "int",
    "int": "int",
    "int4": "int",
    "serial": "int",
    "bigint": "bigint",
    "int8": "bigint",
    "bigserial": "bigint",
    "real": "float",
    "float4": "float",
    "double precision": "double",
    "float8": "double",
    "numeric": DEFAULT_DECIMAL,
    "decimal": DEFAULT_DECIMAL,
    "money": "decimal(19,2)",
    "boolean": "boolean",
    "bool": "boolean",
    "text": "string",
    "varchar": "string",
    "character varying": "string",
    "char": "string",
    "character": "string",
    "bpchar": "string",
    "name": "string",
    "citext": "string",
    "timestamp": "timestamp_ntz",
    "timestamp without time zone": "timestamp_ntz",
    "timestamptz": "timestamp",
    "timestamp with time zone": "timestamp",
    "date": "date",
    "time": "time",
    "time without time zone": "time",
    "timetz": "string",
    "time with time zone": "string",
    "interval": "string",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "json",
    "bytea": "binary",
    "inet": "string",
    "cidr": "string",
    "macaddr": "string",
    "point": "point",
    "xml": "string",
}

TYPES = VendorTypes(
    "postgres",
    NAMES,
    # internal array names: _int4
    arrays=(re.compile(r"^_(.+)$"),),
)
