"""The sources Datastream reads, as the renderer simulates them: which source a workload
table is read from, its native type names, read methods and object names, and how each source's
values are written in JSON.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from decimal import Decimal
from typing import Any

import orjson

from cdcflow.dialects.rendering import MSSQL_TYPES, PG_TYPES, timestamp_text
from cdcflow.simulation.workload import Workload

SOURCES: tuple[str, ...] = (
    "mysql",
    "oracle",
    "postgres",
    "sqlserver",
    "spanner",
    "mongodb",
    "salesforce",
)

MYSQL_TYPES: dict[str, str] = {
    "bigint": "bigint",
    "int": "int",
    "string": "varchar(200)",
    "decimal(10,2)": "decimal(10,2)",
    "boolean": "tinyint(1)",
    "timestamp": "timestamp",
    "timestamp_ntz": "datetime",
    "date": "date",
    "double": "double",
    "json": "json",
    "binary": "varbinary(64)",
}
ORACLE_TYPES: dict[str, str] = {
    "bigint": "NUMBER(18)",
    "int": "NUMBER(9)",
    "string": "VARCHAR2(200)",
    "decimal(10,2)": "NUMBER(10,2)",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP(6) WITH TIME ZONE",
    "timestamp_ntz": "TIMESTAMP(6)",
    "double": "BINARY_DOUBLE",
    "json": "JSON",
    "binary": "RAW(64)",
}
SPANNER_TYPES: dict[str, str] = {
    "bigint": "INT64",
    "int": "INT64",
    "string": "STRING(MAX)",
    "decimal(10,2)": "NUMERIC",
    "boolean": "BOOL",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
    "double": "FLOAT64",
    "json": "JSON",
    "binary": "BYTES(MAX)",
}
#: BSON types (no timestamp: BSON dates keep milliseconds; no date-only type).
MONGODB_TYPES: dict[str, str] = {
    "bigint": "long",
    "int": "int",
    "string": "string",
    "decimal(10,2)": "decimal",
    "boolean": "bool",
    "double": "double",
    "json": "object",
    "binary": "binData",
}
#: Salesforce field types (no timestamp: date-times keep milliseconds; JSON as long text).
SALESFORCE_TYPES: dict[str, str] = {
    "bigint": "long",
    "int": "int",
    "string": "string",
    "decimal(10,2)": "currency",
    "boolean": "boolean",
    "date": "date",
    "double": "double",
    "json": "textarea",
    "binary": "base64",
}
NATIVE_TYPES: dict[str, dict[str, str]] = {
    "mysql": MYSQL_TYPES,
    "oracle": ORACLE_TYPES,
    "postgres": PG_TYPES,
    "sqlserver": MSSQL_TYPES,
    "spanner": SPANNER_TYPES,
    "mongodb": MONGODB_TYPES,
    "salesforce": SALESFORCE_TYPES,
}
#: Sources the decoder has no native type table for: their columns are declared canonically.
CANONICAL_DECLARED = frozenset({"mongodb", "salesforce"})
READ_METHODS: dict[str, tuple[str, str]] = {
    "mysql": ("mysql-cdc-binlog", "mysql-backfill-fulldump"),
    "oracle": ("oracle-cdc-logminer", "oracle-backfill"),
    "postgres": ("postgresql-cdc", "postgresql-backfill"),
    "sqlserver": ("sqlserver-cdc", "sqlserver-backfill"),
    "spanner": ("spanner-cdc", "spanner-backfill"),
    "mongodb": ("mongodb-cdc", "mongodb-backfill"),
    "salesforce": ("salesforce-cdc", "salesforce-backfill"),
}
#: Sources that write an update as ``UPDATE-DELETE`` + ``UPDATE-INSERT``.
PAIR_SOURCES = frozenset({"mysql", "oracle"})
SALESFORCE_DOMAIN = "cdcflow.my.salesforce.com"


def table_source(workload: Workload, table: str) -> str:
    """The source a table is read from: given in ``workload.extra``, else chosen from the
    workload seed among the sources whose types fit the table (Oracle has no date-only type,
    Spanner no timestamp without zone, MongoDB and Salesforce no microsecond timestamps)."""
    given = workload.extra.get("datastream_sources", {}).get(table)
    if given:
        return str(given)
    return _assigned(workload)[table]


#: Sources every rendered workload with enough tables shows (the demo's promise).
ALWAYS: tuple[str, ...] = ("mysql", "spanner")


def _assigned(workload: Workload) -> dict[str, str]:
    """One source per table: MySQL and Spanner each go to a table they fit (tables taken in
    a seed-shuffled order), the other tables draw from the seed among the sources that fit."""
    tables = sorted(workload.tables)
    random.Random(f"{workload.seed}:order").shuffle(tables)
    fits = {
        t: [
            s
            for s in SOURCES
            if all(c in NATIVE_TYPES[s] for c in set(workload.tables[t].columns.values()))
        ]
        for t in tables
    }
    out: dict[str, str] = {}
    for wanted in ALWAYS:
        for t in tables:
            if t not in out and wanted in fits[t]:
                out[t] = wanted
                break
    for t in tables:
        if t not in out:
            out[t] = random.Random(f"{workload.seed}:{t}").choice(fits[t])
    return out


def source_names(workload: Workload, table: str) -> tuple[str | None, str | None, str]:
    """(database, schema, table) as the source names them."""
    source = table_source(workload, table)
    schema = workload.tables[table].schema
    if source == "oracle":
        return "ORCL", "APP", table.upper()
    if source in ("mysql", "mongodb"):
        return "app", None, table
    if source == "spanner":
        return "appdb", None, table
    if source == "salesforce":
        return SALESFORCE_DOMAIN, None, table
    return "app", schema if source == "postgres" else "dbo", table


def object_name(source: str, database: str | None, schema: str | None, table: str) -> str:
    """The object name of a table in Cloud Storage paths and ``source_metadata``."""
    if source == "salesforce":
        return table
    return f"{schema or database}_{table}"


def json_value(value: Any, source: str) -> Any:
    """A typed value as Datastream writes it in JSON for a source."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value) if source == "mysql" else value
    if isinstance(value, Decimal):
        return orjson.Fragment(format(value, "f"))
    if isinstance(value, dt.datetime):
        return timestamp_text(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex() if source == "mysql" else base64.b64encode(value).decode()
    return value
