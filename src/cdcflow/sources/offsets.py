"""What a Kafka source's batch skipped, when offsets it still needed were gone.

Spark's Kafka source with ``failOnDataLoss=false`` goes on past offsets that retention (or a
deleted topic) removed before they were read, and says so only in its log. For such a source,
each batch compares where it was to start — the previous batch's end offsets, in the query's
checkpoint (``offsets/<batch id - 1>``) — with where each partition's log starts now (asked of
the broker with Kafka's own client, already on the classpath with Spark's connector), and the
batch history records the offsets skipped: ``<topic>-<partition>`` → ``<from>-<to>``. No
Spark job is run for it. The same client tells a running pipeline's metrics where each
partition's log ends (the offsets not read yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def batch_start(spark: SparkSession, checkpoint: str, batch_id: int) -> dict[tuple[str, int], int]:
    """Where a batch of a Kafka source started reading: the end offsets of the batch before
    it, per (topic, partition); empty for the first batch or an unreadable log."""
    if batch_id <= 0:
        return {}
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/{batch_id - 1}")
    fs = path.getFileSystem(conf)
    if not fs.exists(path):
        return {}
    stream = fs.open(path)
    try:
        text = str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()
    lines = text.splitlines()
    # v1, the batch's metadata, then one line per source of the query: {"topic": {"0": 42}}
    try:
        offsets = orjson.loads(lines[2]) if len(lines) > 2 else {}
    except orjson.JSONDecodeError:
        return {}
    out: dict[tuple[str, int], int] = {}
    if isinstance(offsets, dict):
        for topic, parts in offsets.items():
            if isinstance(parts, dict):
                for partition, offset in parts.items():
                    if isinstance(offset, int) and offset >= 0:
                        out[(str(topic), int(partition))] = offset
    return out


def log_starts(
    spark: SparkSession, options: Mapping[str, str], partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Where each partition's log starts now (its earliest offset still kept), asked of the
    broker with the source's own connection settings (``kafka.*`` options)."""
    if not partitions:
        return {}
    consumer = open_consumer(spark, options)
    try:
        return offsets(spark, consumer, partitions, ends=False, seconds=30)
    finally:
        consumer.close()


def open_consumer(spark: SparkSession, options: Mapping[str, str]) -> Any:
    """A Kafka consumer in the driver's JVM (Kafka's own client, on the classpath with Spark's
    connector) with the source's connection settings (``kafka.*`` options); nothing is
    subscribed or committed."""
    jvm: Any = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in options.items():
        if key.startswith("kafka."):
            props.setProperty(key.removeprefix("kafka."), value)
    deserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    props.setProperty("key.deserializer", deserializer)
    props.setProperty("value.deserializer", deserializer)
    props.setProperty("enable.auto.commit", "false")
    return jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)


def offsets(
    spark: SparkSession,
    consumer: Any,
    partitions: list[tuple[str, int]],
    ends: bool,
    seconds: float,
) -> dict[tuple[str, int], int]:
    """Where each partition's log starts, or (``ends``) ends, now: asked of the broker with
    ``consumer`` (:func:`open_consumer`), waiting at most ``seconds``."""
    jvm: Any = spark.sparkContext._jvm
    wanted = jvm.java.util.ArrayList()
    for topic, partition in partitions:
        wanted.add(jvm.org.apache.kafka.common.TopicPartition(topic, partition))
    wait = jvm.java.time.Duration.ofMillis(int(seconds * 1000))
    found = consumer.endOffsets(wanted, wait) if ends else consumer.beginningOffsets(wanted, wait)
    out: dict[tuple[str, int], int] = {}
    for entry in found.entrySet():
        tp = entry.getKey()
        out[(str(tp.topic()), int(tp.partition()))] = int(entry.getValue())
    return out


def skipped(
    start: Mapping[tuple[str, int], int], earliest: Mapping[tuple[str, int], int]
) -> dict[str, str]:
    """The offsets a batch could not read: ``<topic>-<partition>`` → ``<from>-<to>`` (``to``
    excluded) where a partition's log now starts past where the batch was to start."""
    out: dict[str, str] = {}
    for (topic, partition), offset in sorted(start.items()):
        first = earliest.get((topic, partition))
        if first is not None and first > offset:
            out[f"{topic}-{partition}"] = f"{offset}-{first}"
    return out
