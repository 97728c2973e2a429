"""SQL Server (change event streaming writes every value as text; these types read it back).
datetime/datetime2/smalldatetime carry no zone → timestamp_ntz; datetimeoffset → timestamp
(instant, normalised to UTC); datetime2(7)/time(7) lose their 7th fractional digit (Spark
keeps microseconds).
"""

from __future__ import annotations

from cdcflow.types.vendors import VendorTypes

NAMES: dict[str, str] = {
    "bigint": "bigint",
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "bit": "boolean",
    "money": "decimal(19,4)",
    "smallmoney": "decimal(10,4)",
    "float": "double",
    "real": "float",
    "char": "string",
    "varchar": "string",
    "nchar": "string",
    "nvarchar": "string",
    "text": "string",
    "ntext": "string",
    "sysname": "string",
    "xml": "string",
    "json": "json",
    "date": "date",
    "time": "time",
    "datetime": "timestamp_ntz",
    "datetime2": "timestamp_ntz",
    "smalldatetime": "timestamp_ntz",
    "datetimeoffset": "timestamp",
    "uniqueidentifier": "uuid",
    "binary": "binary",
    "varbinary": "binary",
    "image": "binary",
    "rowversion": "binary",
    "timestamp": "binary",  # SQL Server's timestamp is rowversion, not a date
}

TYPES = VendorTypes("sqlserver", NAMES, names_first=True)
