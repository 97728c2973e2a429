"""A pipeline's streaming queries over Spark Connect.

A Spark Connect server runs a ``foreachBatch`` function in a Python process of its own: the
function is pickled by the client, unpickled once per query on the server and called there
with each micro-batch (a DataFrame of a Connect session to the same server). So the function
of a source's query over Connect is :class:`RemoteBatches`: what it needs to build the source's
:class:`~cdcflow.pipeline.batch.BatchRunner` where it runs — the configuration, the source's
record, the query's checkpoint — and nothing of the client's (its lock, its session, its
callbacks). The batch runs exactly as on a classic session: its commits carry the ledger, so a
batch interrupted anywhere is completed, never applied twice, by the next run.

What the client keeps: the run lock, the query's claim on the source (checked before the
query starts, recorded after: a Connect server does not tell a batch which query runs it), and
the progress — each batch's report is read back from the batch history once the query's
progress says the batch is done (:class:`RemoteReports`). A failure of the batch function
reaches the client as the text of the server's Python traceback; :func:`batch_failure` gives
back its error code.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cdcflow.errors import CdcflowError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from cdcflow.config import PipelineConfig, SourceConfig
    from cdcflow.pipeline.batch import BatchRunner
    from cdcflow.pipeline.checkpoint import SourceRecord
    from cdcflow.pipeline.report import BatchReport


class RemoteBatches:
    """The ``foreachBatch`` function of one source's query over Spark Connect: picklable, it
    builds the source's :class:`~cdcflow.pipeline.batch.BatchRunner` on its first call in the
    process that runs it (the server's) and applies each batch with it."""

    def __init__(
        self, cfg: PipelineConfig, record: SourceRecord, checkpoint: str, adaptive: bool
    ) -> None:
        """``record``: the source as the checkpoint records it; ``checkpoint``: its query's
        checkpoint location; ``adaptive``: the session's adaptive execution setting."""
        self.cfg = cfg
        self.record = record
        self.checkpoint = checkpoint
        self.adaptive = adaptive
        self._runner: BatchRunner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_runner"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._runner = None

    @property
    def runner(self) -> BatchRunner:
        """The source's batch runner in this process (made on first use)."""
        if self._runner is None:
            from cdcflow.iceberg.catalog import Catalog
            from cdcflow.pipeline.batch import BatchRunner, Shared

            src = self.source
            self._runner = BatchRunner(
                self.cfg,
                self.record,
                src,
                Shared(Catalog(self.cfg.catalog.name)),
                adaptive=self.adaptive,
                checkpoint=self.checkpoint,
                checked=True,
            )
        return self._runner

    @property
    def source(self) -> SourceConfig:
        """The source's configuration."""
        return next(s for s in self.cfg.sources if s.name == self.record.name)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.runner(df, batch_id)


class RemoteReports:
    """The reports of a pipeline's batches applied over Spark Connect, read back from the
    batch history as the queries' progress says batches are done, in the order they are
    found."""

    def __init__(
        self,
        history: Callable[[], DataFrame],
        dead_letters: Callable[[], DataFrame],
        records: list[SourceRecord],
        sources: list[str],
        reported: list[int],
    ) -> None:
        """``history``, ``dead_letters``: the pipeline's batch history and dead letters;
        ``records``/``sources``: the source of each query, in the order of the queries, and
        its configured name; ``reported``: the highest batch id of each already reported
        (``-1``: none)."""
        self.history = history
        self.dead_letters = dead_letters
        self.records = records
        self.sources = sources
        #: the highest batch id reported per query, and the highest the query said it did
        self.reported = list(reported)
        self.progressed: list[int] = [-1] * len(records)
        self._lock = threading.Lock()

    def poll(self, queries: list[StreamingQuery]) -> list[BatchReport]:
        """The reports of batches the queries finished since the last poll (each once,
        whichever thread asks)."""
        with self._lock:
            return self._poll(queries)

    def _poll(self, queries: list[StreamingQuery]) -> list[BatchReport]:
        from cdcflow.pipeline.report import BatchReport
        from cdcflow.spark.sql import lit

        out: list[BatchReport] = []
        for i, q in enumerate(queries):
            progress = q.lastProgress
            done = int(progress["batchId"]) if progress else -1
            if done <= self.progressed[i]:  # no batch done since the last look
                continue
            self.progressed[i] = max(self.progressed[i], done)
            record = self.records[i]
            rows = (
                self.history()
                .where(f"pipeline = {lit(record.ledger)} AND batch_id > {self.reported[i]}")
                .orderBy("batch_id")
                .collect()
            )
            reports = [
                BatchReport.from_history(r.asDict(recursive=True), self.sources[i]) for r in rows
            ]
            codes = self._codes(record, [r.batch_id for r in reports if r.dead_lettered])
            for report in reports:
                out.append(replace(report, dead_letter_codes=codes.get(report.batch_id, {})))
                self.reported[i] = max(self.reported[i], report.batch_id)
        return out

    def _codes(self, record: SourceRecord, batches: list[int]) -> dict[int, dict[str, int]]:
        """The dead letters of some batches by error code (one small query, only for
        batches that wrote some: the batch history counts them without their codes)."""
        from cdcflow.spark.sql import lit

        if not batches:
            return {}
        found = (
            self.dead_letters()
            .where(
                f"pipeline = {lit(record.ledger)} AND batch_id IN "
                f"({', '.join(str(b) for b in batches)})"
            )
            .groupBy("batch_id", "error_code")
            .count()
            .collect()
        )
        out: dict[int, dict[str, int]] = {}
        for row in found:
            out.setdefault(int(row["batch_id"]), {})[str(row["error_code"])] = int(row["count"])
        return out


#: The last line of a Python traceback that names a cdcflow error: ``module.Class: [CODE] …``.
_CODED = re.compile(r"^(?:cdcflow\.[\w.]+\.)?\w+: \[([A-Z][A-Z0-9_]+)\] (.+)$")


def batch_failure(text: str) -> CdcflowError | None:
    """The cdcflow error a batch function raised on a Spark Connect server, from the text of
    the query's exception (the server's Python traceback): its code and message; ``None``
    when the text names none."""
    found: CdcflowError | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("cdcflow."):
            continue
        match = _CODED.match(line)
        if match is not None:
            found = CdcflowError(match.group(2), code=match.group(1))
    return found
