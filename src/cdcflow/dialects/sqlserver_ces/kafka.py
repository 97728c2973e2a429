"""SQL Server change event streaming's Kafka form: into Event Hubs, read through its Kafka
endpoint.

One topic (the event hub, ``<prefix>``), no key (Event Hubs spreads events over partitions),
CloudEvents in structured content mode or binary content mode (``ce_*`` headers, the ``data``
as the value), and the segments of a split message on different partitions.
"""

from __future__ import annotations

import random

import orjson

from cdcflow.dialects.rendering import KafkaDelivery, KafkaRecord
from cdcflow.dialects.sqlserver_ces.render import (
    EVENT_KINDS,
    decode_options,
    render_change,
    split_event,
)
from cdcflow.simulation.workload import Workload

#: The event hub.
PREFIX = "ces"


def records(
    workload: Workload, *, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    """Each event (with ``faults``, some split into segments) on a partition of its own
    choosing, half in binary content mode."""
    rng = random.Random(seed)
    out: list[KafkaRecord] = []
    for ch in workload.changes():
        if ch.kind not in EVENT_KINDS:
            continue
        event = render_change(workload, ch, preview=False, old_values=True)
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
                value = orjson.dumps(piece)
            out.append(KafkaRecord(prefix, None, value, headers, partition))
    return KafkaDelivery("sqlserver_ces", out, decode_options(workload), [prefix])
