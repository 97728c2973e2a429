"""Commit ledger: which micro-batches a table already holds.

``foreachBatch`` is at-least-once: after a crash Spark re-runs the last batch with the same id
and rows. Every commit a batch makes carries ``cdcflow.pipeline`` / ``cdcflow.batch`` /
``cdcflow.step`` in its Iceberg snapshot summary (set through Iceberg's thread-local commit
properties, which SQL ``MERGE``/``INSERT``/``DELETE`` honour), so the table itself says whether a
step of a batch is committed, atomically with the data. Summaries are read from the table's
metadata (:mod:`cdcflow.iceberg.tables`).

Over Spark Connect there is no JVM thread-local to set: the properties go into the session's
``spark.sql.iceberg.snapshot-property.*`` settings (Iceberg's runtime for Spark 4 reads them at
each commit), which hold for the whole session, so the ledgered statements of a Connect session
run one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cdcflow.spark.kind import ConnectUnsupported, is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIPELINE = "cdcflow.pipeline"
BATCH = "cdcflow.batch"
STEP = "cdcflow.step"
#: With a maintenance action's ``before:`` step: the location of the table it is about to change.
LOCATION = "cdcflow.location"

#: Iceberg's session settings whose suffix it adds to every snapshot summary (Spark 4 runtimes).
SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."

_LOCK = threading.Lock()
_THREAD_LOCAL: Any = None
#: Held while a Spark Connect session's settings name a ledgered commit.
_CONNECT_LOCK = threading.Lock()

#: Called with a step's ledger entries as the step is reached: after each ledgered commit, and
#: before and after each maintenance action (``before:<action>``, ``<action>``). Empty in a
#: run; the crash tests install one that kills the process there (``tests/crashing.py``).
STEP_HOOKS: list[Callable[[Mapping[str, str]], None]] = []


def _commit_properties(spark: SparkSession) -> Any:
    """Iceberg's ``CommitMetadata.COMMIT_PROPERTIES`` thread-local (a JVM object)."""
    global _THREAD_LOCAL
    with _LOCK:
        if _THREAD_LOCAL is None:
            jvm = spark._jvm
            assert jvm is not None
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            cls = jvm.java.lang.Class.forName(
                "org.apache.iceberg.spark.CommitMetadata", True, loader
            )
            field = cls.getDeclaredField("COMMIT_PROPERTIES")
            field.setAccessible(True)
            _THREAD_LOCAL = field.get(None)
        return _THREAD_LOCAL


@contextmanager
def commit_properties(spark: SparkSession, props: Mapping[str, str]) -> Iterator[None]:
    """Attach ``props`` to every Iceberg snapshot committed by SQL run in this thread (in this
    session, over Spark Connect, one ledgered block at a time).

    PySpark pins each Python thread to one JVM thread, so the JVM thread-local set here is the
    one the commit reads.
    """
    if is_connect(spark):
        with _CONNECT_LOCK:
            for k, v in props.items():
                spark.conf.set(SNAPSHOT_PROPERTY + k, str(v))
            try:
                yield
            finally:
                for k in props:
                    spark.conf.unset(SNAPSHOT_PROPERTY + k)
        step_reached(props)
        return
    tl = _commit_properties(spark)
    jvm = spark._jvm
    assert jvm is not None
    jmap = jvm.java.util.HashMap()
    for k, v in props.items():
        jmap.put(k, str(v))
    tl.set(jmap)
    try:
        yield
    finally:
        tl.remove()
    step_reached(props)


def require_ledger(spark: SparkSession) -> None:
    """Raise :class:`ConnectUnsupported` for a Spark Connect session whose server cannot
    carry the ledger (Iceberg's runtime for Spark 3.5 has no snapshot-property settings)."""
    if is_connect(spark) and int(spark.version.split(".")[0]) < 4:
        raise ConnectUnsupported(
            f"the Spark Connect server runs Spark {spark.version}: cdcflow's commit ledger over "
            "Spark Connect needs Spark 4 (Iceberg's snapshot-property settings)",
            hint="use a Spark 4 Connect server, or a classic SparkSession",
        )


def step_reached(props: Mapping[str, str]) -> None:
    """Tell the :data:`STEP_HOOKS` that the step of ``props`` was reached."""
    for hook in STEP_HOOKS:
        hook(props)


def ledger_props(pipeline: str, batch_id: int, step: str) -> dict[str, str]:
    """Snapshot-summary entries that mark a commit as (pipeline, batch, step)."""
    return {PIPELINE: pipeline, BATCH: str(batch_id), STEP: step}
