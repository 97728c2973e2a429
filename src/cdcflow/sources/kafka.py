"""Kafka topics, read with Spark's Kafka source.

The configuration (``kafka:`` of a source: brokers, topics or a pattern, options and secrets;
the connection part is also a ``kafka`` output's), the check of brokers and topics before Spark
starts (:mod:`.brokers`), the reader, what a batch skipped past lost offsets and how far the
query is behind the brokers (:mod:`.offsets`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from cdcflow.config_base import ConfigModel, SecretFrom
from cdcflow.errors import did_you_mean
from cdcflow.sources.base import Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.dialects.model import DialectOptions
    from cdcflow.spark.jars import KafkaUse

log = logging.getLogger("cdcflow")

#: Options of Spark's Kafka source and sink that cdcflow sets from a source's or an output's
#: own keys.
KAFKA_OWN_OPTIONS: dict[str, str] = {
    "kafka.bootstrap.servers": "bootstrap_servers",
    "subscribe": "topics",
    "subscribePattern": "pattern",
    "assign": "topics",
    "startingOffsets": "starting_offsets",
    "maxOffsetsPerTrigger": "max_offsets_per_trigger",
    "failOnDataLoss": "fail_on_data_loss",
    "includeHeaders": "(always on)",
    "topic": "topic",
}
#: Words of option names whose values are secrets: given only under ``secrets``.
_SECRET_WORDS = ("jaas", "password", "secret", "token", "credential")
#: How long the broker holds a Kafka source's fetch that finds no new record (an option of the
#: source's ``options`` overrides it).
FETCH_MAX_WAIT_MS = 10


class KafkaConnection(ConfigModel):
    """How to reach a Kafka cluster: ``bootstrap_servers``, ``options`` for Spark's Kafka
    source or sink (``kafka.security.protocol``…) and ``secrets``: options whose values are
    secrets (``kafka.sasl.jaas.config``), each from an environment variable or a file."""

    bootstrap_servers: str
    options: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, SecretFrom] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _options(self) -> KafkaConnection:
        for key in [*self.options, *self.secrets]:
            if key in KAFKA_OWN_OPTIONS:
                raise ValueError(f"option {key!r} is set by the key {KAFKA_OWN_OPTIONS[key]!r}")
        for key in self.options:
            if any(word in key.lower() for word in _SECRET_WORDS):
                raise ValueError(
                    f"option {key!r} holds a secret: give it under secrets, from an environment "
                    f"variable or a file ({key}: {{env: NAME}})"
                )
        return self

    def connection_options(self, where: str) -> dict[str, str]:
        """``kafka.bootstrap.servers``, the options, and the secrets read now (the result is
        not to be shown or logged)."""
        out = {"kafka.bootstrap.servers": self.bootstrap_servers, **self.options}
        for key, src in self.secrets.items():
            out[key] = src.read(f"{where}: secret {key!r}").text()
        return out

    def with_files_relative_to(self, fix: Callable[[str], str]) -> Any:
        """A copy whose secret files are resolved by ``fix``."""
        if not any(s.file for s in self.secrets.values()):
            return self
        secrets = {k: v.relative_to(fix) for k, v in self.secrets.items()}
        return self.model_copy(update={"secrets": secrets})


class KafkaConfig(KafkaConnection):
    """A source that reads Kafka topics with Spark's Kafka source (instead of a ``path``).

    ``topics`` or ``pattern`` (a Java regular expression) names what is read;
    ``starting_offsets``: where a new source begins (its checkpoint holds the offsets after
    that); ``max_offsets_per_trigger`` bounds a batch; ``fail_on_data_loss``: stop with
    ``KAFKA_DATA_LOSS`` when offsets the checkpoint still needs were deleted (by retention)
    — ``false`` goes on and records what was skipped in the batch history.
    """

    topics: list[str] | None = None
    pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    fail_on_data_loss: bool = True

    @model_validator(mode="after")
    def _subscription(self) -> KafkaConfig:
        if (self.topics is None) == (self.pattern is None):
            raise ValueError("give topics (a list) or pattern (a regular expression), not both")
        if self.topics is not None and (not self.topics or not all(t.strip() for t in self.topics)):
            raise ValueError("topics must name at least one topic")
        return self

    @property
    def subscription(self) -> str:
        """What is read, for messages and the checkpoint: ``kafka://<servers>/<topics>``."""
        what = ",".join(self.topics) if self.topics is not None else f"pattern {self.pattern}"
        return f"kafka://{self.bootstrap_servers}/{what}"

    def spark_options(self, source: str) -> dict[str, str]:
        """The options of Spark's Kafka source, secrets read now (the result is not to be
        shown or logged)."""
        out = {
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": "true" if self.fail_on_data_loss else "false",
            "includeHeaders": "true",
            # Spark keeps each partition's consumer between batches, with a fetch at the end
            # of the partition in flight: the next batch's read of the partition waits for it,
            # Kafka's 500 ms by default (seconds a batch over a few topics' partitions)
            "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
            **self.connection_options(f"source {source!r}"),
        }
        if self.topics is not None:
            out["subscribe"] = ",".join(t.strip() for t in self.topics)
        else:
            assert self.pattern is not None
            out["subscribePattern"] = self.pattern
        if self.max_offsets_per_trigger is not None:
            out["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        return out


class KafkaSource(Source):
    """Kafka topics, read as a stream of Spark's Kafka source."""

    kafka_connector: ClassVar[KafkaUse] = "required"

    def __init__(
        self, name: str, dialect: str, options: DialectOptions, kafka: KafkaConfig
    ) -> None:
        super().__init__(name, dialect, options)
        self.kafka = kafka
        self._options: dict[str, str] | None = None
        self._consumer: Any = None

    @property
    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka options, secrets read on first use and kept (not to be shown)."""
        if self._options is None:
            self._options = self.kafka.spark_options(self.name)
        return self._options

    @property
    def location(self) -> str:
        return self.kafka.subscription

    def describe(self) -> str:
        topics = self.kafka.topics
        if topics is None:
            return f"kafka pattern {self.kafka.pattern}"
        return f"kafka {', '.join(topics)}" if len(topics) <= 3 else f"kafka {len(topics)} topics"

    def check(self, timeout: float | None = None) -> None:
        """Refuse brokers that do not answer a metadata request (``KAFKA_UNREACHABLE``) and
        topics, or a pattern, that name nothing there (``KAFKA_TOPIC_MISSING``); a source
        whose security options librdkafka cannot take is left to Spark's client."""
        from cdcflow.sources.brokers import TIMEOUT, KafkaTopicMissing, listed, topics_at

        kafka = self.kafka
        options = self.spark_options
        secrets = [v for k, v in options.items() if k in kafka.secrets]
        topics = topics_at(self.name, options, secrets, timeout or TIMEOUT)
        if topics is None:
            log.debug("source %s: its security options are left to Spark's Kafka client", self.name)
            return
        servers = f"bootstrap_servers {kafka.bootstrap_servers}"
        missing = [t.strip() for t in kafka.topics or () if t.strip() not in topics]
        hint = listed(topics, missing[0] if missing else kafka.pattern or "")
        if kafka.topics is not None:
            if missing:
                raise KafkaTopicMissing(
                    f"source {self.name!r}: no topic {', '.join(map(repr, missing))} at "
                    f"{servers}{did_you_mean(missing[0], topics)}",
                    hint=hint,
                )
            return
        assert kafka.pattern is not None
        try:
            pattern = re.compile(kafka.pattern)
        except re.error:
            return  # a Java regular expression Python's cannot read: Spark's client decides
        if not any(pattern.fullmatch(t) for t in topics):
            raise KafkaTopicMissing(
                f"source {self.name!r}: pattern {kafka.pattern!r} matches no topic at {servers}",
                hint=hint,
            )

    def check_connect(self) -> None:
        """Refuse ``fail_on_data_loss: false`` over Spark Connect: what a batch skipped is
        asked of the brokers with Kafka's client in Spark's JVM, which a Connect server's
        Python process cannot reach."""
        from cdcflow.spark.kind import ConnectUnsupported

        if not self.kafka.fail_on_data_loss:
            raise ConnectUnsupported(
                f"source {self.name!r}: fail_on_data_loss: false does not run over a Spark "
                "Connect session yet (the offsets a batch skipped are asked of Kafka's client "
                "in Spark's JVM)",
                hint="leave fail_on_data_loss at true over Spark Connect, or run the pipeline "
                "with a classic SparkSession",
            )

    def read(self, spark: SparkSession) -> DataFrame:
        """The topics' records as rows of Spark's Kafka source (headers included), read by as
        many tasks as the session has cores: one task per topic partition would start as many
        Python decoders per batch, each costing more than a small batch's events."""
        from cdcflow.spark.kind import parallelism

        reader = spark.readStream.format("kafka")
        for key, value in self.spark_options.items():
            reader = reader.option(key, value)
        return reader.load().coalesce(parallelism(spark))

    def skipped(self, spark: SparkSession, checkpoint: str, batch_id: int) -> dict[str, str]:
        """With ``fail_on_data_loss: false``, the offsets a batch could not read because the
        brokers deleted them first (see :mod:`cdcflow.sources.offsets`)."""
        if self.kafka.fail_on_data_loss:
            return {}
        from cdcflow.sources.offsets import batch_start, log_starts, skipped

        start = batch_start(spark, checkpoint, batch_id)
        return skipped(start, log_starts(spark, self.spark_options, sorted(start)))

    def lag(
        self, spark: SparkSession, read: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int] | None:
        """Per partition, the broker's end offset less what the query has read (``read``),
        asked with a Kafka consumer in the driver's JVM (no Spark job); ``None`` when the
        brokers do not answer."""
        from cdcflow.sources.offsets import offsets, open_consumer
        from cdcflow.spark.kind import is_connect

        if not read or is_connect(spark):  # Kafka's client is in the JVM, out of reach
            return None
        try:
            if self._consumer is None:
                self._consumer = open_consumer(spark, self.spark_options)
            ends = offsets(spark, self._consumer, sorted(read), ends=True, seconds=2)
        except Exception:  # a broker that does not answer: the lag stays as last seen
            log.debug("asking the broker for end offsets", exc_info=True)
            return None
        return {tp: max(0, end - read.get(tp, 0)) for tp, end in ends.items()}

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
