"""A user's own Structured Streaming job: Kafka-shaped rows (parquet files standing in for a
topic) applied by cdcflow's ``foreachBatch`` function inside the job's own one.

Run as a process by ``tests/test_api_spark.py`` (``python -m tests.api_job CONFIG SOURCE
WAREHOUSE``, killed at the step ``CDCFLOW_TEST_CRASH_AT`` names, see ``tests/crashing.py``)
and called in-process by it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import cdcflow.api as cdc
from cdcflow.pipeline.report import BatchReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def run(spark: SparkSession, config: str, source_dir: str) -> list[BatchReport]:
    """Read the Kafka-shaped rows of ``source_dir`` one file per micro-batch and apply them,
    dropping the records of a topic the job does not want (the job's own logic)."""
    stream = (
        spark.readStream.schema(cdc.KAFKA_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(source_dir)
    )

    def say(report: BatchReport) -> None:
        print(f"batch {report.batch_id} applied", flush=True)

    with cdc.foreach_batch(config, spark=spark, on_report=say) as apply:

        def each(df: DataFrame, batch_id: int) -> None:
            apply(df.where("topic <> 'ignored'"), batch_id)

        query = (
            stream.writeStream.foreachBatch(each)
            .option("checkpointLocation", apply.checkpoint_location)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return apply.reports


if __name__ == "__main__":
    import os

    from cdcflow.spark.session import SparkSettings, build_session
    from tests.crashing import install
    from tests.processes import run_conf

    if os.environ.get("CDCFLOW_TEST_CRASH_AT"):
        install(os.environ["CDCFLOW_TEST_CRASH_AT"])
    config_path, source, warehouse = sys.argv[1:4]
    session = build_session(
        SparkSettings(
            master="local[2]", warehouse=warehouse, shuffle_partitions=2, conf=run_conf(make=False)
        )
    )
    run(session, config_path, source)
