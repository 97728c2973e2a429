"""A DataFrame given through the Python API: a source with neither a landing zone nor Kafka
topics, whose streaming DataFrame (Kafka-shaped rows, files, canonical events) is handed to
:meth:`cdcflow.pipeline.query.Pipeline.start`."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from cdcflow.sources.base import Source, SourceMissing
from cdcflow.sources.landing import empty_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.spark.jars import KafkaUse


class GivenSource(Source):
    """A source read from the DataFrame given for it."""

    #: the DataFrame may come from Spark's Kafka source
    kafka_connector: ClassVar[KafkaUse] = "optional"

    def describe(self) -> str:
        return "a DataFrame"

    def check(self) -> None:
        """Nothing to read when no DataFrame is given (``SOURCE_PATH_MISSING``)."""
        raise self._missing()

    def read(self, spark: SparkSession) -> DataFrame:
        raise self._missing()

    def _missing(self) -> SourceMissing:
        return SourceMissing(
            f"source {self.name!r} has no path or kafka topics, and no DataFrame was given for it",
            hint="cdcflow run reads landing zones and Kafka topics: set the source's path "
            "or kafka; from Python, give the source's DataFrame to Pipeline.start (inputs)",
        )

    def empty_files(
        self, spark: SparkSession, checkpoint: str, batch_id: int, seen: set[str], label: str
    ) -> DataFrame | None:
        """A ``binaryFile`` stream given: its zero-byte files (see
        :func:`cdcflow.sources.landing.empty_files`); nothing for other streams."""
        return empty_files(spark, checkpoint, batch_id, seen, self.dialect, self.options, label)
