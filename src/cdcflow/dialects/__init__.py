"""Dialect registry: name → decoder class, imported lazily.

Adding a dialect is one line in :data:`AVAILABLE_DIALECTS` and one module under
``cdcflow/dialects/`` named by its key. Unknown names fail with the list of known names and the
closest match.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from cdcflow.dialects.base import Dialect, DialectOptions, RawMessage
from cdcflow.errors import DecodeError, UnknownDialectError

AVAILABLE_DIALECTS: dict[str, str] = {
    "cockroachdb": "cdcflow.dialects.cockroachdb:CockroachDbDialect",
    "datastream": "cdcflow.dialects.datastream:DatastreamDialect",
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
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownDialectError(
            f"unknown dialect {name!r}; known dialects: {', '.join(known)}.{hint}",
            hint="use --dialect auto to detect the dialect of each message",
        )
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    _CLASSES[name] = cls
    return cls


def get_dialect(name: str, options: DialectOptions | None = None) -> Dialect:
    """An instance of the dialect registered as ``name``."""
    return dialect_class(name)(options)


class AutoDetector:
    """Decides, message by message, which registered dialect produced it.

    Each dialect contributes its own recogniser; the highest score above zero wins, ties broken
    by registry order. One instance keeps one decoder per dialect.
    """

    def __init__(
        self,
        options: DialectOptions | None = None,
        names: list[str] | None = None,
    ) -> None:
        self.dialects = [get_dialect(n, options) for n in (names or dialect_names())]

    def detect(self, msg: RawMessage, doc: Any) -> Dialect:
        """The dialect of ``msg`` or :class:`DecodeError` ``DIALECT_UNDETECTED``."""
        best: Dialect | None = None
        best_score = 0.0
        for d in self.dialects:
            score = d.recognise(msg, doc)
            if score > best_score:
                best, best_score = d, score
        if best is None:
            raise DecodeError(
                "no registered dialect recognises this message "
                f"(tried {', '.join(d.name for d in self.dialects)})",
                code="DIALECT_UNDETECTED",
                hint="pass --dialect NAME if you know the producer",
            )
        return best
