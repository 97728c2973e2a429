"""Dialect registry: name → decoder class, imported lazily.

Adding a dialect is one line in :data:`AVAILABLE_DIALECTS` and one module under
``cdcflow/dialects/`` named by its key (see ``docs/dialects/README.md``). Unknown names fail with
the list of known names and the closest match.
"""

from __future__ import annotations

import importlib

from cdcflow.dialects.base import Dialect, DialectOptions
from cdcflow.errors import UnknownDialectError, did_you_mean

AVAILABLE_DIALECTS: dict[str, str] = {
    "cockroachdb": "cdcflow.dialects.cockroachdb:CockroachDbDialect",
    "datastream": "cdcflow.dialects.datastream:DatastreamDialect",
    "debezium": "cdcflow.dialects.debezium:DebeziumDialect",
    "savegress": "cdcflow.dialects.savegress:SavegressDialect",
    "sqlserver_ces": "cdcflow.dialects.sqlserver_ces:SqlServerCesDialect",
}

_CLASSES: dict[str, type[Dialect]] = {}


def dialect_names() -> list[str]:
    """Registered dialect names, sorted."""
    return sorted(AVAILABLE_DIALECTS)


def dialect_class(name: str) -> type[Dialect]:
    """The decoder class registered as ``name`` (imported on first use)."""
    if name in _CLASSES:
        return _CLASSES[name]
    target = AVAILABLE_DIALECTS.get(name)
    if target is None:
        known = dialect_names()
        raise UnknownDialectError(
            f"unknown dialect {name!r}; known dialects: {', '.join(known)}"
            f"{did_you_mean(name, known) or '.'}",
            hint="use --dialect auto to detect the dialect of each message",
        )
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    _CLASSES[name] = cls
    return cls


def get_dialect(name: str, options: DialectOptions | None = None, *, wire: bool = False) -> Dialect:
    """An instance of the dialect registered as ``name`` (``wire``: values as wire strings)."""
    return dialect_class(name)(options, wire=wire)
