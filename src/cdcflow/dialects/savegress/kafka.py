"""The unified format's Kafka form: its Kafka message form on a topic per table.

A topic per table (``<prefix>.<table>``), key ``<table>:<primary key>``, the event as the
value, ``savegress-*`` headers; transaction markers on ``<prefix>.transactions``.
"""

from __future__ import annotations

import orjson

from cdcflow.dialects.rendering import KafkaDelivery, KafkaRecord
from cdcflow.dialects.savegress.render import decode_options, kafka_message, render_messages
from cdcflow.simulation.workload import Workload

#: The producer's topic prefix.
PREFIX = "cdc"


def records(
    workload: Workload, *, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    """Every event and transaction marker in commit order (faults are the registry's)."""
    out: list[KafkaRecord] = []
    for doc in render_messages(workload, markers=True):
        form = kafka_message(doc, workload)
        table = doc.get("table")
        topic = f"{prefix}.{table}" if table else f"{prefix}.transactions"
        headers = tuple((k, str(v).encode()) for k, v in form["headers"].items())
        out.append(KafkaRecord(topic, form["key"].encode(), orjson.dumps(form["value"]), headers))
    topics = sorted({r.topic for r in out})
    return KafkaDelivery("savegress", out, decode_options(workload), topics)
