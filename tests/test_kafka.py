"""Kafka in: a real broker (``cdcflow.testing.services.kafka``), each producer's own Kafka form
produced with a real client into topics of three partitions, read by ``kafka:`` sources of the
pipeline with Spark's Kafka connector; the replicas equal the oracle."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.config import load_config, load_config_file
from cdcflow.dialects import kafka_delivery, kafka_dialects, renderer_features
from cdcflow.dialects.rendering import KafkaRecord
from cdcflow.errors import CdcflowError
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.report import format_report
from cdcflow.simulation.workload import Workload, generate
from cdcflow.testing.compare import compare_replicas
from cdcflow.testing.kafka import produce
from cdcflow.testing.services.base import free_port
from tests.crashing import ROOT, command, line_points
from tests.processes import pipeline_config

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


@pytest.mark.parametrize("dialect", kafka_dialects())
def test_each_producers_kafka_form_through_a_real_broker_equals_the_oracle(
    spark: Any, kafka: Any, tmp_path: Path, dialect: str
) -> None:
    n = next(_names)
    w = generate(50 + n, tables=3, transactions=40, features=renderer_features(dialect))
    sent = kafka_delivery(dialect, w, seed=50 + n, prefix=f"k{n}{dialect[:4]}")
    assert len(produce(kafka.bootstrap, sent.records)) == len(sent.records)
    name = f"kafka_{dialect}"
    cfg = kafka_config(tmp_path, name, dialect, kafka.bootstrap, sent.options, topics=sent.topics)
    reports = Pipeline(cfg, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 0, [r.__dict__ for r in reports]
    compare_replicas(spark, w, name).assert_equal()
    # records without a change (Debezium's tombstones after deletes) are counted, apart from
    # the events, in the reports, their progress lines and the batch history
    skipped: Counter[str] = Counter()
    for r in reports:
        skipped.update(r.skipped_messages)
        assert r.events == r.applied + r.duplicates + r.stale + r.conflicts + r.dead_lettered
        assert sum(r.operations.values()) == r.events
    nulls = sum(r.value is None for r in sent.records)
    assert skipped == (Counter({"tombstone": nulls}) if nulls else Counter()), skipped
    history = spark.sql(f"SELECT skipped_messages FROM cdc.{name}__cdcflow.batches").collect()
    recorded: Counter[str] = Counter()
    for row in history:
        recorded.update(dict(row["skipped_messages"]))
    assert recorded == skipped
    if dialect == "debezium":
        assert nulls > 0
        lines = [format_report(r) for r in reports if r.skipped_messages]
        assert lines and all(" without a change skipped (tombstone=" in x for x in lines)


def _savegress_records(w: Workload, topic: str, txs: slice) -> list[Any]:
    """The unified format's Kafka form of some transactions, on one topic."""
    from cdcflow.dialects.savegress.render import kafka_message, render_messages

    out = []
    for doc in render_messages(w, transactions=txs):
        form = kafka_message(doc, w)
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
    options = kafka_delivery("savegress", w, seed=61).options
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


