"""Dialect registry: name → decoder class, imported lazily.

Adding a dialect is one line in :data:`AVAILABLE_DIALECTS` and one module under
``cdcflow/dialects/`` named by its key (see ``docs/dialects/README.md``). Unknown names fail with
the list of known names and the closest match.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from cdcflow.dialects.base import Dialect, DialectOptions
from cdcflow.errors import UnknownDialectError, did_you_mean
from cdcflow.types import ValueTypeError

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


def declared_type_problems(dialect: str, types: Mapping[str, Mapping[str, str]]) -> list[str]:
    """What is wrong with a source's declared column types (``table → column → type``) for
    ``dialect`` (``auto``: a type some dialect reads), one line per column naming it, with
    what to declare instead; checked when a configuration is read, before any message."""
    classes = [dialect_class(n) for n in (dialect_names() if dialect == "auto" else [dialect])]
    problems: list[str] = []
    for table, columns in types.items():
        for column, native in columns.items():
            problem = _unreadable(classes, native)
            if problem is not None:
                problems.append(f"{table}.{column}: {problem}")
    return problems


def _unreadable(classes: list[type[Dialect]], native: str) -> str | None:
    """Why none of ``classes`` reads a declared type (``None`` when one does); for several,
    in words of no dialect in particular."""
    for cls in classes:
        try:
            cls.declared_type(native)
        except ValueTypeError as e:
            problem = str(e)
        else:
            return None
    if len(classes) > 1:
        try:
            Dialect.declared_type(native)
        except ValueTypeError as e:
            problem = str(e)
    return problem
