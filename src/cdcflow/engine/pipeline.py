"""The pipeline: a Structured Streaming query from landing zones to Iceberg tables.

Each source is a ``binaryFile`` stream over a landing directory (local path or any Hadoop
filesystem URI); files are decoded by the registered dialects inside Spark (``mapInArrow``) and
each micro-batch goes through :class:`~cdcflow.engine.batch.BatchProcessor`. ``availableNow``
processes what is there and stops; ``follow`` keeps going with a processing-time trigger.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any

from cdcflow.config import PipelineConfig, parse_duration
from cdcflow.dialects.base import DialectOptions
from cdcflow.engine.batch import BatchProcessor, BatchReport

_ID_FILE = "cdcflow-pipeline-id"


def spark_settings(cfg: PipelineConfig) -> Any:
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


def pipeline_identity(spark: Any, checkpoint: str, name: str) -> str:
    """A stable id for (pipeline, checkpoint): written next to the checkpoint on first run, so a
    new checkpoint never mistakes old commits for its own batches."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
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
            return value.strip()
    value = f"{name}-{uuid.uuid4().hex[:12]}"
    out = fs.create(path, True)
    try:
        out.write(bytearray(value.encode()))
    finally:
        out.close()
    return value


def source_options(src: Any) -> DialectOptions:
    """Decoder options of one configured source."""
    return DialectOptions(
        table_keys={t: tuple(k) for t, k in src.keys.items()},
        column_types={t: dict(c) for t, c in src.types.items()},
        extra=dict(src.options),
    )


class Pipeline:
    """A configured pipeline bound to a SparkSession."""

    def __init__(self, cfg: PipelineConfig, spark: Any = None) -> None:
        self.cfg = cfg
        if spark is None:
            from cdcflow.spark.session import build_session

            spark = build_session(spark_settings(cfg))
        self.spark = spark

    def events(self) -> Any:
        """The decoded-events stream of every source (one DataFrame)."""
        from cdcflow.decode.spark import decode_dataframe, read_raw

        frames = []
        for src in self.cfg.sources:
            Path(src.path).mkdir(parents=True, exist_ok=True) if "://" not in src.path else None
            raw = read_raw(
                self.spark, src.path, streaming=True, max_files_per_trigger=src.max_files_per_batch
            )
            frames.append(decode_dataframe(raw, src.dialect, source_options(src), src.name))
        return reduce(lambda a, b: a.unionByName(b), frames)

    def run(
        self,
        follow: bool = False,
        on_report: Callable[[BatchReport], None] | None = None,
        timeout: float | None = None,
    ) -> list[BatchReport]:
        """Run the pipeline: until the landing zones are drained (default) or forever
        (``follow``). Returns the batch reports of this run."""
        pid = pipeline_identity(self.spark, self.cfg.checkpoint, self.cfg.pipeline)
        processor = BatchProcessor(self.spark, self.cfg, pid, on_report)
        writer = (
            self.events()
            .writeStream.foreachBatch(processor)
            .option("checkpointLocation", self.cfg.checkpoint.rstrip("/") + "/stream")
            .queryName(f"cdcflow_{self.cfg.pipeline}")
        )
        if follow:
            writer = writer.trigger(
                processingTime=f"{parse_duration(self.cfg.follow_interval)} seconds"
            )
        else:
            writer = writer.trigger(availableNow=True)
        query = writer.start()
        try:
            query.awaitTermination(timeout) if timeout else query.awaitTermination()
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is None:
            self.expire_tombstones(processor)
        return processor.reports

    def expire_tombstones(self, processor: BatchProcessor) -> None:
        """Drop tombstones, and closed groups of split-message segments, older than
        ``tombstone_retention`` (after each run)."""
        from cdcflow.sinks.merge import expire_tombstones

        ns = f"{self.cfg.catalog.name}.{self.cfg.namespace}__cdcflow"
        try:
            names = [r["tableName"] for r in self.spark.sql(f"SHOW TABLES IN {ns}").collect()]
        except Exception:
            return
        for name in names:
            if name.startswith("tombstones__"):
                expire_tombstones(self.spark, f"{ns}.`{name}`", self.cfg.retention_seconds)
        processor.segment_stage.expire_closed(self.spark, self.cfg.retention_seconds)