def _follow(config: Path, crash_after: str | None, kill_after_batches: int | None) -> int:
    """``cdcflow run --follow`` in a process of its own, killed right after one commit
    (``tests/crashing.py``), or with SIGKILL into the batch after ``kill_after_batches``."""
    proc = subprocess.Popen(
        command(crash_after, "run", str(config), "--follow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        cwd=ROOT,
    )
    # a crash point that never comes would leave the run following forever
    guard = threading.Timer(240, lambda: os.killpg(proc.pid, signal.SIGTERM))
    guard.start()
    try:
        assert proc.stdout is not None
        batches = 0
        for line in proc.stdout:
            batches += line.startswith("batch ")
            if kill_after_batches is not None and batches >= kill_after_batches:
                time.sleep(1.5)  # into the next batch's work
                os.killpg(proc.pid, signal.SIGKILL)
                break
        return proc.wait(timeout=600)
    finally:
        guard.cancel()


@pytest.mark.services
def test_killed_at_five_points_then_rerun_equals_the_oracle_and_a_poison_record_blocks_nothing(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """A following run over Debezium topics killed right after a merge, a dead-letter commit,
    a batch-history commit and another merge (each Spark line proves half of these), and in
    the middle of a batch; the rerun gives
    the oracle's replicas, every batch in the history once, each poison record dead-lettered
    once with its Kafka coordinates."""
    w = generate(71, tables=3, transactions=60, features=renderer_features("debezium"))
    sent = kafka_delivery("debezium", w, seed=71, prefix="crash71")
    table_topic = "crash71.public." + sorted(w.tables)[0]
    # a poison record on partition 1 of a table's topic every 30 records: every batch has one
    records: list[KafkaRecord] = []
    poisons: list[int] = []
    for i, r in enumerate(sent.records):
        if i % 30 == 0:
            poisons.append(len(records))
            records.append(KafkaRecord(table_topic, b"{}", b"this is not json", partition=1))
        records.append(r)
    stored = produce(kafka.bootstrap, records)
    poisoned = sorted(stored[i][1:] for i in poisons)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = pipeline_config(
        tmp_path,
        warehouse,
        sent.options,
        namespace="kcrash",
        dialect="debezium",
        kafka={
            "bootstrap_servers": kafka.bootstrap,
            "topics": sent.topics,
            "max_offsets_per_trigger": 40,
        },
        follow_interval="1s",
    )
    # this Spark line's half of the four commits (tests/crashing.py)
    for step in line_points(("merge@1", "dead_letters@2", "history@3", "merge@4")):
        assert _follow(config, step, None) == 137, step
    assert _follow(config, None, kill_after_batches=1) == -signal.SIGKILL
    assert Pipeline(load_config_file(config), spark).run().exit_status == 3  # the poison

    compare_replicas(spark, w, "kcrash").assert_equal()
    hist = spark.sql(
        "SELECT batch_id, count(*) AS n FROM cdc.kcrash__cdcflow.batches GROUP BY batch_id"
    ).collect()
    assert hist and all(r["n"] == 1 for r in hist)
    dead = spark.sql(
        "SELECT origin, offset, error_code FROM cdc.kcrash__cdcflow.dead_letters ORDER BY offset"
    ).collect()
    assert [tuple(r) for r in dead] == [
        (f"kafka://{table_topic}/{p}", offset, "NOT_JSON") for p, offset in poisoned
    ]
    from cdcflow.observe.catalog import open_catalog
    from cdcflow.observe.tables_iceberg import IcebergResults
    from cdcflow.pipeline.replay import DeadLetterFilter

    cfg = load_config_file(config)
    listed = IcebergResults(cfg, open_catalog(cfg.catalog)).dead_letters(
        DeadLetterFilter(), None, 50, 80
    )
    assert listed is not None
    shown = sorted(r["origin"] for r in listed.dicts())
    assert shown == sorted(f"kafka://{table_topic}/{p}@{o}" for p, o in poisoned)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A pipeline's ``/metrics``: each sample's value by name and labels (sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def summed(found: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in found.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


def lag(url: str) -> float | None:
    """Offsets not applied yet over every partition (``None``: not known yet)."""
    found = scrape(url)
    if not any(n == "cdcflow_kafka_lag_offsets" for n, _ in found):
        return None
    return summed(found, "cdcflow_kafka_lag_offsets")


def readyz(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "readyz", timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def until(what: Callable[[], bool], seconds: float, why: str) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.3)


def history_totals(spark: Any, namespace: str) -> dict[str, int]:
    """The batch history's counts, summed over every batch."""
    (row,) = spark.sql(
        "SELECT count(*) AS batches, sum(events) AS events, sum(applied) AS applied, "
        "sum(duplicates) AS duplicate, sum(stale) AS stale, sum(conflicts) AS conflict, "
        f"sum(dead_lettered) AS dead_lettered FROM cdc.{namespace}__cdcflow.batches"
    ).collect()
    return {k: int(v or 0) for k, v in row.asDict().items()}


def metric_totals(found: dict[Any, float]) -> dict[str, int]:
    """The same counts as a pipeline's metrics give them."""
    out = {
        "batches": int(summed(found, "cdcflow_batches_total")),
        "events": int(summed(found, "cdcflow_events_read_total")),
    }
    for outcome in ("applied", "duplicate", "stale", "conflict", "dead_lettered"):
        out[outcome] = int(summed(found, "cdcflow_events_total", outcome=outcome))
    return out


@pytest.mark.services
def test_the_broker_stopped_for_30_seconds_while_following(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """The broker stops for 30 s under a following run and starts again (same port, same
    data): the run keeps going and applies what was produced before and after. Its metrics,
    scraped as it goes, equal the batch history; each table's freshness moves to the newest
    commit applied, the lag shows what was produced and not applied yet; ``/readyz`` turns
    unready while the broker is away and ready again after; the run's stderr holds only
    cdcflow's own lines."""
    w = generate(72, tables=2, transactions=40, features=renderer_features("savegress"))
    sent = kafka_delivery("savegress", w, seed=72, prefix="outage72")
    half = len(sent.records) // 2
    produce(kafka.bootstrap, sent.records[:half])
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    port = free_port()
    config = pipeline_config(
        tmp_path,
        warehouse,
        sent.options,
        namespace="koutage",
        kafka={
            "bootstrap_servers": kafka.bootstrap,
            "topics": sent.topics,
            "max_offsets_per_trigger": 20,
        },
        follow_interval="2s",
        metrics={"port": port, "ready_intervals": 3},
    )
    url = f"http://127.0.0.1:{port}/"
    newest = {
        name: max(c.commit_time for c in w.changes() if c.table == name).timestamp()
        for name in w.tables
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "run", str(config), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    guard = threading.Timer(480, lambda: os.killpg(proc.pid, signal.SIGKILL))
    guard.start()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("batch "), first
        # the first half applied (a batch of at most 20 records at a time)
        until(lambda: metric_totals(scrape(url))["events"] > 0, 60, "no events counted")
        until(lambda: summed(scrape(url), "cdcflow_kafka_lag_offsets") == 0, 180, "lag stays")
        before = scrape(url)
        assert metric_totals(before) == history_totals(spark, "koutage")
        times = {
            dict(ls)["table"]: v
            for (n, ls), v in before.items()
            if n == "cdcflow_table_source_timestamp_seconds"
        }
        assert set(times) == set(w.tables) and all(times[t] <= newest[t] for t in times)
        fresh = summed(before, "cdcflow_table_freshness_seconds", table=sorted(times)[0])
        assert fresh == pytest.approx(time.time() - times[sorted(times)[0]], abs=30)
        assert readyz(url) == 200 and summed(before, "cdcflow_ready") == 1

        bootstrap = kafka.bootstrap
        assert kafka.stop() == "stopped"
        until(lambda: readyz(url) == 503, 60, "/readyz still ready without a broker")
        assert summed(scrape(url), "cdcflow_ready") == 0
        time.sleep(max(0.0, 30 - 6))
        assert kafka.start() == bootstrap  # the same port: the run's address still holds
        produce(kafka.bootstrap, sent.records[half:])
        # produced and not applied yet: the lag shows it, then drains
        until(lambda: (lag(url) or 0) > 0, 120, "no lag seen")
        until(lambda: readyz(url) == 200, 180, "/readyz not ready again")
        deadline = time.monotonic() + 180
        applied = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                compare_replicas(spark, w, "koutage").assert_equal()
                applied = True
                break
            except AssertionError:
                time.sleep(3)
        until(lambda: lag(url) == 0, 120, "the lag stays")
        after = scrape(url)
        assert metric_totals(after) == history_totals(spark, "koutage")
        assert metric_totals(after)["events"] > metric_totals(before)["events"]
        moved = {
            dict(ls)["table"]: v
            for (n, ls), v in after.items()
            if n == "cdcflow_table_source_timestamp_seconds"
        }
        # every event applied: each table's freshness counts from its newest commit
        assert moved == pytest.approx(newest, abs=1e-3)
        assert any(moved[t] > times[t] for t in times)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        guard.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert applied, first + out + err[-2000:]
    assert proc.returncode == 0, out + err[-2000:]  # it kept going, and stopped cleanly
    # Spark's own lines stay off stderr (no log4j line, no "Failed to cancel job group")
    own = ("pipeline koutage:", "metrics, health", "stopping after", "cdcflow: a Kafka broker")
    assert [ln for ln in err.splitlines() if not ln.startswith(own)] == [], err


def test_the_canonical_stream_out_to_a_topic(spark: Any, kafka: Any, tmp_path: Path) -> None:
    """A Kafka output: every row event applied is a record of the topic (at least once), in
    the unified format's Kafka form, a key's records on one partition, the event id in a
    header; a broker that cannot be reached dead-letters the batch's events as
    DELIVERY_FAILED and the run goes on."""
    from cdcflow.decode.decoder import Decoder
    from cdcflow.dialects import renderer
    from cdcflow.outputs.stream import OUTPUT_OPERATIONS
    from cdcflow.testing.kafka import consume

    w = generate(73, tables=2, transactions=30, features=renderer_features("savegress"))
    res = renderer("savegress")(w, tmp_path / "landing", seed=73)
    expected: dict[str, dict[str, Any]] = {}
    decoder = Decoder("savegress", res.options)
    for f in res.files:
        for out in decoder.decode_file(f.read_bytes(), str(f)):
            for e in out.events:
                if e["operation"] in OUTPUT_OPERATIONS:
                    expected[e["id"]] = e
    cfg = load_config(
        {
            "pipeline": "kout",
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": "kout",
            "sources": [
                {
                    "name": "s",
                    "path": str(tmp_path / "landing"),
                    "dialect": "savegress",
                    "keys": {t: list(k) for t, k in res.options.table_keys.items()},
                    "types": {t: dict(c) for t, c in res.options.column_types.items()},
                    "options": dict(res.options.extra),
                }
            ],
            "outputs": [
                {
                    "type": "kafka",
                    "name": "stream",
                    "kafka": {"bootstrap_servers": kafka.bootstrap, "topic": "kout.events"},
                }
            ],
        }
    )
    from cdcflow.testing.kafka import create_topics

    create_topics(kafka.bootstrap, ["kout.events"])
    reports = Pipeline(cfg, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 0
    records = consume(kafka.bootstrap, ["kout.events"])
    got: dict[str, dict[str, Any]] = {}
    partitions: dict[bytes, set[int]] = {}
    for r in records:
        event = orjson.loads(r["value"])
        headers = dict(r["headers"])
        assert headers["savegress-event-id"].decode() == event["id"]
        assert headers["savegress-table"].decode() == event["table"]
        assert r["key"].decode().startswith(f"{event['table']}:")
        partitions.setdefault(r["key"], set()).add(r["partition"])
        got[event["id"]] = event
    assert set(got) == set(expected)
    assert all(len(p) == 1 for p in partitions.values())
    for event_id, e in expected.items():
        assert got[event_id]["operation"] == e["operation"]
        assert got[event_id]["table"] == e["table"]

    # a broker nobody answers at: the batch's events are dead letters, the run goes on
    gone = f"127.0.0.1:{free_port()}"
    broken = cfg.model_copy(
        update={
            "pipeline": "kout_gone",
            "namespace": "kout_gone",
            "checkpoint": str(tmp_path / "checkpoint_gone"),
            "outputs": [
                cfg.outputs[0].model_copy(
                    update={
                        "kafka": cfg.outputs[0].kafka.model_copy(  # type: ignore[union-attr]
                            update={
                                "bootstrap_servers": gone,
                                "options": {
                                    "kafka.max.block.ms": "3000",
                                    "kafka.delivery.timeout.ms": "3000",
                                    "kafka.request.timeout.ms": "2000",
                                },
                            }
                        )
                    }
                )
            ],
        }
    )
    result = Pipeline(broken, spark).run(raise_on_failure=False)
    assert result.failure is None
    codes = spark.sql(
        "SELECT DISTINCT error_code FROM cdc.kout_gone__cdcflow.dead_letters"
    ).collect()
    assert [r["error_code"] for r in codes] == ["DELIVERY_FAILED"]
    # the replicas were written all the same
    compare_replicas(spark, w, "kout_gone").assert_equal()


def test_the_python_api_reads_a_topic_as_docs_python_api_shows(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """docs/python-api.md's Kafka snippet, run against the broker: read the topic with
    Spark's Kafka source, decode it, let cdcflow apply it."""
    import cdcflow.api as cdc

    w = generate(74, tables=1, transactions=25, features=renderer_features("debezium"))
    sent = kafka_delivery("debezium", w, seed=74, prefix="dbserver1")
    produce(kafka.bootstrap, sent.records)
    (table,) = w.tables
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", f"dbserver1.public.{table}")
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .load()
    )
    decoded = cdc.decode(raw, dialect="debezium")
    pipe = cdc.start(
        decoded,
        namespace="api_topic",
        checkpoint=str(tmp_path / "chk"),
        dialect="debezium",
        keys=list(w.tables[table].key),
    )
    result = pipe.wait()
    assert result.failure is None and result.dead_lettered == 0
    compare_replicas(spark, w, "api_topic").assert_equal()


def test_a_missing_topics_hint_lists_the_nearest_topics_first() -> None:
    """On a broker of many topics, the hint of a missing topic shows those nearest to the name
    asked, not the alphabet's first; it says when it leaves some out."""
    from cdcflow.sources.brokers import listed

    topics = {f"aaa.t{i:02}" for i in range(30)} | {"precheck.orders"}
    hint = listed(topics, "precheck.order")
    assert hint.startswith("topics there: precheck.orders, ") and hint.endswith(" …")
    assert hint.count(", ") == 19
    assert listed({"b", "a"}, "zzz") == "topics there: a, b"
    assert listed(set(), "x") == "the brokers hold no topic"


@pytest.mark.services
def test_missing_topics_and_refused_credentials_are_named_before_spark(
    kafka: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic or a pattern that names nothing on the broker, and SASL credentials the broker
    refuses, stop a Kafka source before Spark starts; right credentials pass, and no secret
    appears in the errors."""
    from cdcflow.testing.kafka import create_topics
    from cdcflow.testing.services.kafka import SASL_USER

    create_topics(kafka.bootstrap, {"precheck.orders"}, 1)

    def check(**source: Any) -> None:
        cfg = load_config({"sources": [{"name": "pg", "dialect": "debezium", "kafka": source}]})
        cfg.sources[0].source().check(timeout=5)

    check(bootstrap_servers=kafka.bootstrap, topics=["precheck.orders"])
    check(bootstrap_servers=kafka.bootstrap, pattern="precheck\\..*")
    with pytest.raises(CdcflowError) as e:
        check(bootstrap_servers=kafka.bootstrap, topics=["precheck.orders", "precheck.order"])
    assert str(e.value) == (
        f"[KAFKA_TOPIC_MISSING] source 'pg': no topic 'precheck.order' at bootstrap_servers "
        f"{kafka.bootstrap}. Did you mean 'precheck.orders'?"
    )
    assert e.value.hint is not None and "precheck.orders" in e.value.hint
    with pytest.raises(CdcflowError) as e:
        check(bootstrap_servers=kafka.bootstrap, pattern="nothing\\..*")
    assert str(e.value) == (
        f"[KAFKA_TOPIC_MISSING] source 'pg': pattern 'nothing\\\\..*' matches no topic at "
        f"bootstrap_servers {kafka.bootstrap}"
    )
    user, password = SASL_USER
    sasl = {
        "bootstrap_servers": kafka.sasl_bootstrap,
        "topics": ["precheck.orders"],
        "options": {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
        "secrets": {"kafka.sasl.jaas.config": {"env": "PRECHECK_JAAS"}},
    }
    module = "org.apache.kafka.common.security.plain.PlainLoginModule"
    monkeypatch.setenv(
        "PRECHECK_JAAS", f'{module} required username="{user}" password="{password}";'
    )
    check(**sasl)
    wrong = "not-the-" + password
    monkeypatch.setenv("PRECHECK_JAAS", f'{module} required username="{user}" password="{wrong}";')
    started = time.monotonic()
    with pytest.raises(CdcflowError) as e:
        check(**sasl)
    assert time.monotonic() - started < 6
    assert str(e.value).startswith(
        f"[KAFKA_UNREACHABLE] source 'pg': the Kafka brokers at bootstrap_servers "
        f"{kafka.sasl_bootstrap} could not be reached: the brokers refused the credentials ("
    ), str(e.value)
    assert wrong not in str(e.value) + str(e.value.hint) and password not in str(e.value)
