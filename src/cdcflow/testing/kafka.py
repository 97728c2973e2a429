"""Each producer's own Kafka delivery of a workload, and a real client that writes it to a
broker and reads topics back (tests, ``make kafka-demo``).

A producer's Kafka form is its topics, keys, values, headers and partitioning:

- ``debezium`` (the PostgreSQL connector): a topic per table (``<prefix>.public.<table>``),
  the key message as the Kafka key (so a key stays on one partition), null-value tombstones
  after deletes and key changes, the transaction metadata topic (``<prefix>.transaction``) and
  the schema change topic (``<prefix>``) where a column is added;
- ``cockroachdb`` (the Kafka sink with ``full_table_name``): a topic per table
  (``<database>.public.<table>``), the key as a JSON array of the primary key's values, the
  value without key or topic, and every resolved timestamp sent to every partition of every
  topic;
- ``sqlserver_ces`` (change event streaming into Event Hubs, read through its Kafka endpoint):
  one topic (the event hub, ``<prefix>``), no key (Event Hubs spreads events over
  partitions), CloudEvents in structured content mode or binary content mode (``ce_*``
  headers, the ``data`` as the value), and the segments of a split message on different
  partitions;
- ``savegress`` (the unified format's Kafka message form): a topic per table
  (``<prefix>.<table>``), key
  ``<table>:<primary key>``, the event as the value, ``savegress-*`` headers; transaction
  markers on ``<prefix>.transactions``.

Delivery faults (``faults=True``): records sent twice, and a producer restart that resends a
run of records already sent. Order across partitions is whatever the broker gives: ordering
comes from each producer's own sequence.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcflow.dialects.base import DialectOptions
from cdcflow.simulation.workload import Workload

#: Dialects with a Kafka form.
KAFKA_DIALECTS = ("cockroachdb", "debezium", "savegress", "sqlserver_ces")


@dataclass(frozen=True)
class KafkaRecord:
    """One record to produce. ``partition`` ``None``: the producer's partitioner picks it from
    the key (murmur2, as Kafka's Java client does)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None


@dataclass
class KafkaDelivery:
    """A workload as a producer delivers it through Kafka, and what decoding it needs."""

    dialect: str
    records: list[KafkaRecord]
    options: DialectOptions
    topics: list[str] = field(default_factory=list)


def _json(doc: Any) -> bytes:
    return orjson.dumps(doc)


def _with_faults(records: list[KafkaRecord], rng: random.Random) -> list[KafkaRecord]:
    """Some records twice, and a run of records sent again, as after a producer restart."""
    out = [r for r in records for _ in range(2 if rng.random() < 0.05 else 1)]
    if len(records) > 6:
        start = rng.randrange(len(records) - 6)
        out.extend(records[start : start + rng.randrange(3, 7)])
    return out


def _debezium(w: Workload, seed: int, faults: bool, partitions: int, prefix: str) -> KafkaDelivery:
    from cdcflow.testing.render_debezium import decode_options, render_records

    records: list[KafkaRecord] = []
    added: set[tuple[str, str]] = set()
    rendered = render_records(w, faults=faults, seed=seed)
    for topic, key, value in rendered:
        if faults and value is not None and topic.startswith("app.public."):
            # the first row with an added column follows the connector's schema change
            table = topic.rsplit(".", 1)[-1]
            after = (value.get("payload") or value).get("after") or {}
            for column in [c for c in after if (table, c) not in added and _added(w, table, c)]:
                added.add((table, column))
                ddl = f"ALTER TABLE public.{table} ADD COLUMN {column} text"
                change = {
                    "source": {"connector": "postgresql", "db": "app", "table": table},
                    "databaseName": "app",
                    "schemaName": "public",
                    "ddl": ddl,
                    "tableChanges": [{"type": "ALTER", "id": f'"app"."public"."{table}"'}],
                }
                records.append(KafkaRecord(prefix, _json({"databaseName": "app"}), _json(change)))
        records.append(
            KafkaRecord(
                prefix + topic.removeprefix("app"),
                None if key is None else _json(key),
                None if value is None else _json(value),
            )
        )
    topics = sorted({r.topic for r in records})
    return KafkaDelivery("debezium", records, decode_options(w), topics)


def _added(w: Workload, table: str, column: str) -> bool:
    """Whether a column of a table's rows came with an ``add_column`` change."""
    return any(
        c.kind == "add_column" and c.table == table and c.column == column for c in w.changes()
    )


def _cockroachdb(
    w: Workload, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    from cdcflow.testing.render_cockroachdb import decode_options, kafka_messages

    messages, resolved = kafka_messages(w, seed=seed, faults=faults)
    # full_table_name: <database>.<schema>.<table>
    records = [
        KafkaRecord(f"{prefix}.public.{table}", _json(key), None if doc is None else _json(doc))
        for table, key, doc in messages
    ]
    topics = sorted(f"{prefix}.public.{t}" for t in w.tables)
    if resolved is not None:
        for topic in topics:
            for partition in range(partitions):
                records.append(
                    KafkaRecord(topic, None, _json({"resolved": resolved}), partition=partition)
                )
    return KafkaDelivery("cockroachdb", records, decode_options(w), topics)


def _sqlserver_ces(
    w: Workload, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    from cdcflow.testing.render_sqlserver_ces import (
        EVENT_KINDS,
        decode_options,
        render_change,
        split_event,
    )

    rng = random.Random(seed)
    records: list[KafkaRecord] = []
    for ch in w.changes():
        if ch.kind not in EVENT_KINDS:
            continue
        event = render_change(w, ch, preview=False, old_values=True)
        pieces = (
            split_event(event, rng.choice((2, 3))) if faults and rng.random() < 0.15 else [event]
        )
        for piece in pieces:
            # Event Hubs without a partition key: each event, each segment, anywhere
            partition = rng.randrange(partitions)
            if rng.random() < 0.5:
                headers = tuple(
                    (f"ce_{k}", (v if isinstance(v, str) else orjson.dumps(v).decode()).encode())
                    for k, v in piece.items()
                    if k != "data"
                )
                value = str(piece["data"]).encode()
            else:
                headers = (("content-type", b"application/cloudevents+json"),)
                value = _json(piece)
            records.append(KafkaRecord(prefix, None, value, headers, partition))
    return KafkaDelivery("sqlserver_ces", records, decode_options(w), [prefix])


def _savegress(w: Workload, seed: int, faults: bool, partitions: int, prefix: str) -> KafkaDelivery:
    from cdcflow.testing.render_savegress import _kafka, decode_options, render_messages

    records = []
    for doc in render_messages(w, markers=True):
        form = _kafka(doc, w)
        table = doc.get("table")
        topic = f"{prefix}.{table}" if table else f"{prefix}.transactions"
        headers = tuple((k, str(v).encode()) for k, v in form["headers"].items())
        records.append(KafkaRecord(topic, form["key"].encode(), _json(form["value"]), headers))
    topics = sorted({r.topic for r in records})
    return KafkaDelivery("savegress", records, decode_options(w), topics)


_FORMS = {
    "cockroachdb": _cockroachdb,
    "debezium": _debezium,
    "savegress": _savegress,
    "sqlserver_ces": _sqlserver_ces,
}


#: Each producer's default topic prefix (the connector's topic prefix, the database of
#: CockroachDB's full table names, the event hub).
PREFIXES = {"cockroachdb": "shop", "debezium": "app", "savegress": "cdc", "sqlserver_ces": "ces"}


def delivery(
    dialect: str,
    workload: Workload,
    *,
    seed: int,
    faults: bool = True,
    partitions: int = 3,
    prefix: str | None = None,
) -> KafkaDelivery:
    """A workload in ``dialect``'s Kafka form (one of :data:`KAFKA_DIALECTS`); its topics
    start with ``prefix`` (default :data:`PREFIXES`)."""
    found = _FORMS[dialect](workload, seed, faults, partitions, prefix or PREFIXES[dialect])
    if faults:
        found.records = _with_faults(found.records, random.Random(seed + 1))
    return found


# --------------------------------------------------------------------------- a real client


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
