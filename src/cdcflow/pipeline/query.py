"""The pipeline: a Structured Streaming query from landing zones to Iceberg tables.

Each source is a ``binaryFile`` stream over a landing directory (local path or any Hadoop
filesystem URI); files are decoded by the registered dialects inside Spark (``mapInArrow``) and
each micro-batch goes through :class:`~cdcflow.pipeline.batch.BatchRunner`. ``availableNow``
processes what is there and stops; ``follow`` keeps going with a processing-time trigger.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.config import PipelineConfig, parse_duration
from cdcflow.pipeline.batch import BatchRunner, source_options
from cdcflow.pipeline.report import BatchReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from cdcflow.spark.session import SparkSettings

_ID_FILE = "cdcflow-pipeline-id"
ADAPTIVE = "spark.sql.adaptive.enabled"


def spark_settings(cfg: PipelineConfig) -> SparkSettings:
    """Spark settings from a pipeline configuration."""
    from cdcflow.spark.session import settings_from_mapping

    s = cfg.spark
    c = cfg.catalog
    return settings_from_mapping(
        {
            "master": s.master,
            "shuffle_partitions": s.shuffle_partitions,
            "iceberg_jar": s.iceberg_jar,
            "iceberg_packages": s.iceberg_packages,
            "conf": dict(s.conf),
            "catalog_name": c.name,
            "catalog_type": c.type,
            "catalog_uri": c.uri,
            "warehouse": c.warehouse,
            "catalog_options": dict(c.options),
        }
    )


def pipeline_identity(spark: SparkSession, checkpoint: str, name: str) -> str:
    """A stable id for (pipeline, checkpoint): written next to the checkpoint on first run, so a
    new checkpoint never mistakes old commits for its own batches."""
    jvm = spark._jvm
    assert jvm is not None
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/" + _ID_FILE)
    fs = path.getFileSystem(conf)
    if fs.exists(path):
        stream = fs.open(path)
        try:
            reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
            value = reader.readLine()
        finally:
            stream.close()
        if value:
            return str(value).strip()
    value = f"{name}-{uuid.uuid4().hex[:12]}"
    out = fs.create(path, True)
    try:
        out.write(bytearray(value.encode()))
    finally:
        out.close()
    return value


class Pipeline:
    """A configured pipeline bound to a SparkSession."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession | None = None) -> None:
        self.cfg = cfg
        if spark is None:
            from cdcflow.spark.session import build_session

            spark = build_session(spark_settings(cfg))
        self.spark = spark
        self.runner: BatchRunner | None = None

    def _stream_session(self) -> SparkSession:
        """A session for the streaming query: the pipeline session's settings with adaptive
        execution off, which streaming does not support (Spark would turn it off itself and
        warn). Each batch turns it back on for the batch's own queries."""
        session = self.spark.newSession()
        confs = self.spark._jsparkSession.sessionState().conf().getAllConfs()
        it = confs.iterator()
        while it.hasNext():
            entry = it.next()
            key, value = str(entry._1()), str(entry._2())
            if key != ADAPTIVE and session.conf.isModifiable(key):
                session.conf.set(key, value)
        session.conf.set(ADAPTIVE, "false")
        return session

    def events(self, session: SparkSession | None = None) -> DataFrame:
        """The decoded-events stream of every source (one DataFrame)."""
        from cdcflow.spark.arrow import decode_dataframe, read_raw

        frames = []
        for src in self.cfg.sources:
            if "://" not in src.path:
                Path(src.path).mkdir(parents=True, exist_ok=True)
            raw = read_raw(
                session or self.spark,
                src.path,
                streaming=True,
                max_files_per_trigger=src.max_files_per_batch,
            )
            frames.append(decode_dataframe(raw, src.dialect, source_options(src), src.name))
        return reduce(lambda a, b: a.unionByName(b), frames)

    def start(
        self, follow: bool = False, on_report: Callable[[BatchReport], None] | None = None
    ) -> StreamingQuery:
        """Start the streaming query (drains the landing zones, or keeps following)."""
        pid = pipeline_identity(self.spark, self.cfg.checkpoint, self.cfg.pipeline)
        adaptive = self.spark.conf.get(ADAPTIVE, "true") or "true"
        self.runner = BatchRunner(self.cfg, pid, on_report, adaptive=adaptive.lower() == "true")
        writer = (
            self.events(self._stream_session())
            .writeStream.foreachBatch(self.runner)
            .option("checkpointLocation", self.cfg.checkpoint.rstrip("/") + "/stream")
            .queryName(f"cdcflow_{self.cfg.pipeline}")
        )
        if follow:
            seconds = parse_duration(self.cfg.follow_interval)
            writer = writer.trigger(processingTime=f"{seconds} seconds")
        else:
            writer = writer.trigger(availableNow=True)
        return writer.start()

    def run(
        self,
        follow: bool = False,
        on_report: Callable[[BatchReport], None] | None = None,
        timeout: float | None = None,
    ) -> list[BatchReport]:
        """Run the pipeline: until the landing zones are drained (default) or forever
        (``follow``). Returns the batch reports of this run."""
        query = self.start(follow, on_report)
        try:
            query.awaitTermination(int(timeout)) if timeout else query.awaitTermination()
        finally:
            if query.isActive:
                query.stop()
        assert self.runner is not None
        if query.exception() is None and self.runner.reports:
            self.runner.expire(self.spark)
        return self.runner.reports
