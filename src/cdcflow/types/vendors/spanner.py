"""Cloud Spanner (GoogleSQL names; STRING(MAX), BYTES(1024) and ARRAY<T> are read through the
generic argument and array handling).
"""

from __future__ import annotations

import re

from cdcflow.types.vendors import VendorTypes

NAMES: dict[str, str] = {
    "bool": "boolean",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "numeric": "decimal(38,9)",
    "string": "string",
    "bytes": "binary",
    "date": "date",
    "timestamp": "timestamp",
    "json": "json",
}

TYPES = VendorTypes("spanner", NAMES, arrays=(re.compile(r"^array\s*<\s*(.+?)\s*>$"),))
