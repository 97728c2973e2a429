"""The Python API on Spark: Kafka-shaped streams of every dialect decoded, canonical events
applied from one's own ``foreachBatch`` (a crash, Spark's replay of the batch, a batch id
applied twice), a pipeline started from a DataFrame, and its results read back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cdcflow.api as cdc
from cdcflow.decode.spark import RawShapeError, decoded_frame, raw_shape
from cdcflow.dialects import dialect_names
from cdcflow.engine.rules import applied, marked_sql
from cdcflow.errors import ConfigError
from cdcflow.event import SPARK_COLUMNS
from cdcflow.spark.columns import column_sql
from cdcflow.testing.compare import compare_replicas
from cdcflow.testing.services.base import free_port
from cdcflow.types.canonical import canonical_type_sql, is_valid_type
from tests import api_job
from tests.kafka_shaped import kafka_batch, kafka_rendering, reference, same
from tests.processes import pipeline_config
from tests.scenario import ev
from tests.scenario_world import DATABRICKS_FEED

pytestmark = pytest.mark.spark
_ROOT = Path(__file__).resolve().parents[1]


def _parquet(rows: list[dict[str, Any]], folder: Path, files: int = 1) -> Path:
    """Kafka rows written as ``files`` parquet files (a stand-in for a topic)."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(rows) // files)
    for i in range(files):
        part = kafka_batch(rows[i * size : (i + 1) * size])
        pq.write_table(pa.Table.from_batches([part]), folder / f"{i}.parquet")
    return folder


def _warehouse(spark: Any) -> str:
    return str(spark.conf.get("spark.sql.catalog.cdc.warehouse"))


def _maps(row: Any) -> dict[str, Any]:
    d = row.asDict()
    for m in ("key", "before", "after", "metadata"):
        d[m] = dict(d[m]) if d[m] is not None else None
    return d


