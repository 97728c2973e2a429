"""The interface the pipeline reads a source through, whatever its kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from cdcflow.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.dialects.model import DialectOptions
    from cdcflow.spark.jars import KafkaUse


class SourceMissing(ConfigError):
    """A source's landing zone does not exist, or nothing was given to read for it."""

    code = "SOURCE_PATH_MISSING"


class Source:
    """One configured source, as the pipeline reads it.

    Built by :meth:`cdcflow.config.SourceConfig.source`; a pipeline keeps one per source until
    it closes (a start of its queries, with the check before it), so settings that
    hold secrets are read once, when first needed, and kept for the batches of that query.
    """

    #: Spark's Kafka connector: ``optional`` where what is read may come from Spark's Kafka
    #: source (a DataFrame given), ``required`` where it does.
    kafka_connector: ClassVar[KafkaUse] = "none"

    def __init__(self, name: str, dialect: str, options: DialectOptions) -> None:
        """``name``: the source's; ``dialect`` and ``options``: how its messages decode."""
        self.name = name
        self.dialect = dialect
        self.options = options

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}: {self.describe()})"

    @property
    def location(self) -> str:
        """Where the source reads, as its checkpoint records it (``""``: nowhere of its own)."""
        return ""

    def describe(self) -> str:
        """What the source reads, in a few words (no connection settings: they may carry
        credentials)."""
        raise NotImplementedError

    def check(self) -> None:
        """Refuse, before Spark starts, a source that cannot be read (a coded
        :class:`~cdcflow.errors.ConfigError`)."""

    def check_connect(self) -> None:
        """Refuse, before its query starts on a Spark Connect server, a source whose batches
        need what a Connect server's Python process does not have (a coded
        :class:`~cdcflow.spark.kind.ConnectUnsupported`)."""

    def read(self, spark: SparkSession) -> DataFrame:
        """The source's raw messages, a streaming DataFrame of ``spark``."""
        raise NotImplementedError

    def skipped(self, spark: SparkSession, checkpoint: str, batch_id: int) -> dict[str, str]:
        """What a batch could not read (``<where>`` → ``<range>``), for the batch history;
        ``checkpoint``: the streaming query's."""
        return {}

    def empty_files(
        self, spark: SparkSession, checkpoint: str, batch_id: int, seen: set[str], label: str
    ) -> DataFrame | None:
        """The decoded rows of what a batch read that Spark's scan gave no row (``seen``: the
        origins the batch's rows name; ``label``: the source column of the rows), else
        ``None``."""
        return None

    def files_waiting(self, query_checkpoint: str) -> int | None:
        """Files the source's query has not read yet (``None``: not known for this kind)."""
        return None

    def lag(
        self, spark: SparkSession, read: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int] | None:
        """Per (topic, partition), records the query has not read yet, given where it has
        read to (``None``: not known for this kind, or not now)."""
        return None

    def close(self) -> None:
        """Give back what :meth:`lag` holds open."""
