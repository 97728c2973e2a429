"""MySQL, from the unified format's type-mapping table plus the usual aliases."""

from __future__ import annotations

from cdcflow.types.vendors import VendorTypes

NAMES: dict[str, str] = {
    "tinyint(1)": "boolean",
    "bool": "boolean",
    "boolean": "boolean",
    "tinyint": "int",
    "smallint": "int",
    "mediumint": "int",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "real": "double",
    "decimal": "decimal(10,0)",
    "numeric": "decimal(10,0)",
    "char": "string",
    "varchar": "string",
    "tinytext": "string",
    "text": "string",
    "mediumtext": "string",
    "longtext": "string",
    "enum": "string",
    "set": "array<string>",
    "datetime": "timestamp_ntz",
    "timestamp": "timestamp",
    "date": "date",
    "time": "time",
    "year": "int",
    "json": "json",
    "binary": "binary",
    "varbinary": "binary",
    "tinyblob": "binary",
    "blob": "binary",
    "mediumblob": "binary",
    "longblob": "binary",
    "bit": "binary",
}

TYPES = VendorTypes("mysql", NAMES)
