"""Replaying dead letters once their cause is fixed: keys configured after ``KEY_UNKNOWN``,
what still fails stays (with its new reason), a second replay does nothing, and a replay killed
half-way is completed by the next one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.cli.main import main
from cdcflow.config import load_config_file
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.savegress.render import render_to_landing
from cdcflow.errors import ConfigError
from cdcflow.observe.catalog import open_catalog
from cdcflow.observe.tables_iceberg import IcebergResults
from cdcflow.observe.tables_spark import SparkResults
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.replay import DeadLetterFilter, replay_dead_letters
from cdcflow.simulation.landing import append
from cdcflow.simulation.workload import Workload, generate
from cdcflow.testing.compare import compare_replicas
from tests.crashing import ROOT, command
from tests.processes import pipeline_config


def _write_config(
    root: Path, warehouse: str, name: str, keys: dict[str, list[str]], types: dict[str, Any]
) -> Path:
    options = DialectOptions(table_keys={t: tuple(k) for t, k in keys.items()}, column_types=types)
    return pipeline_config(root, warehouse, options, name, files_per_batch=None)


def _landing(root: Path, seed: int) -> tuple[Workload, dict[str, list[str]], dict[str, Any]]:
    w = generate(seed, tables=2, transactions=30)
    res = render_to_landing(w, root / "landing", seed=seed, files=3, duplicates=0.2)
    append(res.files[0], b"this line is not json\n")
    keys = {t: list(k) for t, k in res.options.table_keys.items()}
    return w, keys, {t: dict(c) for t, c in res.options.column_types.items()}


def _open(spark: Any, namespace: str) -> dict[str, int]:
    rows = spark.sql(
        f"SELECT error_code, count(*) AS n FROM cdc.{namespace}__cdcflow.dead_letters "
        "WHERE replayed_at IS NULL GROUP BY error_code"
    ).collect()
    return {r["error_code"]: r["n"] for r in rows}


@pytest.mark.spark
def test_keys_configured_later_then_replay_equals_oracle(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    w, keys, types = _landing(tmp_path, 21)
    ns = "replay_keys"
    first = Pipeline(
        load_config_file(_write_config(tmp_path, warehouse, ns, {}, types)), spark
    ).run()
    assert first.exit_status == 3
    unknown = _open(spark, ns)
    assert unknown["KEY_UNKNOWN"] > 0 and unknown["NOT_JSON"] == 1

    cfg = load_config_file(_write_config(tmp_path, warehouse, ns, keys, types))
    again = Pipeline(cfg, spark).run()
    assert again.events == 0  # nothing new: the dead letters are not read again by a run

    only_keys = DeadLetterFilter(codes=("KEY_UNKNOWN",))
    result = replay_dead_letters(cfg, spark, only_keys)
    assert result.claimed == {"s": unknown["KEY_UNKNOWN"]}
    assert result.exit_status == 0, result.summary()
    compare_replicas(spark, w, ns).assert_equal()
    assert _open(spark, ns) == {"NOT_JSON": 1}

    # a second replay finds nothing; the replicas do not move
    assert replay_dead_letters(cfg, spark, only_keys).summary() == "replay: nothing to replay"

    # what still fails is dead-lettered again with its reason, the old letter marked replayed
    rest = replay_dead_letters(cfg, spark, DeadLetterFilter())
    assert rest.claimed == {"s": 1} and rest.exit_status == 3
    assert _open(spark, ns) == {"NOT_JSON": 1}
    for results in (SparkResults(cfg, spark), IcebergResults(cfg, open_catalog(cfg.catalog))):
        found = results.dead_letters(DeadLetterFilter(), None, 10, 80)
        assert found is not None
        assert [r["error_code"] for r in found.dicts()] == ["NOT_JSON"]
        found = results.dead_letters(DeadLetterFilter(include_replayed=True), None, 100, 80)
        assert found is not None
        replayed = [r for r in found.dicts() if r["replayed_at"] is not None]
        assert len(replayed) == unknown["KEY_UNKNOWN"] + 1
    compare_replicas(spark, w, ns).assert_equal()
    # the history tells the replays from the run's batches, in a table as in JSON
    config = _write_config(tmp_path, warehouse, ns, keys, types)
    assert main(["history", str(config)]) == 0
    sources = [ln.split("  ")[0].strip() for ln in capsys.readouterr().out.splitlines()[1:]]
    assert sources.count("s (replay)") == 2 and sources.count("s") == 1, sources


@pytest.mark.line("3.5")  # tests/crashing.py
@pytest.mark.services
@pytest.mark.spark
def test_replay_killed_half_way_is_completed_by_the_next(spark: Any, tmp_path: Path) -> None:
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    w, keys, types = _landing(tmp_path, 22)
    ns = "replay_crash"
    Pipeline(load_config_file(_write_config(tmp_path, warehouse, ns, {}, types)), spark).run()
    config = _write_config(tmp_path, warehouse, ns, keys, types)
    proc = subprocess.run(
        command("merge@1", "dead-letters", str(config), "--replay"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 137, proc.stdout + proc.stderr
    cfg = load_config_file(config)
    result = replay_dead_letters(cfg, spark, DeadLetterFilter(codes=("KEY_UNKNOWN",)))
    assert result.resumed == ["s"], result.summary()
    assert result.exit_status == 3  # the claimed batch holds the bad line too
    compare_replicas(spark, w, ns).assert_equal()
    assert _open(spark, ns) == {"NOT_JSON": 1}
    history = spark.sql(
        f"SELECT batch_id, count(*) AS n FROM cdc.{ns}__cdcflow.batches "
        "WHERE pipeline LIKE '%/replay' GROUP BY batch_id"
    ).collect()
    assert [(r["batch_id"], r["n"]) for r in history] == [(1, 1)]


@pytest.mark.parametrize(
    ("chosen", "ids", "expected"),
    [
        (DeadLetterFilter(), None, "replayed_at IS NULL"),
        (DeadLetterFilter(include_replayed=True), None, "true"),
        (
            DeadLetterFilter(codes=("KEY_UNKNOWN",), tables=("o'rders",), sources=("pg",)),
            ["pg"],
            "replayed_at IS NULL AND error_code IN ('KEY_UNKNOWN') AND `table` IN ('o\\'rders') "
            "AND source IN ('pg')",
        ),
        (
            DeadLetterFilter(since="2026-11-20", include_replayed=True),
            None,
            "first_seen >= timestamp '2026-11-20 00:00:00+00:00'",
        ),
    ],
)
def test_dead_letter_filter_as_sql(
    chosen: DeadLetterFilter, ids: list[str] | None, expected: str
) -> None:
    assert chosen.where(ids) == expected


def test_dead_letter_filter_refuses_a_time_that_is_not_iso() -> None:
    with pytest.raises(ConfigError, match="ISO-8601"):
        DeadLetterFilter(since="last tuesday").where()


def _gadget(
    op: str, lsn: int, before: Any = None, after: Any = None, table: str = "gadgets"
) -> str:
    source = {"connector": "postgresql", "db": "shop", "schema": "public", "table": table}
    doc = {
        "before": before,
        "after": after,
        "source": {**source, "lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn},
        "op": op,
        "ts_ms": 1_700_000_000_000 + lsn,
    }
    return json.dumps(doc)


@pytest.mark.spark
def test_a_batch_whose_tables_all_lack_keys_is_dead_lettered_then_replayed_once_keyed(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Debezium JSON without schemas or Kafka keys: no table of the batch has known keys
    (one event's price is text where the others' are numbers); ``gadgets`` has a key the
    configuration names later, ``readings`` none at all (PostgreSQL ``REPLICA IDENTITY FULL``:
    whole before images; two rows alike, one event delivered twice): with ``keys: none`` its
    replayed events make it the multiset of its rows."""
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = [
        _gadget("r", 100, after={"id": 1, "name": "bolt", "price": 3}),
        _gadget("r", 101, after={"id": 2, "name": "nut", "price": 1}),
        _gadget("c", 200, after={"id": 3, "name": "gear", "price": 7}),
        _gadget("u", 300, after={"id": 3, "name": "gear", "price": "8.00"}),
        _gadget("d", 400, before={"id": 1, "name": "bolt", "price": 3}),
    ]
    one, two = {"sensor": "s1", "value": 1}, {"sensor": "s2", "value": 5}
    readings = [
        _gadget("r", 100, after=one, table="readings"),
        _gadget("r", 101, after=one, table="readings"),
        _gadget("c", 200, after=two, table="readings"),
        _gadget("u", 300, before=two, after={"sensor": "s2", "value": 6}, table="readings"),
        _gadget("d", 400, before=one, table="readings"),
    ]
    lines += [*readings, readings[3]]
    (landing / "gadgets.jsonl").write_text("\n".join(lines) + "\n")
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = pipeline_config(tmp_path, warehouse, DialectOptions(), "gadgets", "debezium", None)
    assert main(["run", str(config)]) == 3
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        "done: 1 batch(es), 11 events, 11 dead-lettered (exit status 3: see cdcflow dead-letters)"
    )
    assert _open(spark, "gadgets") == {"KEY_UNKNOWN": 10, "TYPE_CONFLICT": 1}
    doc = yaml.safe_load(config.read_text())
    doc["sources"][0]["keys"] = {"gadgets": ["id"]}
    doc["tables"] = {"readings": {"keys": "none"}}
    config.write_text(yaml.safe_dump(doc))
    assert main(["dead-letters", str(config), "--replay", "--code", "KEY_UNKNOWN"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "replay: 10 dead letter(s) (s: 10); 10 event(s), 0 dead-lettered again"
    )
    got = spark.sql("SELECT id, name, price FROM cdc.gadgets.gadgets ORDER BY id").collect()
    assert [tuple(r) for r in got] == [(2, "nut", 1), (3, "gear", 7)]
    got = spark.sql("SELECT sensor, value FROM cdc.gadgets.readings ORDER BY 1, 2").collect()
    assert [tuple(r) for r in got] == [("s1", 1), ("s2", 6)]
    assert _open(spark, "gadgets") == {"TYPE_CONFLICT": 1}
    # the replay's events, counted: the update delivered twice is a duplicate
    (row,) = spark.sql(
        "SELECT events, duplicates, applied FROM cdc.gadgets__cdcflow.batches "
        "WHERE pipeline LIKE '%/replay'"
    ).collect()
    assert tuple(row) == (10, 1, 9)


def _typed_event(seq: int, key: int, **columns: tuple[str, str]) -> tuple[Any, ...]:
    """A canonical event of table ``ledger``: columns as (wire string, canonical type)."""
    after = {"id": str(key), **{c: v for c, (v, _) in columns.items()}}
    types = {"id": "bigint", **{c: t for c, (_, t) in columns.items()}}
    return ("ledger", "INSERT", f"p{seq:03d}!", after, types)


@pytest.mark.spark
def test_a_new_column_takes_a_type_holding_every_value_and_a_widened_one_takes_replays(
    spark: Any, tmp_path: Path
) -> None:
    import cdcflow.api as cdc

    schema = "table string, operation string, sequence string, after map<string,string>, "
    schema += "types map<string,string>"
    apply = cdc.foreach_batch(
        spark=spark, checkpoint=str(tmp_path / "chk"), namespace="widening", keys=["id"]
    )
    first = [
        _typed_event(1, 1, balance=("10.50", "decimal(10,2)"), fee=("0.10", "decimal(5,2)")),
        _typed_event(2, 2, balance=("20.25", "decimal(10,2)"), fee=("0.20", "decimal(5,2)")),
        _typed_event(3, 3, balance=("30.00", "decimal(10,2)"), fee=("0.30", "decimal(5,2)")),
        _typed_event(4, 4, balance=("9000000000000000000", "bigint"), fee=("0.40", "decimal(5,2)")),
    ]
    apply(spark.createDataFrame(first, schema), 0)
    columns = dict(spark.table("cdc.widening.ledger").dtypes)
    assert (columns["balance"], columns["fee"]) == ("decimal(21,2)", "decimal(5,2)")
    assert apply.reports[-1].dead_lettered == 0
    apply(spark.createDataFrame([_typed_event(5, 5, fee=("7", "bigint"))], schema), 1)
    apply.close()
    assert _open(spark, "widening") == {"TYPE_CONFLICT": 1}
    (reason,) = spark.sql("SELECT error_message FROM cdc.widening__cdcflow.dead_letters").collect()
    assert reason[0] == (
        "column 'fee' is decimal(5,2); a value of type bigint cannot be stored in it without "
        "loss: widen the column (ALTER TABLE … ALTER COLUMN … TYPE; Iceberg allows "
        "int→bigint, float→double, decimal precision up) or declare the column's type in the "
        "source's types, then replay the dead letters"
    )
    spark.sql("ALTER TABLE cdc.widening.ledger ALTER COLUMN fee TYPE decimal(21,2)")
    cfg = cdc.pipeline_config(checkpoint=str(tmp_path / "chk"), namespace="widening", keys=["id"])
    replayed = replay_dead_letters(cfg, spark, DeadLetterFilter(codes=("TYPE_CONFLICT",)))
    assert (
        replayed.summary()
        == "replay: 1 dead letter(s) (main: 1); 1 event(s), 0 dead-lettered again"
    )
    rows = spark.sql("SELECT id, balance, fee FROM cdc.widening.ledger ORDER BY id").collect()
    assert [(r["id"], str(r["balance"]), str(r["fee"])) for r in rows] == [
        (1, "10.50", "0.10"),
        (2, "20.25", "0.20"),
        (3, "30.00", "0.30"),
        (4, "9000000000000000000.00", "0.40"),
        (5, "None", "7.00"),
    ]


@pytest.mark.spark
def test_a_dead_letter_written_before_kinds_were_recorded_is_replayed_by_what_it_holds(
    spark: Any, tmp_path: Path
) -> None:
    """Decoders once gave ``KEY_MISSING`` to messages (``raw`` = the message) as the engine
    does to events (``raw`` = the event's JSON): a letter of either kind written before the
    kind was recorded is replayed as what it holds — the message decoded again, the event read
    back."""
    landing = tmp_path / "landing"
    landing.mkdir()
    delete = _gadget("d", 400)  # no before image, no Kafka key: the row cannot be named
    lines = [_gadget("c", 200, after={"id": 3, "name": "gear", "price": 7}), delete]
    (landing / "gadgets.jsonl").write_text("\n".join(lines) + "\n")
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = pipeline_config(tmp_path, warehouse, DialectOptions(), "legacy", "debezium", None)
    assert main(["run", str(config)]) == 3
    table = "cdc.legacy__cdcflow.dead_letters"
    assert _open(spark, "legacy") == {"DELETE_WITHOUT_KEY": 1, "KEY_UNKNOWN": 1}
    # as written before kinds were recorded, with the code decoders gave then
    spark.sql(f"UPDATE {table} SET kind = NULL")
    spark.sql(f"UPDATE {table} SET error_code = 'KEY_MISSING' WHERE error_code <> 'KEY_UNKNOWN'")
    spark.sql(f"UPDATE {table} SET error_code = 'KEY_MISSING' WHERE error_code = 'KEY_UNKNOWN'")

    doc = yaml.safe_load(config.read_text())
    doc["sources"][0]["keys"] = {"gadgets": ["id"]}
    config.write_text(yaml.safe_dump(doc))
    result = replay_dead_letters(load_config_file(config), spark, DeadLetterFilter())
    assert result.claimed == {"s": 2}
    # the event applies; the message, decoded again, is still a delete naming no row
    got = spark.sql("SELECT id, name, price FROM cdc.legacy.gadgets").collect()
    assert [tuple(r) for r in got] == [(3, "gear", 7)]
    assert _open(spark, "legacy") == {"DELETE_WITHOUT_KEY": 1}
    again = spark.sql(
        f"SELECT kind, CAST(raw AS string) AS raw FROM {table} WHERE replayed_at IS NULL"
    ).collect()
    assert [(r["kind"], r["raw"]) for r in again] == [("message", delete)]
    kinds = spark.sql(f"SELECT kind, count(*) AS n FROM {table} GROUP BY kind").collect()
    assert {r["kind"]: r["n"] for r in kinds} == {"event": 1, "message": 2}
