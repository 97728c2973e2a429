"""Small helpers for generating Spark SQL safely."""

from __future__ import annotations

import itertools
import threading


def q(name: str) -> str:
    """Quote an identifier with backticks."""
    return "`" + name.replace("`", "``") + "`"


def lit(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_counter = itertools.count()
_lock = threading.Lock()


def view_name(prefix: str) -> str:
    """A unique temporary view name (tables of a batch are applied concurrently)."""
    with _lock:
        n = next(_counter)
    return f"cdcflow_{prefix}_{n}"
