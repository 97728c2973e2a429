"""Small helpers for generating Spark SQL safely."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def q(name: str) -> str:
    """Quote an identifier with backticks."""
    return "`" + name.replace("`", "``") + "`"


def lit(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def lit_or_null(text: str | None) -> str:
    """A string literal, or ``NULL``."""
    return "CAST(NULL AS string)" if text is None else lit(text)


def string_array(items: Iterable[str]) -> str:
    """An ``array<string>`` literal."""
    values = [lit(i) for i in items]
    return f"array({', '.join(values)})" if values else "CAST(array() AS array<string>)"


def string_map(entries: Mapping[str, str], value_type: str = "string") -> str:
    """A ``map<string, value_type>`` literal whose values are SQL expressions."""
    if not entries:
        return f"CAST(map() AS map<string,{value_type}>)"
    return "map(" + ", ".join(f"{lit(k)}, {v}" for k, v in entries.items()) + ")"


_counter = itertools.count()
_lock = threading.Lock()


def view_name(prefix: str) -> str:
    """A unique temporary view name (tables of a batch are written concurrently)."""
    with _lock:
        n = next(_counter)
    return f"cdcflow_{prefix}_{n}"


def view(df: DataFrame, prefix: str) -> str:
    """Register ``df`` under a new unique temporary view name and return the name."""
    name = view_name(prefix)
    df.createOrReplaceTempView(name)
    return name
