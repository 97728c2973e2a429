"""Commit ledger: which micro-batches a table already holds.

``foreachBatch`` is at-least-once: after a crash Spark re-runs the last batch with the same id
and rows. Every commit a batch makes carries ``cdcflow.pipeline`` / ``cdcflow.batch`` /
``cdcflow.step`` in its Iceberg snapshot summary (set through Iceberg's thread-local commit
properties, which SQL ``MERGE``/``DELETE`` honour); before writing, a step looks its table up and
skips what is already there. Appends (dead letters, changelogs, history) would otherwise double.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

_LOCK = threading.Lock()
_THREAD_LOCAL: Any = None


def _commit_properties(spark: Any) -> Any:
    """Iceberg's ``CommitMetadata.COMMIT_PROPERTIES`` thread-local (a JVM object)."""
    global _THREAD_LOCAL
    with _LOCK:
        if _THREAD_LOCAL is None:
            jvm = spark._jvm
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            cls = jvm.java.lang.Class.forName(
                "org.apache.iceberg.spark.CommitMetadata", True, loader
            )
            field = cls.getDeclaredField("COMMIT_PROPERTIES")
            field.setAccessible(True)
            _THREAD_LOCAL = field.get(None)
        return _THREAD_LOCAL


@contextmanager
def commit_properties(spark: Any, props: Mapping[str, str]) -> Iterator[None]:
    """Attach ``props`` to every Iceberg snapshot committed by SQL run in this thread.

    PySpark pins each Python thread to one JVM thread, so the JVM thread-local set here is the
    one the commit reads.
    """
    tl = _commit_properties(spark)
    jmap = spark._jvm.java.util.HashMap()
    for k, v in props.items():
        jmap.put(k, str(v))
    tl.set(jmap)
    try:
        yield
    finally:
        tl.remove()
    _crash_point(props)


def _crash_point(props: Mapping[str, str]) -> None:
    """Testing hook: ``CDCFLOW_CRASH_AFTER=step[@batch]`` kills the process (as SIGKILL would)
    right after that step's commit, to prove that a rerun converges from any point."""
    spec = os.environ.get("CDCFLOW_CRASH_AFTER")
    if not spec:
        return
    step, _, batch = spec.partition("@")
    if props.get("cdcflow.step") == step and (not batch or props.get("cdcflow.batch") == batch):
        os._exit(137)


def ledger_props(pipeline: str, batch_id: int, step: str) -> dict[str, str]:
    """Snapshot-summary entries that mark a commit as (pipeline, batch, step)."""
    return {"cdcflow.pipeline": pipeline, "cdcflow.batch": str(batch_id), "cdcflow.step": step}


def committed_steps(spark: Any, table: str, pipeline: str, batch_id: int) -> set[str]:
    """Steps of (pipeline, batch) already committed to ``table`` (empty when none or when the
    table does not exist)."""
    try:
        rows = spark.sql(
            f"SELECT summary['cdcflow.step'] AS step FROM {table}.snapshots "
            f"WHERE summary['cdcflow.pipeline'] = '{_lit(pipeline)}' "
            f"AND summary['cdcflow.batch'] = '{batch_id}'"
        ).collect()
    except Exception as e:  # table missing: nothing committed
        if "TABLE_OR_VIEW_NOT_FOUND" in str(e) or "not found" in str(e).lower():
            return set()
        raise
    return {r["step"] for r in rows if r["step"]}


def _lit(s: str) -> str:
    return s.replace("\\", "\\\\").replace("'", "\\'")
