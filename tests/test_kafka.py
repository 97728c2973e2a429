"""Kafka in: a real broker (``cdcflow.testing.services.kafka``), each producer's own Kafka form
produced with a real client into topics of three partitions, read by ``kafka:`` sources of the
pipeline with Spark's Kafka connector; the replicas equal the oracle."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.config import load_config
from cdcflow.errors import CdcflowError
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.report import format_report
from cdcflow.testing import oracle
from cdcflow.testing.compare import diff_table, read_replica
from cdcflow.testing.kafka import KAFKA_DIALECTS, delivery, produce
from cdcflow.testing.renderers import renderer_features
from cdcflow.testing.workload import Workload, generate

pytestmark = pytest.mark.spark

_names = itertools.count()


def kafka_config(
    root: Path, name: str, dialect: str, bootstrap: str, options: Any, **kafka: Any
) -> Any:
    """A pipeline over one ``kafka:`` source."""
    source = {
        "name": "k",
        "dialect": dialect,
        "kafka": {"bootstrap_servers": bootstrap, **kafka},
        "keys": {t: list(k) for t, k in options.table_keys.items()},
        "types": {t: dict(c) for t, c in options.column_types.items()},
        "options": dict(options.extra),
    }
    return load_config(
        {
            "pipeline": name,
            "checkpoint": str(root / "checkpoint"),
            "namespace": name,
            "sources": [source],
        }
    )


def assert_replicas(spark: Any, namespace: str, w: Workload) -> None:
    expected = oracle.apply(w)
    for name, table in w.tables.items():
        cols = list(table.columns)
        actual = read_replica(spark, f"cdc.{namespace}.{name}", cols)
        d = diff_table(name, list(expected[name].values()), actual, cols)
        assert d.equal, f"{name}: missing {d.missing[:3]} unexpected {d.unexpected[:3]}"


@pytest.mark.parametrize("dialect", KAFKA_DIALECTS)
def test_each_producers_kafka_form_through_a_real_broker_equals_the_oracle(
    spark: Any, kafka: Any, tmp_path: Path, dialect: str
) -> None:
    n = next(_names)
    w = generate(50 + n, tables=3, transactions=40, features=renderer_features(dialect))
    sent = delivery(dialect, w, seed=50 + n, prefix=f"k{n}{dialect[:4]}")
    assert produce(kafka.bootstrap, sent.records) == len(sent.records)
    name = f"kafka_{dialect}"
    cfg = kafka_config(tmp_path, name, dialect, kafka.bootstrap, sent.options, topics=sent.topics)
    reports = Pipeline(cfg, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 0, [r.__dict__ for r in reports]
    assert_replicas(spark, name, w)


def _savegress_records(w: Workload, topic: str, txs: slice) -> list[Any]:
    """The unified format's Kafka form of some transactions, on one topic."""
    from cdcflow.testing.kafka import KafkaRecord
    from cdcflow.testing.render_savegress import _kafka, render_messages

    out = []
    for doc in render_messages(w, transactions=txs):
        form = _kafka(doc, w)
        headers = tuple((k, str(v).encode()) for k, v in form["headers"].items())
        out.append(KafkaRecord(topic, form["key"].encode(), orjson.dumps(form["value"]), headers))
    return out


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdcflow-probe"})
    try:
        parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        }
    finally:
        probe.close()


def test_offsets_deleted_before_they_were_read_stop_the_source_or_are_recorded(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """Retention deletes records the source's checkpoint still needs: the run stops with
    KAFKA_DATA_LOSS naming the topic, partition and offsets; with fail_on_data_loss false it
    goes on from what Kafka still has and the batch history says what was skipped."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    w = generate(61, tables=1, transactions=30, features=frozenset({"insert", "update"}))
    topic = "lossy"
    produce(kafka.bootstrap, _savegress_records(w, topic, slice(0, 10)))
    options = delivery("savegress", w, seed=61).options
    cfg = kafka_config(tmp_path, "lossy", "savegress", kafka.bootstrap, options, topics=[topic])
    Pipeline(cfg, spark).run()
    read = _ends(kafka.bootstrap, topic)
    produce(kafka.bootstrap, _savegress_records(w, topic, slice(10, 30)))
    # retention deletes all but the last two records of each partition
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    ends = _ends(kafka.bootstrap, topic)
    cut = {p: end - 2 for p, end in ends.items() if end - 2 > read[p]}
    assert cut, (read, ends)
    for future in admin.delete_records(
        [TopicPartition(topic, p, o) for p, o in cut.items()]
    ).values():
        future.result()

    result = Pipeline(cfg, spark).run(raise_on_failure=False)
    failure = result.failure
    assert isinstance(failure, CdcflowError) and failure.code == "KAFKA_DATA_LOSS", failure
    assert "source 'k': offsets " in failure.message and f" of {topic}-" in failure.message
    assert "fail_on_data_loss: false" in (failure.hint or "")
    assert not result.reports  # nothing applied past the loss

    going_on = kafka_config(
        tmp_path,
        "lossy",
        "savegress",
        kafka.bootstrap,
        options,
        topics=[topic],
        fail_on_data_loss=False,
    )
    reports = Pipeline(going_on, spark).run().reports
    skipped = {k: v for r in reports for k, v in r.skipped.items()}
    assert skipped == {f"{topic}-{p}": f"{read[p]}-{o}" for p, o in cut.items()}
    history = spark.sql("SELECT skipped FROM cdc.lossy__cdcflow.batches WHERE size(skipped) > 0")
    assert [dict(r["skipped"]) for r in history.collect()] == [skipped]
    assert "offsets no longer in Kafka, skipped: " in format_report(reports[0])
