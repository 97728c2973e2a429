"""Debezium schema-change events: the table a change names and its DDL type, from its
``tableChanges`` (with the column types of the table they describe), else from the DDL text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.debezium.connect import as_dict, as_list
from cdcflow.transports.json import kind
from cdcflow.types import ValueTypeError, source_type

#: ``tableChanges[].type`` → ``ddl_type``.
DDL_TYPES: dict[str, str] = {"CREATE": "CREATE_TABLE", "ALTER": "ALTER_TABLE", "DROP": "DROP_TABLE"}
_DDL_TABLE = re.compile(
    r"^\s*(CREATE|ALTER|DROP|TRUNCATE|RENAME)\s+(?:TEMPORARY\s+)?TABLE\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?([`\"\[\]\w.]+)",
    re.IGNORECASE,
)


def ddl_target(
    body: Mapping[str, Any], source: str
) -> tuple[list[str], str | None, dict[str, str]]:
    """(the table's identifier parts, ``ddl_type``, column types) of a schema change: from its
    first ``tableChanges`` entry, the columns' types read with the type table of ``source``,
    else from its DDL text; no parts when it names no table. ``BAD_FIELD`` when
    ``tableChanges`` is not a list."""
    changes = body.get("tableChanges") or []
    if not isinstance(changes, list):
        raise Dialect.fail(
            "BAD_FIELD", f"'tableChanges' must be a list, got {kind(body['tableChanges'])}"
        )
    changes = [c for c in changes if isinstance(c, dict)]
    if changes:
        first = changes[0]
        types = _column_types(as_dict(first.get("table")), source)
        return _ident(str(first.get("id", ""))), DDL_TYPES.get(str(first.get("type"))), types
    ddl = body.get("ddl")
    if isinstance(ddl, str) and (m := _DDL_TABLE.match(ddl)):
        return _ident(m.group(2)), f"{m.group(1).upper()}_TABLE", {}
    return [], None, {}


def _column_types(table: Mapping[str, Any], source: str) -> dict[str, str]:
    """Canonical types of the columns a ``tableChanges`` table lists (those it can read)."""
    types: dict[str, str] = {}
    for c in as_list(table.get("columns")):
        if not isinstance(c, dict):
            continue
        try:
            native = str(c.get("typeName"))
            if c.get("length") and "(" not in native:
                native += f"({c['length']}" + (f",{c['scale']})" if c.get("scale") else ")")
            types[str(c["name"])] = source_type(source, native)
        except (ValueTypeError, KeyError, TypeError):
            continue
    return types


def _ident(text: str) -> list[str]:
    """``"db"."table"`` / ``db.schema.table`` / ``[dbo].[t]`` → its parts, unquoted."""
    parts = re.findall(r'"([^"]+)"|`([^`]+)`|\[([^\]]+)\]|([^."`\[\]]+)', text.strip())
    return [next(p for p in g if p) for g in parts]
