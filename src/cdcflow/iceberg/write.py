"""Running statements against Iceberg tables under the commit ledger.

A :class:`Statement` is what the engine decided to write: SQL text over temporary views of the
batch, the table it commits to and the ledger step it is. :class:`Writer` runs it with the
step's snapshot-summary properties attached and reports what the commit itself says (its
snapshot summary), so counts never cost an extra Spark job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.ledger import commit_properties, ledger_props

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Statement:
    """One write: ``sql`` commits to ``namespace.table`` as ledger step ``step``.

    ``once``: on a batch that may be a replay, skip it when the table already holds the step
    (appends, which would otherwise double). ``report``: read the commit's snapshot summary
    afterwards. ``extra``: more snapshot-summary properties to record with the commit.
    """

    namespace: str
    table: str
    step: str
    sql: str
    once: bool = False
    report: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Written:
    """What running a statement did: skipped (already committed), its snapshot summary and
    the table's number of snapshots after it (when asked for), seconds."""

    statement: Statement
    skipped: bool
    summary: Mapping[str, str]
    seconds: float
    snapshots: int = 0

    def count(self, key: str) -> int:
        """An integer figure of the commit's summary (``added-records``...), 0 when absent."""
        value = self.summary.get(key)
        return int(value) if value is not None and str(value).lstrip("-").isdigit() else 0


class Writer:
    """Runs statements of one pipeline's batch."""

    def __init__(self, catalog: Catalog, pipeline: str) -> None:
        self.catalog = catalog
        self.pipeline = pipeline

    def run(
        self, spark: SparkSession, statement: Statement, batch_id: int, check: bool = False
    ) -> Written:
        """Run one statement (``check``: the batch may be a replay of a committed one)."""
        started = time.perf_counter()
        s = statement
        if (
            check
            and s.once
            and s.step
            in self.catalog.committed_steps(spark, s.namespace, s.table, self.pipeline, batch_id)
        ):
            return Written(s, True, {}, time.perf_counter() - started)
        props = {**ledger_props(self.pipeline, batch_id, s.step), **s.extra}
        with commit_properties(spark, props):
            spark.sql(s.sql)
        summary: Mapping[str, str] = {}
        snapshots = 0
        if s.report:
            found, snapshots = self.catalog.commits(
                spark, s.namespace, s.table, self.pipeline, batch_id
            )
            summary = found.get(s.step, {})
        return Written(s, False, summary, time.perf_counter() - started, snapshots)
