"""Oracle. NUMBER(p,0) is an integer (int up to 9 digits, bigint up to 18, as Datastream writes
NUMBER(6) as an Avro long), NUMBER(p,s) a decimal, bare NUMBER/FLOAT decimal(38,18)/double;
DATE carries a time of day (timestamp without zone); precisions inside a name
(``TIMESTAMP(6) WITH TIME ZONE``, ``INTERVAL DAY(2) TO SECOND(6)``) do not change the type.
"""

from __future__ import annotations

from cdcflow.types.canonical import DEFAULT_DECIMAL
from cdcflow.types.vendors import STANDARD_NUMBERS, Numeric, VendorTypes

NAMES: dict[str, str] = {
    "number": DEFAULT_DECIMAL,
    "integer": "decimal(38,0)",
    "int": "decimal(38,0)",
    "smallint": "decimal(38,0)",
    "float": "double",
    "binary_float": "float",
    "binary_double": "double",
    "boolean": "boolean",
    "char": "string",
    "nchar": "string",
    "varchar": "string",
    "varchar2": "string",
    "nvarchar2": "string",
    "clob": "string",
    "nclob": "string",
    "long": "string",
    "rowid": "string",
    "urowid": "string",
    "xmltype": "string",
    "json": "json",
    "date": "timestamp_ntz",
    "timestamp": "timestamp_ntz",
    "timestamp with time zone": "timestamp",
    "timestamp with local time zone": "timestamp",
    "interval year to month": "string",
    "interval day to second": "string",
    "raw": "binary",
    "long raw": "binary",
    "blob": "binary",
    "bfile": "binary",
}

#: NUMBER(p) with p up to 9 digits is an int, up to 18 a bigint; NUMBER(*,s) has 38 digits.
NUMBER = Numeric(integers=((9, "int"), (18, "bigint")), any_precision=True)

TYPES = VendorTypes(
    "oracle",
    NAMES,
    numbers={**STANDARD_NUMBERS, "number": NUMBER},
    # DATE, TIMESTAMP, FLOAT and INTEGER read as Oracle means them
    names_first=True,
)
