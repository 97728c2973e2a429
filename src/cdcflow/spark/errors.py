"""Spark's errors as cdcflow errors: a stable code, a message naming the problem, a hint.

Spark's exceptions are told apart by their class and error class (``getErrorClass``), never by
their text; the position of a syntax error comes from the exception's own fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
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
    getter = getattr(exc, "getCondition", None) or exc.getErrorClass
    error_class = getter() or ""
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


def java_causes(exc: Any, depth: int = 20) -> Iterator[Any]:
    """A Java exception (or the one behind a Python exception raised by Spark) and its
    causes."""
    if not isinstance(exc, BaseException):
        current = exc
    else:
        current = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    python: Any = exc
    while current is None and python is not None:
        python = getattr(python, "_cause", None) or getattr(python, "cause", None)
        current = getattr(python, "java_exception", None) or getattr(python, "_origin", None)
    seen = 0
    while current is not None and seen < depth:
        yield current
        seen += 1
        try:
            current = current.getCause()
        except Exception:  # not a Java throwable after all
            return


def _kafka35_loss_text(message: str) -> str:
    """Spark 3.5's data-loss message (``Cannot fetch offset 7 (GroupId: …, TopicPartition:
    t-0). Some data may have been lost…``) told as Spark 4's error classes are."""
    part = re.search(r"TopicPartition: ([^)\s,]+)", message)
    where = part.group(1) if part else "a partition"
    span = re.search(r"records in \[(\d+), (\d+)\)", message)
    if span:
        return f"offsets {span.group(1)} to {span.group(2)} of {where} are no longer in Kafka"
    offset = re.search(r"offset (\d+)", message)
    if offset:
        return f"offsets from {offset.group(1)} of {where} are no longer in Kafka"
    return f"offsets of {where} are no longer in Kafka"


def _kafka_loss_text(condition: str, params: dict[str, str]) -> str:
    part = params.get("topicPartition", "")
    if condition.endswith("COULD_NOT_READ_OFFSET_RANGE"):
        return (
            f"offsets {params.get('startOffset')} to {params.get('endOffset')} of {part} are no "
            "longer in Kafka"
        )
    if condition.endswith("START_OFFSET_RESET"):
        return (
            f"{part} now starts at offset {params.get('fetchedOffset')}, after offset "
            f"{params.get('offset')} where the source was"
        )
    if condition.endswith("PARTITIONS_DELETED"):
        return f"partitions {params.get('partitions')} were deleted"
    shown = ", ".join(f"{k} {v}" for k, v in sorted(params.items()) if k != "groupId")
    return f"{condition}: {shown}" if shown else condition


def kafka_data_loss(exc: Any, source: str) -> CdcflowError | None:
    """``KAFKA_DATA_LOSS`` when ``exc`` is Spark's Kafka source finding offsets it still
    needed gone (retention, a deleted topic), by the Java exception's class and error class;
    ``None`` otherwise."""
    for java in java_causes(exc):
        try:
            name = str(java.getClass().getName())
            message = str(java.getMessage() or "")
        except Exception:  # a Java object of another kind: not this error
            continue
        condition = ""
        params: dict[str, str] = {}
        try:  # Spark 4's Kafka errors carry an error class; Spark 3.5's do not
            condition = str(java.getErrorClass() or "")
            params = {str(k): str(v) for k, v in dict(java.getMessageParameters()).items()}
        except Exception:  # no error class on this throwable
            pass
        text = ""
        if condition.startswith("KAFKA_DATA_LOSS") or name.endswith("KafkaIllegalStateException"):
            text = _kafka_loss_text(condition, params)
        elif name == "java.lang.IllegalStateException" and "failOnDataLoss" in message:
            text = _kafka35_loss_text(message)
        if text:
            return CdcflowError(
                f"source {source!r}: {text}: retention (or a "
                "topic deleted and created again) removed records the source had not read",
                code="KAFKA_DATA_LOSS",
                hint="those records are lost to this source; to go on from the oldest offsets "
                "Kafka still has, set kafka.fail_on_data_loss: false on the source (the "
                "offsets skipped are recorded in cdcflow history); to read the topics again "
                "from the start, rebuild the source (docs/kafka.md)",
            )
    return None


def kafka_restart_bug(exc: Any) -> bool:
    """Whether a streaming query ended on Spark's Kafka source failing to report its progress
    after a batch it re-ran from its offset log at a restart (SPARK-57438, Spark 4.1.0–4.1.2:
    ``NullPointerException`` in ``KafkaMicroBatchStream.metrics``). The batch itself was
    applied and committed; the query, started again, goes on. Told by the exception's class
    and the frame it was thrown from."""
    for java in java_causes(exc):
        try:
            if str(java.getClass().getName()) != "java.lang.NullPointerException":
                continue
            frames = java.getStackTrace()
            if len(frames) == 0:
                continue
            top = frames[0]
            if (
                str(top.getClassName()).startswith(
                    "org.apache.spark.sql.kafka010.KafkaMicroBatchStream"
                )
                and str(top.getMethodName()) == "metrics"
            ):
                return True
        except Exception:  # not a Java throwable
            continue
    return False


def kafka_restart_bug_trace(trace: str) -> bool:
    """:func:`kafka_restart_bug` from the JVM stack trace a Spark Connect client receives as
    text (``getStackTrace()`` of the query's exception): a ``NullPointerException`` cause
    whose top frame is ``KafkaMicroBatchStream…metrics``."""
    lines = [line.strip() for line in trace.splitlines()]
    for i, line in enumerate(lines[:-1]):
        if not line.startswith("Caused by: java.lang.NullPointerException"):
            continue
        top = lines[i + 1]
        if top.startswith("at org.apache.spark.sql.kafka010.KafkaMicroBatchStream") and (
            ".metrics(" in top
        ):
            return True
    return False
