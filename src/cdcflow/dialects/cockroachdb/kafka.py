"""CockroachDB's Kafka form: the Kafka sink with ``full_table_name``.

A topic per table (``<database>.public.<table>``), the key as a JSON array of the primary
key's values, the value without key or topic, and every resolved timestamp sent to every
partition of every topic.
"""

from __future__ import annotations

import random

import orjson

from cdcflow.dialects.cockroachdb.feed import (
    Message,
    decode_options,
    hlc,
    hlc_text,
    messages,
    redelivered,
)
from cdcflow.dialects.rendering import KafkaDelivery, KafkaRecord
from cdcflow.simulation.workload import Workload

#: The database of the full table names.
PREFIX = "shop"


def records(
    workload: Workload, *, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    """Each table's changefeed in the order it emits (with at-least-once redelivery and
    schema-change backfills when ``faults``), then the resolved timestamp closing the window."""
    rng = random.Random(seed)
    window = range(len(workload.transactions))
    per_table: dict[str, list[Message]] = {}
    for m in messages(workload, window, rng if faults else None, feed="kafka"):
        per_table.setdefault(m.table, []).append(m)
    out: list[KafkaRecord] = []
    for table, sent in sorted(per_table.items()):
        for m in redelivered(sent, rng) if faults else sent:
            value = None if m.doc is None else orjson.dumps(m.doc)
            out.append(KafkaRecord(f"{prefix}.public.{table}", orjson.dumps(m.key), value))
    topics = sorted(f"{prefix}.public.{t}" for t in workload.tables)
    if len(window):
        resolved = orjson.dumps({"resolved": hlc_text(hlc(workload, window[-1], 5))})
        for topic in topics:
            for partition in range(partitions):
                out.append(KafkaRecord(topic, None, resolved, partition=partition))
    return KafkaDelivery("cockroachdb", out, decode_options(workload), topics)
