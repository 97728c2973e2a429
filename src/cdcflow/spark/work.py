"""How much Spark work a piece of code started: jobs and SQL executions, read from Spark's own
status stores (the ones its UI and status tracker read, kept with the UI off too). Job and
execution ids are handed out in order, so the work between two readings is the difference of
the last ids — exact whatever the stores' retention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Work:
    """Spark jobs and SQL executions started (since the session began, or between two
    readings)."""

    jobs: int
    sql: int

    def __sub__(self, earlier: Work) -> Work:
        return Work(self.jobs - earlier.jobs, self.sql - earlier.sql)


def work_so_far(spark: SparkSession) -> Work:
    """The jobs and SQL executions this session's application has started so far."""
    sc: Any = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    jobs = sc.statusStore().jobsList(None)  # newest first
    last_job = int(jobs.apply(0).jobId()) if jobs.size() else -1
    store: Any = spark._jsparkSession.sharedState().statusStore()
    count = int(store.executionsCount())
    newest = store.executionsList(max(count - 1, 0), 1)  # oldest first
    last_sql = int(newest.apply(0).executionId()) if newest.size() else -1
    return Work(last_job + 1, last_sql + 1)