def test_kafka_shaped_streams_of_every_dialect_decode(spark: Any, tmp_path: Path) -> None:
    """A streaming DataFrame in the schema of Spark's Kafka source per dialect, decoded in
    one query: the events the files give, each with its record's origin and offset."""
    renderings = {name: kafka_rendering(name, tmp_path / name) for name in dialect_names()}
    frames = []
    for name, r in renderings.items():
        stream = spark.readStream.schema(cdc.KAFKA_SCHEMA).parquet(
            str(_parquet(r.rows, tmp_path / "topics" / name))
        )
        assert stream.isStreaming
        o = r.options
        decoded = cdc.decode(stream, name, types=o.column_types, keys=o.table_keys, options=o.extra)
        frames.append(decoded.frame)
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    query = (
        union.writeStream.format("memory")
        .queryName("api_decoded")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = [_maps(r) for r in spark.table("api_decoded").collect()]
    assert not [r for r in rows if r["error_code"]]
    for name, r in renderings.items():
        expected, segments = reference(r)
        mine = [x for x in rows if x["dialect"] == name]
        events = [x for x in mine if x["operation"] not in ("SEGMENT", "SKIPPED")]
        assert sorted(map(same, events), key=repr) == expected, name
        assert sum(x["operation"] == "SEGMENT" for x in mine) == segments, name
        assert all(
            e["origin"]
            == f"kafka://{e['metadata']['kafka_topic']}/{e['metadata']['kafka_partition']}"
            and str(e["offset"]) == e["metadata"]["kafka_offset"]
            for e in events
        ), name


def test_raw_shapes_and_canonical_events(any_session: Any) -> None:
    """One string column is one message per row; a frame of canonical events from elsewhere
    gains the decoded frame's columns; anything else is refused naming its columns."""
    spark = any_session
    line = orjson.dumps(ev("INSERT", "users", 1, after={"id": 1}))
    messages = spark.createDataFrame([(line.decode(),)], "body string")
    assert raw_shape(messages) == "messages"
    events = cdc.decode(messages, "savegress", keys={"users": ["id"]}).events
    got = [_maps(r) for r in events.collect()]
    assert [(e["operation"], e["table"], e["key"], e["origin"]) for e in got] == [
        ("INSERT", "users", {"id": "1"}, None)
    ]
    canonical = events.select("table", "operation", "sequence", "key", "after")
    frame = decoded_frame(canonical)
    assert frame.columns == [n for n, _ in SPARK_COLUMNS]
    filled = frame.collect()[0]
    assert filled["id"].startswith("cdc-") and filled["partial"] is False
    with pytest.raises(RawShapeError) as e:
        raw_shape(spark.createDataFrame([(1, 2)], "a int, b int"))
    assert str(e.value) == (
        "[RAW_SHAPE] not a DataFrame of raw messages (columns: a int, b int); a DataFrame of "
        "change rows (one row per change with the table's columns) is applied with "
        "cdcflow.api.apply_changes"
    )


def test_canonical_events_with_a_type_that_is_not_canonical_are_dead_letters(
    spark: Any, tmp_path: Path
) -> None:
    """A canonical event given through the API whose ``types`` name a type cdcflow does not
    have (``varchar(10)``) is a ``BAD_TYPE`` dead letter; the batch's other events are applied
    and the name never reaches the table's DDL."""
    rows = [
        ("users", "INSERT", "1", {"id": "1"}, {"id": "1", "name": "a"}, {"id": "bigint"}),
        ("users", "INSERT", "2", {"id": "2"}, {"id": "2", "x": "b"}, {"x": "varchar(10)"}),
        ("users", "INSERT", "3", {"id": "3"}, {"id": "3", "name": "c"}, {"id": "bigint"}),
    ]
    events = spark.createDataFrame(
        rows,
        "table string, operation string, sequence string, key map<string,string>, "
        "after map<string,string>, types map<string,string>",
    )
    settings: dict[str, Any] = {
        "checkpoint": str(tmp_path / "chk"),
        "namespace": "api_types",
        "keys": ["id"],
    }
    with cdc.foreach_batch(spark=spark, **settings) as apply:
        apply(events, 0)
    pipe = cdc.pipeline(spark=spark, **settings)
    (dead,) = pipe.dead_letters().collect()
    assert dead["error_code"] == "BAD_TYPE"
    assert dead["error_message"].startswith(
        'types of table users not canonical ({"x":"varchar(10)"}); canonical types are '
    )
    assert orjson.loads(dead["raw"])["after"] == {"id": "2", "x": "b"}
    table = pipe.table("users")
    assert sorted(r["id"] for r in table.collect()) == [1, 3]
    assert "x" not in table.columns
    # the Spark check says what the decoder's says, name by name
    names = ["string", "decimal(10, 2)", "array<array<decimal(5,5)>>", "varchar(10)"]
    names += ["decimal(39,2)", "decimal(5,6)", "decimal(010,2)", "array<int", "int>", "smallint"]
    said = spark.createDataFrame([(n,) for n in names], "t string").selectExpr(
        "t", f"{canonical_type_sql('t')} AS ok"
    )
    assert {r["t"]: r["ok"] for r in said.collect()} == {n: is_valid_type(n) for n in names}


def test_apply_as_deletes_marks_row_events_of_the_tables_named(spark: Any) -> None:
    """Per table entry its own condition (an entry without one marks nothing), ``default``
    for the others; deletes, markers and rejections are left alone."""
    conditions = {"default": "after['op'] = 'D'", "orders": None, "items": "after['gone'] = '1'"}
    rows = spark.createDataFrame(
        [
            ("users", "UPDATE", {"id": "1", "op": "D"}, None, None),
            ("users", "UPDATE", {"id": "2", "op": "U"}, None, None),
            ("orders", "UPDATE", {"id": "3", "op": "D"}, None, None),
            ("items", "INSERT", {"id": "4", "gone": "1"}, None, None),
            ("users", "UPDATE", {"id": "5", "op": "D"}, None, "BAD_JSON"),
            ("users", "COMMIT", {"op": "D"}, None, None),
        ],
        "table string, operation string, after map<string,string>, "
        "before map<string,string>, error_code string",
    ).selectExpr("*", "false AS partial")
    marked = marked_sql(conditions, "`table`")
    assert marked is not None and marked_sql({"default": None}, "`table`") is None
    out = rows.selectExpr(*applied(rows.columns, deletes=marked)).collect()
    assert [(r["operation"], r["after"], (r["before"] or {}).get("id")) for r in out] == [
        ("DELETE", None, "1"),
        ("UPDATE", {"id": "2", "op": "U"}, None),
        ("UPDATE", {"id": "3", "op": "D"}, None),
        ("DELETE", None, "4"),
        ("UPDATE", {"id": "5", "op": "D"}, None),
        ("COMMIT", {"op": "D"}, None),
    ]


def test_a_condition_spark_cannot_read_or_a_source_without_input_stops_before_any_batch(
    spark: Any, tmp_path: Path
) -> None:
    settings: dict[str, Any] = {"checkpoint": str(tmp_path / "chk"), "namespace": "api_bad"}
    bad = cdc.pipeline(spark=spark, apply_as_deletes="after['op' =", **settings)
    with pytest.raises(ConfigError) as e:
        bad.foreach_batch()
    assert str(e.value).startswith(
        "[CONFIG_INVALID] tables.default.apply_as_deletes: \"after['op' =\" is not a condition "
        "over canonical events ("
    )
    with pytest.raises(ConfigError) as e:
        cdc.pipeline(spark=spark, **settings).run()
    assert str(e.value) == (
        "[SOURCE_PATH_MISSING] source 'main' has no path or kafka topics, "
        "and no DataFrame was given for it"
    )


def test_own_foreach_batch_applies_in_kafka_order_and_a_replayed_batch_changes_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """One's own ``foreachBatch`` function over a stream of Kafka records: two different
    events at one sequence resolve to the one with the higher offset, whatever the rows'
    order; ``apply_as_deletes`` deletes a row marked in its image. Spark replays the last
    batch of a query whose commit log lacks it (as after a crash between the batch's commits
    and Spark's own): the same function, restarted, commits nothing — no new snapshot, dead
    letter or history row. Batches from anything but that query (here: given outside a
    streaming query) are refused: their ids would collide."""
    docs = [
        (0, 9, ev("UPDATE", "users", 20, after={"id": 1, "name": "b", "op": "U"}, id="e-b")),
        (0, 1, ev("INSERT", "users", 10, after={"id": 1, "name": "-", "op": "I"})),
        (0, 5, ev("UPDATE", "users", 20, after={"id": 1, "name": "a", "op": "U"}, id="e-a")),
        (1, 0, ev("INSERT", "users", 30, after={"id": 2, "name": "x", "op": "I"})),
        (1, 1, ev("UPDATE", "users", 40, after={"id": 2, "name": "x", "op": "D"})),
        (1, 2, ev("INSERT", "users", 50, after={"id": 3, "name": "y", "op": "I"})),
    ]
    rows = [
        {"key": None, "value": orjson.dumps(d), "topic": "pg", "partition": p, "offset": o}
        for p, o, d in docs
    ]
    rows.append({"key": None, "value": b"{not json", "topic": "pg", "partition": 1, "offset": 3})
    filled = [{**r, "timestamp": None, "timestampType": 0, "headers": None} for r in rows]
    source = _parquet(filled, tmp_path / "topic")
    stream = spark.readStream.schema(cdc.KAFKA_SCHEMA).parquet(str(source))
    settings: dict[str, Any] = {
        "pipeline": "api_fb",
        "checkpoint": str(tmp_path / "chk"),
        "namespace": "api_fb",
        "catalog": {"name": "cdc", "warehouse": _warehouse(spark)},
        "dialect": "savegress",
        "keys": ["id"],
        "apply_as_deletes": "after['op'] = 'D'",
    }
    pipe = cdc.pipeline(spark=spark, **settings)
    snapshots = "SELECT max(snapshot_id) FROM cdc.api_fb.users.snapshots"
    with cdc.foreach_batch(spark=spark, **settings) as apply:
        for attempt in range(2):
            query = (
                stream.writeStream.foreachBatch(apply)
                .option("checkpointLocation", apply.checkpoint_location)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if attempt == 0:
                (report,) = apply.reports
                assert report.conflicts == 1 and report.dead_lettered == 1
                snapshot = spark.sql(snapshots).collect()
                commits = Path(apply.checkpoint_location) / "commits"
                (commits / "0").unlink()
                (commits / ".0.crc").unlink()
        assert apply.reports == [report]
        with pytest.raises(ConfigError) as e:
            apply(spark.read.schema(cdc.KAFKA_SCHEMA).parquet(str(source)), 7)
        assert str(e.value).startswith(
            "[QUERY_CHANGED] source 'main' is applied by streaming query "
        ) and str(e.value).endswith(
            "; batches given outside a streaming query would number its batches anew, "
            "colliding with the batches already committed"
        )
    assert spark.sql(snapshots).collect() == snapshot
    assert sorted((r["id"], r["name"]) for r in pipe.table("users").collect()) == [
        (1, "b"),
        (3, "y"),
    ]
    assert pipe.dead_letters().count() == 1 and pipe.history().count() == 1


def test_a_batch_id_applied_again_in_the_same_process_commits_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """As after a task retry: the function called again with a batch id it applied already
    (the latest, or an earlier one) changes nothing — not only on the first call of a
    process."""
    lines = [
        orjson.dumps(ev("INSERT", "users", 10, after={"id": 1, "name": "a"})).decode(),
        orjson.dumps(ev("DELETE", "users", 20, before={"id": 1, "name": "a"})).decode(),
        "{not json",
    ]
    batches = [spark.createDataFrame([(line,)], "body string") for line in lines]
    settings: dict[str, Any] = {
        "checkpoint": str(tmp_path / "chk"),
        "namespace": "api_again",
        "dialect": "savegress",
        "keys": ["id"],
    }
    tagged = "SELECT count(*) FROM cdc.api_again.{}.snapshots WHERE summary['cdcflow.batch'] = '{}'"
    with cdc.foreach_batch(spark=spark, **settings) as apply:
        apply(batches[0], 0)
        apply(batches[0], 0)
        apply(batches[1], 1)
        apply(batches[2], 2)
        apply(batches[1], 1)
        apply(batches[2], 2)
        assert [r.batch_id for r in apply.reports] == [0, 1, 2]
    assert spark.sql(tagged.format("users", 0)).collect()[0][0] == 1
    assert spark.sql(tagged.format("users", 1)).collect()[0][0] == 1
    pipe = cdc.pipeline(spark=spark, **settings)
    assert sorted(r["batch_id"] for r in pipe.history().collect()) == [0, 1, 2]
    assert pipe.dead_letters().count() == 1 and pipe.table("users").count() == 0


@pytest.mark.line("3.5")  # tests/crashing.py
@pytest.mark.services
def test_own_foreach_batch_killed_after_a_commit_then_replayed_equals_the_oracle(
    spark: Any, tmp_path: Path
) -> None:
    """A user's job (``tests/api_job.py``) dies right after its batch committed the merge and
    the dead letters, before the history; run again, Spark replays the batch with the same id:
    the replicas equal the oracle, the batch is in the history once, the bad record
    dead-lettered once."""
    r = kafka_rendering("savegress", tmp_path / "render", seed=5, transactions=12)
    bad = {**r.rows[0], "value": b"{not json", "offset": 10_000}
    noise = {**r.rows[0], "topic": "ignored", "value": b"{}", "offset": 10_001}
    source = _parquet([*r.rows, bad, noise], tmp_path / "topic")
    warehouse = _warehouse(spark)
    config = pipeline_config(
        tmp_path, warehouse, r.options, namespace="api_crash", files_per_batch=None
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.api_job", str(config), str(source), warehouse],
        cwd=_ROOT,
        env={**os.environ, "CDCFLOW_TEST_CRASH_AT": "dead_letters@0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 137, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout == ""  # it died inside batch 0

    reports = api_job.run(spark, str(config), str(source))
    assert [rep.batch_id for rep in reports] == [0]
    compare_replicas(spark, r.workload, "api_crash").assert_equal()
    pipe = cdc.pipeline(config, spark=spark)
    history = pipe.history().groupBy("batch_id").count().collect()
    assert sorted((h["batch_id"], h["count"]) for h in history) == [(0, 1)]
    dead = pipe.dead_letters().collect()
    assert [(d["origin"], d["offset"], d["error_code"]) for d in dead] == [
        (f"kafka://{bad['topic']}/{bad['partition']}", 10_000, "NOT_JSON")
    ]


def test_start_from_a_kafka_stream_and_read_the_results(any_session: Any, tmp_path: Path) -> None:
    """``start`` over a streaming DataFrame of Debezium records (keys in the Kafka key), on a
    classic and on a Spark Connect session: the replicas equal the oracle, the metrics count
    the batch, and the tables, dead letters and history read back."""
    spark = any_session
    r = kafka_rendering("debezium", tmp_path / "render", seed=3, transactions=25)
    bad = {**r.rows[0], "value": b"\xff\xfe", "offset": 5_000}
    stream = spark.readStream.schema(cdc.KAFKA_SCHEMA).parquet(
        str(_parquet([*r.rows, bad], tmp_path / "topic"))
    )
    o = r.options
    port = free_port()
    pipe = cdc.start(
        stream,
        pipeline="api_start",
        checkpoint=str(tmp_path / "chk"),
        namespace="api_start",
        catalog={"name": "cdc", "warehouse": _warehouse(spark)},
        dialect="debezium",
        types=o.column_types,
        keys=o.table_keys,
        options=o.extra,
        metrics={"port": port},
    )
    assert pipe.query.name == "cdcflow_api_start_main"
    pipe.query.awaitTermination()
    # the pipeline serves its metrics until it is closed (over Spark Connect, a batch's
    # figures reach them once read back from the batch history: within seconds)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(url, timeout=10) as answer:
            scraped = answer.read().decode()
        if "cdcflow_dead_letters_total{" in scraped or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    result = pipe.wait()
    assert result.exit_status == 3 and result.dead_lettered == 1
    read = f'cdcflow_events_read_total{{pipeline="api_start",source="main"}} {result.events}.0'
    assert read in scraped.splitlines()
    assert 'cdcflow_dead_letters_total{code="NOT_JSON",pipeline="api_start",source="main"} 1.0' in (
        scraped
    )
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
    compare_replicas(spark, r.workload, "api_start").assert_equal()
    assert set(pipe.tables()) == set(r.workload.tables)
    dead = pipe.dead_letters().collect()
    assert [(d["origin"], d["offset"], d["source"]) for d in dead] == [
        (f"kafka://{bad['topic']}/{bad['partition']}", 5_000, "main")
    ]
    (batch,) = pipe.history().collect()
    assert batch["dead_lettered"] == 1 and batch["events"] == result.events


def test_apply_changes_settings_databricks_users_reach_for(spark: Any, tmp_path: Path) -> None:
    """``ignore_null_updates``, ``apply_as_truncates`` and ``apply_as_deletes`` as Columns,
    ``column_list``, and ``sequence_by`` over two columns (a struct): compared in turn."""
    from pyspark.sql import functions as F

    def user(op: str, key: int, epoch: int, n: int, **after: Any) -> str:
        row = {"id": key, "epoch": epoch, "n": n, "op": op, "secret": "s", **after}
        return orjson.dumps(ev("UPSERT", "users", epoch * 100 + n, after=row)).decode()

    settings: dict[str, Any] = {
        "checkpoint": str(tmp_path / "chk"),
        "namespace": "api_dbx",
        "dialect": "savegress",
        "keys": ["id"],
        "sequence_by": F.struct("epoch", "n"),
        "ignore_null_updates": True,
        "apply_as_deletes": F.col("after")["op"] == "D",
        "apply_as_truncates": F.col("after")["op"] == "T",
        "column_list": ["name", "city", "epoch", "n"],
    }
    cfg = cdc.pipeline_config(**settings)
    assert cfg.table("users").model_dump(exclude_defaults=True) == {
        "keys": ["id"],
        "columns": ["name", "city", "epoch", "n"],
        "sequence_by": ["epoch", "n"],
        "apply_as_deletes": "(after['op'] = 'D')",
        "apply_as_truncates": "(after['op'] = 'T')",
        "ignore_null_updates": True,
    }
    first = [
        user("I", 1, 1, 1, name="a", city="x"),
        user("U", 1, 1, 2, name="b", city=None),  # a NULL leaves the city as it was
        user("U", 1, 0, 9, name="old", city="old"),  # older by epoch, whatever n says
        user("I", 2, 1, 1, name="z", city="y"),
        user("D", 2, 1, 2),
    ]
    later = [
        user("I", 3, 2, 1, name="c", city="w"),
        user("T", 9, 2, 5),  # every row older than (2, 5) goes
        user("I", 4, 2, 6, name="d", city=None),
    ]
    with cdc.foreach_batch(spark=spark, **settings) as apply:
        apply(spark.createDataFrame([(m,) for m in first], "body string"), 0)
        got = spark.sql("SELECT * FROM cdc.api_dbx.users ORDER BY id").collect()
        assert [r.asDict() for r in got] == [
            {"id": 1, "name": "b", "city": "x", "epoch": 1, "n": 2, "_cdc": got[0]["_cdc"]}
        ]
        apply(spark.createDataFrame([(m,) for m in later], "body string"), 1)
    rows = spark.sql("SELECT id, name, city FROM cdc.api_dbx.users ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(4, "d", None)]
    with pytest.raises(ConfigError) as e:
        cdc.pipeline_config(sequence_by=F.col("epoch") + 1)
    # Spark 3.5 prints the expression "(epoch + 1)", Spark 4 "+(epoch, 1)"
    shown = column_sql(F.col("epoch") + 1)
    assert shown in ("(epoch + 1)", "+(epoch, 1)")
    assert str(e.value) == (
        f"[CONFIG_INVALID] sequence_by {shown} is neither a column nor a struct of columns"
    )


def test_the_catalog_is_given_once(spark: Any, tmp_path: Path) -> None:
    """A configuration's catalog is the session's: added to a session without it, refused
    when the session's differs; without one in the configuration, the session's is used."""
    side = tmp_path / "side"
    pipe = cdc.pipeline(
        spark=spark,
        checkpoint=str(tmp_path / "chk"),
        namespace="once",
        dialect="savegress",
        keys=["id"],
        catalog={"name": "side", "warehouse": str(side)},
    )
    assert spark.conf.get("spark.sql.catalog.side.warehouse") == str(side)
    line = orjson.dumps(ev("INSERT", "users", 1, after={"id": 1})).decode()
    apply = pipe.foreach_batch()
    apply(spark.createDataFrame([(line,)], "body string"), 0)
    pipe.close()
    assert [r["id"] for r in spark.table("side.once.users").collect()] == [1]
    assert (side / "once" / "users").is_dir()
    with pytest.raises(ConfigError) as e:
        cdc.pipeline(spark=spark, catalog={"name": "side", "warehouse": str(tmp_path / "other")})
    assert e.value.code == "CATALOG_MISMATCH"
    uri, other = f"jdbc:sqlite:{side}/catalog.db", f"jdbc:sqlite:{tmp_path}/other/catalog.db"
    assert str(e.value) == (
        "[CATALOG_MISMATCH] the session's catalog 'side' is not the configuration's: "
        f"spark.sql.catalog.side.uri={uri!r} (not {other!r}), "
        f"spark.sql.catalog.side.warehouse={str(side)!r} (not {str(tmp_path / 'other')!r})"
    )
    assert cdc.pipeline(spark=spark, namespace="once").tables() == []  # the session's 'cdc'


#: Databricks' ``apply_changes`` example: change rows of one table.
CHANGES = DATABRICKS_FEED
CHANGES_SCHEMA = "userId bigint, name string, city string, operation string, sequenceNum bigint"


def test_apply_changes_over_a_dataframe_of_change_rows(spark: Any, tmp_path: Path) -> None:
    """Databricks' example, as its users write it: a batch DataFrame of change rows applied as
    one batch (types from its schema, deletes by a condition over its columns, the ordering
    and operation columns left out), a truncate in the next; the same rows as a stream kept
    as a history (scd2) through foreachBatch."""
    from pyspark.sql import functions as F

    settings: dict[str, Any] = {"namespace": "api_rows", "checkpoint": str(tmp_path / "chk")}
    result = cdc.apply_changes(
        target="users",
        source=spark.createDataFrame(CHANGES, CHANGES_SCHEMA),
        keys=["userId"],
        sequence_by=F.col("sequenceNum"),
        apply_as_deletes=F.expr("operation = 'DELETE'"),
        except_column_list=["operation", "sequenceNum"],
        stored_as_scd_type=1,
        session=spark,
        **settings,
    )
    assert repr(result) == "RunResult(batches=1, events=8, dead_lettered=0, exit_status=0)"
    table = spark.table("cdc.api_rows.users")
    assert [f.simpleString() for f in table.schema.fields[:3]] == [
        "userId:bigint",
        "name:string",
        "city:string",
    ]
    assert table.columns == ["userId", "name", "city", "_cdc"]
    rows = table.orderBy("userId").select("userId", "name", "city").collect()
    assert [tuple(r) for r in rows] == [
        (124, "Raul", "Oaxaca"),
        (125, "Mercedes", "Guadalajara"),
        (126, "Lily", "Cancun"),
    ]
    later = [(None, None, None, "TRUNCATE", 7), (127, "Ana", None, "INSERT", 8)]
    result = cdc.apply_changes(
        target="users",
        source=spark.createDataFrame(later, CHANGES_SCHEMA),
        keys=["userId"],
        sequence_by="sequenceNum",
        apply_as_deletes="operation = 'DELETE'",
        apply_as_truncates="operation = 'TRUNCATE'",
        except_column_list=["operation", "sequenceNum"],
        **settings,
    )
    assert result.exit_status == 0
    rows = spark.sql("SELECT userId, name FROM cdc.api_rows.users").collect()
    assert [tuple(r) for r in rows] == [(127, "Ana")]
    assert [r["batch_id"] for r in spark.table("cdc.api_rows__cdcflow.batches").collect()] in (
        [0, 1],
        [1, 0],
    )

    folder = tmp_path / "feed"
    spark.createDataFrame(CHANGES, CHANGES_SCHEMA).write.parquet(str(folder))
    stream = spark.readStream.schema(CHANGES_SCHEMA).parquet(str(folder))
    pipe = cdc.apply_changes(
        target="users",
        source=stream,
        keys=["userId"],
        sequence_by="sequenceNum",
        apply_as_deletes="operation = 'DELETE'",
        except_column_list=["operation"],
        stored_as_scd_type=2,
        namespace="api_rows_history",
        checkpoint=str(tmp_path / "chk_history"),
    )
    assert isinstance(pipe, cdc.Pipeline)
    assert pipe.wait().dead_lettered == 0
    versions = spark.sql(
        "SELECT userId, city, sequenceNum, __END_AT IS NULL AS current "
        "FROM cdc.api_rows_history.users ORDER BY userId, sequenceNum"
    ).collect()
    assert [tuple(r) for r in versions] == [
        (123, "Monterrey", 1, False),
        (123, "Chihuahua", 5, False),
        (124, "Oaxaca", 1, True),
        (125, "Tijuana", 2, False),
        (125, "Mexicali", 5, False),
        (125, "Guadalajara", 6, True),
        (126, "Cancun", 2, True),
    ]


def test_apply_changes_refuses_what_cannot_order_or_key_the_rows(any_session: Any) -> None:
    spark = any_session
    rows = spark.createDataFrame([(1, 1.5, "a")], "id bigint, version double, name string")
    with pytest.raises(ConfigError) as e:
        cdc.apply_changes(target="t", source=rows, keys=["ids"], sequence_by="version")
    assert (
        str(e.value)
        == "[CONFIG_INVALID] keys: no column 'ids' in the change rows. Did you mean 'id'?"
    )
    with pytest.raises(ConfigError) as e:
        cdc.apply_changes(target="t", source=rows, keys=["id"], sequence_by="version")
    assert str(e.value) == (
        "[CONFIG_INVALID] sequence_by: column 'version' of type double cannot order changes"
    )
    with pytest.raises(ConfigError) as e:
        cdc.apply_changes(
            target="t", source=rows, keys=["id"], sequence_by="id", apply_as_deletes="op = 'D'"
        )
    assert str(e.value).startswith(
        "[CONFIG_INVALID] apply_as_deletes/apply_as_truncates is not a condition over the change "
        "rows' columns ("
    )


def test_a_whole_configuration_mapping_beside_the_session(any_session: Any, tmp_path: Path) -> None:
    """``cdc.pipeline(session=spark, **settings)`` with the settings' own ``spark:`` section
    (``spark=spark`` clashed with it); a SparkSession given as ``spark=`` still is one."""
    spark = any_session
    settings = {
        "pipeline": "mapping",
        "checkpoint": str(tmp_path / "chk"),
        "namespace": "api_mapping",
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
        "catalog": {"name": "cdc", "warehouse": _warehouse(spark)},
    }
    pipe = cdc.pipeline(session=spark, **settings)
    assert pipe.spark is spark and pipe.cfg.spark.master == "local[2]"
    assert cdc.pipeline(spark=spark, namespace="api_mapping").spark is spark
    with pytest.raises(ConfigError) as e:
        cdc.pipeline(session=spark, spark=spark)
    assert str(e.value) == "[CONFIG_INVALID] give the SparkSession once: session="
