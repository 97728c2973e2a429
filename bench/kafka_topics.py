"""(k) the shapes of (e) and (f) read from a Kafka topic by both sides."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from bench.baselines import handwritten_tables
from bench.common import SCALE, write_tables
from bench.runner import Follow, multi_cfg

if TYPE_CHECKING:
    pass


def _produce_file(bootstrap: str, topic: str, path: Path) -> dict[int, tuple[int, int]]:
    """Each line of ``path`` produced to ``topic`` (key: table and id, as the unified format's
    Kafka form keys by table and primary key); the offsets written per partition
    (first, last + 1)."""
    from cdcflow.dialects.rendering import KafkaRecord
    from cdcflow.testing.kafka import produce

    records = []
    for line in path.read_bytes().splitlines():
        doc = orjson.loads(line)
        key = (doc.get("after") or doc.get("before"))["id"]
        records.append(KafkaRecord(topic, f"{doc['table']}:{key}".encode(), line))
    spans: dict[int, tuple[int, int]] = {}
    for _, partition, offset in produce(bootstrap, records):
        first, end = spans.get(partition, (offset, offset + 1))
        spans[partition] = (min(first, offset), max(end, offset + 1))
    return spans


def _kafka_lines(spark: Any, bootstrap: str, topic: str, spans: dict[int, tuple[int, int]]) -> Any:
    """What a hand-written job reads from Kafka for one batch: the offset range, as lines."""
    start = json.dumps({topic: {str(p): a for p, (a, _) in spans.items()}})
    end = json.dumps({topic: {str(p): b for p, (_, b) in spans.items()}})
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", start)
        .option("endingOffsets", end)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
    )


def bench_kafka_shape(
    spark: Any, root: Path, bootstrap: str, label: str, tables: int, events: int, keys: int
) -> dict[str, Any]:
    """(k)/(k'): the steady batch of ``events`` events over ``tables`` existing tables read
    from a topic of a local broker (three partitions), in a running ``--follow`` pipeline,
    against the hand-written job reading the same offsets with Spark's Kafka source +
    ``from_json`` + ``row_number`` + one ``MERGE`` per table."""
    files = root / f"{label}_files"
    topic = f"bench.{label}"
    n_load = max(events, tables * keys)
    lsn = write_tables(files / "0.jsonl", n_load, tables, keys, 1, 1, inserts_only=True)
    paths = [files / "0.jsonl"]
    for b in range(1, 3):
        paths.append(files / f"{b}.jsonl")
        lsn = write_tables(paths[-1], events, tables, keys, seed=b + 30, first_lsn=lsn)
    spans: list[dict[int, tuple[int, int]]] = []

    def send(path: Path) -> Callable[[], dict[int, tuple[int, int]]]:
        def produce() -> dict[int, tuple[int, int]]:
            spans.append(_produce_file(bootstrap, topic, path))
            return spans[-1]

        return produce

    kafka = {
        "bootstrap_servers": bootstrap,
        "topics": [topic],
        "starting_offsets": "earliest",
        "max_offsets_per_trigger": 10 * n_load,
    }
    from cdcflow.testing.kafka import create_topics

    create_topics(bootstrap, [topic], 3)
    cfg = multi_cfg(root, f"bench_{label}", root / "unused", tables, kafka=kafka)
    follow = Follow(spark, cfg)
    try:
        load_s, _, _ = follow.read_to(send(paths[0]), topic)
        warm_s, _, _ = follow.read_to(send(paths[1]), topic)
        steady_s, report, triggers = follow.read_to(send(paths[2]), topic)
    finally:
        follow.stop()
    hand_ns = f"bench_{label}_hand"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS cdc.{hand_ns}")
    for span in spans[:2]:  # the load, then a warm batch
        handwritten_tables(spark, _kafka_lines(spark, bootstrap, topic, span), hand_ns, tables)
    t = time.perf_counter()
    handwritten_tables(spark, _kafka_lines(spark, bootstrap, topic, spans[2]), hand_ns, tables)
    hand_s = time.perf_counter() - t
    differing = sum(
        spark.sql(
            f"SELECT count(*) AS n FROM (SELECT id, name, qty, price, updated_at FROM "
            f"cdc.bench_{label}.t{t:03d} EXCEPT SELECT * FROM cdc.{hand_ns}.t{t:03d})"
        ).collect()[0]["n"]
        for t in range(min(tables, 3))
    )
    stages = dict(getattr(report, "stages", {}) or {})
    return {
        "tables": tables,
        "events": events,
        "hand_written_seconds": hand_s,
        "ours_steady_seconds": steady_s,
        "ours_warmup_batch_seconds": warm_s,
        "ours_first_load_seconds": load_s,
        "ratio_steady": steady_s / hand_s,
        "steady_triggers": triggers,
        # the last trigger's stages (the one that read the topic to its end)
        "decode_share": stages.get("decode", 0.0) / report.seconds if report.seconds else 0.0,
        "steady_stages": stages,
        "rows_differing_from_hand_written_first_3_tables": int(differing),
    }


def bench_kafka(spark: Any, root: Path) -> dict[str, Any]:
    """(k) and (k') against a broker started here (cdcflow.testing.services)."""
    from cdcflow.testing.services.kafka import KafkaBroker

    with KafkaBroker(root / "kafka") as broker:
        one = bench_kafka_shape(
            spark, root, broker.bootstrap, "kone", 1, int(200_000 * SCALE), int(40_000 * SCALE)
        )
        print(kafka_line("k", one), flush=True)
        many = bench_kafka_shape(
            spark, root, broker.bootstrap, "kmany", 100, int(20_000 * SCALE), 50
        )
        print(kafka_line("k'", many), flush=True)
    return {"one_table": one, "many_tables": many}


def kafka_line(tag: str, r: dict[str, Any]) -> str:
    return (
        f"({tag}) Kafka, {r['events']:,} events over {r['tables']} existing table(s): cdcflow "
        f"{r['ours_steady_seconds']:.1f}s steady (--follow, {r.get('steady_triggers', 1)} "
        f"trigger(s); decode share of the last {r['decode_share']:.0%}), hand-written "
        f"{r['hand_written_seconds']:.1f}s; time ratio {r['ratio_steady']:.2f}×; rows differing "
        f"from the hand-written replicas: {r['rows_differing_from_hand_written_first_3_tables']}"
    )
