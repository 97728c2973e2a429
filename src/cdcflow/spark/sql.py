"""Small helpers for generating Spark SQL safely."""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from cdcflow.spark.kind import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


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
#: The names given out inside the innermost :func:`views_dropped` block, if any.
_scope: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "cdcflow_views", default=None
)


def view_name(prefix: str) -> str:
    """A unique temporary view name (tables of a batch are written concurrently); inside a
    :func:`views_dropped` block, the view is dropped when the block ends."""
    with _lock:
        n = next(_counter)
        name = f"cdcflow_{prefix}_{n}"
        names = _scope.get()
        if names is not None:
            names.append(name)
    return name


@contextmanager
def views_dropped(spark: SparkSession) -> Iterator[None]:
    """Drop the temporary views named inside the block (in this thread, or in tasks of a
    :class:`ScopedPool` it started) when it ends. A temporary view keeps its plan — the
    tables, files and checkpointed data it reads — for the life of the session, and a batch
    names a few dozen: over months of batches they would fill the driver's heap. Statements
    already analyzed keep working; a view is only needed while its statements are built."""
    names: list[str] = []
    token = _scope.set(names)
    try:
        yield
    except BaseException:
        _scope.reset(token)
        try:  # the block's own error is the one to see; the session may be stopping
            _drop(spark, names)
        except Exception:  # a stopped session has no views left to drop
            pass
        raise
    _scope.reset(token)
    _drop(spark, names)


def _drop(spark: SparkSession, names: list[str]) -> None:
    with _lock:
        done = list(names)
    # the session catalog's own drop: ``spark.catalog.dropTempView`` first looks for cached
    # data the view's plan matches (comparing canonical plans), about a second a batch for
    # the batch's views; they name no cached data of their own (what a batch persists, it
    # releases itself); a Spark Connect session has only the public call
    if is_connect(spark):
        for name in done:
            spark.catalog.dropTempView(name)
        return
    catalog = spark._jsparkSession.sessionState().catalog()
    for name in done:
        catalog.dropTempView(name)


class ScopedPool(ThreadPoolExecutor):
    """A thread pool whose tasks run in the caller's context, so the temporary views they
    name belong to the caller's :func:`views_dropped` block."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def view(df: DataFrame, prefix: str) -> str:
    """Register ``df`` under a new unique temporary view name and return the name."""
    name = view_name(prefix)
    df.createOrReplaceTempView(name)
    return name
