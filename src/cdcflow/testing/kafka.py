"""A real Kafka client that writes a producer's records to a broker and reads topics back
(tests, ``make kafka-demo``). Each producer's Kafka form is its dialect's
(``cdcflow.dialects.<name>.kafka``, through :func:`cdcflow.dialects.kafka_delivery`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from cdcflow.dialects.rendering import KafkaRecord


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 3) -> None:
    """Create topics (those that exist are left alone) and wait until every partition has a
    leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = sorted(set(topics))
    existing = set(admin.list_topics(timeout=30).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in wanted]
    new = [n for n in new if n.topic not in existing]
    if new:
        for _topic, future in admin.create_topics(new, operation_timeout=30).items():
            future.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        if all(
            t in meta
            and meta[t].partitions
            and all(p.leader >= 0 for p in meta[t].partitions.values())
            for t in wanted
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics without leaders after 30s: {wanted}")


def produce(
    bootstrap: str, records: Sequence[KafkaRecord], partitions: int = 3
) -> list[tuple[str, int, int]]:
    """Produce ``records`` in order (each topic created with ``partitions`` first); returns
    where the broker stored each, (topic, partition, offset), in the order of ``records``.
    Keys are partitioned as Kafka's Java client does."""
    from confluent_kafka import KafkaException, Producer

    create_topics(bootstrap, {r.topic for r in records}, partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    failures: list[str] = []
    stored: list[tuple[str, int, int] | None] = [None] * len(records)

    def done(i: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                stored[i] = (str(msg.topic()), int(msg.partition()), int(msg.offset()))

        return report

    for i, r in enumerate(records):
        kwargs: dict[str, Any] = {"key": r.key, "value": r.value, "on_delivery": done(i)}
        if r.headers:
            kwargs["headers"] = list(r.headers)
        if r.partition is not None:
            kwargs["partition"] = r.partition
        while True:
            try:
                producer.produce(r.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    remaining = producer.flush(60)
    if failures or remaining or any(s is None for s in stored):
        raise KafkaException(f"{len(failures)} failed, {remaining} unsent: {failures[:3]}")
    return [s for s in stored if s is not None]


def consume(bootstrap: str, topics: Sequence[str], timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every record of ``topics`` from the start to their current end: topic, partition,
    offset, key, value, headers."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cdcflow-read-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = consumer.list_topics(timeout=timeout).topics
        ends: dict[tuple[str, int], int] = {}
        assigned = []
        for t in topics:
            for p in meta[t].partitions:
                _low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=timeout)
                if high > 0:
                    ends[(t, p)] = high
                    assigned.append(TopicPartition(t, p, 0))
        consumer.assign(assigned)
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            where = (str(msg.topic()), int(msg.partition() or 0))
            offset = int(msg.offset() or 0)
            out.append(
                {
                    "topic": where[0],
                    "partition": where[1],
                    "offset": offset,
                    "key": msg.key(),
                    "value": msg.value(),
                    "headers": list(msg.headers() or []),
                }
            )
            if offset + 1 >= ends.get(where, 0):
                ends.pop(where, None)
        if ends:
            raise TimeoutError(f"partitions not read to their end: {sorted(ends)}")
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, prefix: str, attempts: int = 60) -> dict[tuple[str, int], int]:
    """The end offset of every partition of the topics named ``<prefix>.…``, asked again
    while topics are being created or the broker restarts (their partitions have no leader
    for a moment)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    for attempt in range(attempts):
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-probe"})
        try:
            out = {}
            for name, meta in probe.list_topics(timeout=10).topics.items():
                if name.startswith(prefix + "."):
                    for p in meta.partitions:
                        tp = TopicPartition(name, p)
                        out[(name, p)] = probe.get_watermark_offsets(tp, timeout=10)[1]
            return out
        except KafkaException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
        finally:
            probe.close()
    raise AssertionError("unreachable")
