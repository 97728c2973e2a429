"""Spark's errors as cdcflow errors: a stable code, a message naming the problem, a hint.

Spark's exceptions are told apart by their class and error class (``getErrorClass``), never by
their text; the position of a syntax error comes from the exception's own fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cdcflow.errors import CdcflowError, CommandFailed, did_you_mean

#: The hint of an error whose whole trace may help.
DEBUG_HINT = "run with --debug for the whole trace"


class SqlError(CdcflowError):
    """A query Spark refuses: bad syntax, a table or column that does not exist."""

    code = "SQL_INVALID"


class TableNotFound(SqlError):
    """A table that does not exist (the hint names those that do)."""

    code = "TABLE_NOT_FOUND"


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's text (at most 500 characters)."""
    text = str(exc)
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)[:500]


def table_not_found(name: str, known: Iterable[str], where: str) -> TableNotFound:
    """A table ``name`` missing from ``where`` (``catalog.namespace``), whose tables are
    ``known``."""
    names = sorted(known)
    listed = ", ".join(names) if names else "none yet"
    return TableNotFound(
        f"no table {name!r} in {where}{did_you_mean(name, names)}",
        hint=f"tables of {where}: {listed} (cdcflow tables lists them with their row counts)",
    )


def _option(value: Any) -> int | None:
    """A Scala ``Option[Int]`` read through py4j, ``None`` when empty or unreadable."""
    try:
        return int(value.get()) if value.isDefined() else None
    except Exception:  # a JVM object without the field: no position to show
        return None


def _position(exc: BaseException) -> tuple[int, int] | None:
    java = getattr(exc, "_origin", None)
    if java is None:
        return None
    try:
        line, column = _option(java.line()), _option(java.startPosition())
    except Exception:  # an exception class without positions
        return None
    return (line, column) if line is not None and column is not None else None


def spark_problem(exc: BaseException, query: str | None = None) -> CdcflowError | None:
    """The cdcflow error for an exception Spark raised (``query``: the SQL text it ran, to
    show where a syntax error is), ``None`` when it is not one of Spark's."""
    try:
        from pyspark.errors.exceptions.captured import (
            AnalysisException,
            CapturedException,
            ParseException,
        )
    except ImportError:
        return None
    if not isinstance(exc, CapturedException):
        return None
    error_class = exc.getErrorClass() or ""
    params = exc.getMessageParameters() or {}
    if isinstance(exc, ParseException):
        where = _position(exc)
        near = params.get("error", "?")
        at = f" at line {where[0]}, column {where[1] + 1}" if where else ""
        text = ""
        if where and query is not None:
            lines = query.splitlines()
            if 0 < where[0] <= len(lines):
                text = f": {lines[where[0] - 1].strip()[:200]!r}"
        return SqlError(
            f"syntax error near {near}{at}{text}",
            code="SQL_SYNTAX",
            hint="tables are named catalog.namespace.table (cdcflow tables lists them)",
        )
    if isinstance(exc, AnalysisException):
        if error_class == "TABLE_OR_VIEW_NOT_FOUND":
            name = params.get("relationName", "?").replace("`", "")
            return TableNotFound(
                f"no table or view {name}",
                hint="tables are named catalog.namespace.table (cdcflow tables lists them)",
            )
        return SqlError(f"Spark refused the query: {first_line(exc)}", hint=DEBUG_HINT)
    return CommandFailed(f"Spark failed: {first_line(exc)}", code="SPARK_FAILED", hint=DEBUG_HINT)
