"""Renderings of every dialect as rows of Spark's Kafka source, and what they must decode to."""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects import renderer, renderer_features
from cdcflow.dialects.model import DialectOptions
from cdcflow.simulation.workload import Workload, generate
from cdcflow.transports.message import RawMessage

#: :data:`cdcflow.decode.spark.KAFKA_SCHEMA` as Arrow types.
KAFKA_ARROW = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
_EPOCH = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
_JSON = (".json", ".jsonl", ".ndjson")


@dataclass
class KafkaRendering:
    """A dialect's rendering (with its delivery faults) and its messages as Kafka rows."""

    name: str
    workload: Workload
    options: DialectOptions
    files: list[Path]
    rows: list[dict[str, Any]]


def kafka_rendering(
    name: str, root: Path, seed: int = 21, transactions: int = 20
) -> KafkaRendering:
    """Render ``name`` into ``root`` and turn every message of its JSON files into a record of
    a topic with two partitions (offsets counted per partition), keys and headers as the
    producer sent them."""
    w = generate(seed, transactions=transactions, features=renderer_features(name))
    res = renderer(name)(w, root, seed=seed, faults=True)
    files = sorted(f for f in res.files if f.suffix.lower() in _JSON)
    decoder = Decoder(name, res.options)
    rows: list[dict[str, Any]] = []
    offsets = [0, 0]
    for f in files:
        for framed in decoder.frame(f.read_bytes(), str(f)):
            assert isinstance(framed, RawMessage)
            msg = decoder.carried(framed)
            partition = zlib.crc32(msg.key or msg.data) % 2
            offset = offsets[partition]
            offsets[partition] += 1
            headers = [{"key": k, "value": v} for k, v in (msg.headers or {}).items()]
            rows.append(
                {
                    "key": msg.key,
                    "value": msg.data,
                    "topic": msg.kafka.topic if msg.kafka and msg.kafka.topic else name,
                    "partition": partition,
                    "offset": offset,
                    "timestamp": _EPOCH + dt.timedelta(milliseconds=len(rows)),
                    "timestampType": 0,
                    "headers": headers or None,
                }
            )
    return KafkaRendering(name, w, res.options, files, rows)


def kafka_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Kafka rows as one Arrow batch."""
    return pa.RecordBatch.from_pylist(rows, schema=KAFKA_ARROW)


def same(e: dict[str, Any]) -> tuple[Any, ...]:
    """What must not depend on the transport: the event without its coordinates (the id and
    sequence of events ordered by delivery, and the id of a resolved watermark, which name
    its topic and partition, left out)."""
    meta = e["metadata"] or {}
    delivery = str(meta.get("sequence_source", "")).startswith("delivery")
    return (
        None if delivery or e["operation"] == "RESOLVED" else e["id"],
        e["operation"],
        e["table"],
        tuple(sorted((e["key"] or {}).items())),
        tuple(sorted((e["before"] or {}).items())),
        tuple(sorted((e["after"] or {}).items())),
        None if delivery else e["sequence"],
    )


def reference(r: KafkaRendering) -> tuple[list[tuple[Any, ...]], int]:
    """The events (as :func:`same`, wire strings) and the number of split-message segments of
    the rendering's files, decoded as files."""
    decoder = Decoder(r.name, r.options, wire=True)
    events: list[tuple[Any, ...]] = []
    segments = 0
    for f in r.files:
        for out in decoder.decode_file(f.read_bytes(), str(f)):
            assert not out.rejections, out.rejections[:1]
            events.extend(same(e) for e in out.events)
            segments += len(out.segments)
    return sorted(events, key=repr), segments
