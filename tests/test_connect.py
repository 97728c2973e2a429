"""The Python API over Spark Connect, against a local Spark Connect server (the ``spark_connect``
fixture): raw messages decode to the same rows as on the classic session, and the entry points
that need Spark's JVM refuse a Connect session with ``CONNECT_UNSUPPORTED``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

import cdcflow.api as cdc
from cdcflow.dialects import dialect_names
from cdcflow.dialects.base import DialectOptions
from cdcflow.pipeline.report import EXIT_DEAD_LETTERS, EXIT_OK
from cdcflow.spark.kind import (
    ConnectUnsupported,
    connect_asked,
    is_connect,
    is_connect_column,
    refuse_connect_build,
)
from tests.kafka_shaped import KAFKA_ARROW, kafka_rendering
from tests.scenario import ev
from tests.scenario_world import DATABRICKS_FEED

pytestmark = pytest.mark.spark

#: Messages no dialect reads: each is a rejection with a code, on either kind of session.
_BAD = [b"{not json", b"", b'{"some": "object"}', b"\xff\xfe\x00garbage", b"[1, 2, 3]"]


def _raw(root: Path) -> dict[str, tuple[list[dict[str, Any]], DialectOptions | None]]:
    """A few transactions of every dialect as rows of Spark's Kafka source with the dialect's
    options, by dialect, and (``bad``) messages no dialect reads."""
    out: dict[str, tuple[list[dict[str, Any]], DialectOptions | None]] = {}
    for name in dialect_names():
        r = kafka_rendering(name, root / name, transactions=4)
        out[name] = (r.rows, r.options)
    bad = [
        {"key": None, "value": v, "topic": "bad", "partition": 0, "offset": i, "timestamp": None}
        for i, v in enumerate(_BAD)
    ]
    out["bad"] = (bad, None)
    return out


def _decoded(
    session: Any, root: Path, raw: dict[str, tuple[list[dict[str, Any]], DialectOptions | None]]
) -> list[Any]:
    """Every dialect's Kafka rows decoded with its options (``bad``: auto-detected), and the
    savegress files under ``root`` decoded as ``binaryFile`` rows, collected: one frame, one
    job."""
    frames = []
    for name, (rows, o) in raw.items():
        # one partition a frame: a few rows each, and one Python task rather than two
        frame = session.createDataFrame(pa.Table.from_pylist(rows, schema=KAFKA_ARROW)).coalesce(1)
        if o is None:
            frames.append(cdc.decode(frame).frame)
        else:
            decoded = cdc.decode(
                frame, name, types=o.column_types, keys=o.table_keys, options=o.extra
            )
            frames.append(decoded.frame)
    files = session.read.format("binaryFile").load(str(root / "savegress"))
    frames.append(cdc.decode(files, "savegress").frame)
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    return union.collect()


def _plain(row: Any) -> dict[str, Any]:
    """A collected row as plain values (a classic session gives binary as ``bytearray``)."""
    out = row.asDict()
    for k, v in out.items():
        if isinstance(v, bytearray):
            out[k] = bytes(v)
        elif isinstance(v, dict):
            out[k] = sorted(v.items())
    return out


def test_decode_over_connect_equals_decode_on_a_classic_session(
    spark: Any, connect: Any, tmp_path: Path
) -> None:
    """The same raw messages — Kafka rows of every dialect, messages no dialect reads, files
    — decode to the same rows (events, segments, rejections, every column) on a Connect
    session as on the classic one."""
    raw = _raw(tmp_path)
    classic = sorted(map(_plain, _decoded(spark, tmp_path, raw)), key=repr)
    remote = sorted(map(_plain, _decoded(connect, tmp_path, raw)), key=repr)
    assert remote == classic
    codes = {r["error_code"] for r in classic if r["error_code"] is not None}
    assert len(classic) > 50 and "NOT_JSON" in codes, codes
    assert {r["dialect"] for r in classic} >= set(dialect_names())
    assert any(r["operation"] == "SEGMENT" for r in classic)


def test_a_sessions_kind_and_what_refuses_a_connect_session(spark: Any, connect: Any) -> None:
    """The session's kind is told by its class; what does not run over Spark Connect says
    so with ``CONNECT_UNSUPPORTED`` before touching it: one's own ``foreachBatch`` (a Connect
    server does not tell a batch which query runs it, so a query numbering its batches anew
    could not be told apart) and conditions given as Connect columns."""
    from pyspark.sql import functions as classic_functions
    from pyspark.sql.connect import functions as remote_functions

    assert is_connect(connect) and not is_connect(spark)
    assert is_connect_column(remote_functions.col("a"))
    assert not is_connect_column(classic_functions.col("a"))
    line = orjson.dumps(ev("INSERT", "users", 1, after={"id": 1})).decode()
    messages = connect.createDataFrame([(line,)], "body string")
    events = cdc.decode(messages, "savegress", keys={"users": ["id"]}).events
    calls = {
        "cdcflow.api.foreach_batch (one's own foreachBatch)": lambda: cdc.foreach_batch(
            session=connect, namespace="connect"
        ),
        "sequence_by given as a Column": lambda: cdc.table_config(
            sequence_by=remote_functions.struct("a", "b")
        ),
        "apply_as_deletes given as a Column": lambda: cdc.table_config(
            apply_as_deletes=remote_functions.col("operation") == "D"
        ),
    }
    for what, call in calls.items():
        with pytest.raises(ConnectUnsupported) as e:
            call()
        assert e.value.code == "CONNECT_UNSUPPORTED" and what in str(e.value), what
        assert e.value.hint
    assert [r["operation"] for r in events.collect()] == ["INSERT"]


def test_a_table_not_there_yet_is_looked_up_over_connect_without_an_error_logged(
    connect: Any,
) -> None:
    """The first batch of a pipeline looks up tables it has not created yet (its batch
    history): over Connect the look-up answers "none" and logs nothing — PySpark's client
    logged the server's error with its Java trace as an ``ERROR`` line on standard error
    first; the error is still raised where the caller expects none, and the logger logs
    again after the look-up."""
    import logging

    from pyspark.errors import AnalysisException
    from pyspark.logger import PySparkLogger

    from cdcflow.iceberg.tables import SqlTable, _errors_unlogged

    logged: list[logging.LogRecord] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record)

    logger = PySparkLogger.getLogger("SQLQueryContextLogger")
    level = logger.level  # a classic session cdcflow built quiets it for the whole process
    logger.setLevel(logging.ERROR)
    kept = Kept()
    logger.addHandler(kept)
    try:
        assert SqlTable.open(connect, "cdc", "connect_absent", "batches") is None
        assert logged == []
        with pytest.raises(AnalysisException):  # raised to the caller as before
            with _errors_unlogged():
                connect.sql("SELECT * FROM cdc.connect_absent.batches").collect()
        logger.error("after the look-up")
        assert [r.getMessage() for r in logged] == ["after the look-up"]  # on again
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)


def test_what_makes_a_new_session_a_connect_client() -> None:
    """Each way PySpark's builder is asked for a Connect client is named without its value (a
    Connect URL may hold a token); a session cdcflow would build then is refused."""
    url = "sc://host:15002/;token=s3cret"
    cases = [
        ({}, {"SPARK_REMOTE": url}, "the environment variable SPARK_REMOTE"),
        ({"spark.remote": url}, {}, "the setting spark.remote"),
        ({"spark.api.mode": "Connect"}, {}, "spark.api.mode=connect"),
        ({}, {"SPARK_API_MODE": "connect"}, "spark.api.mode=connect"),
        ({"spark.api.mode": "classic"}, {"SPARK_API_MODE": "connect"}, None),
        ({}, {"SPARK_CONNECT_MODE_ENABLED": "1"}, "a Spark Connect session made earlier"),
        ({"spark.master": "local[2]"}, {"PATH": "/bin"}, None),
    ]
    for conf, environ, expected in cases:
        found = connect_asked(conf, environ)
        assert (found if expected is None else (found or "")[: len(expected)]) == expected
        if expected is None:
            refuse_connect_build(conf, environ)
            continue
        with pytest.raises(ConnectUnsupported) as e:
            refuse_connect_build(conf, environ)
        assert e.value.code == "CONNECT_UNSUPPORTED" and "s3cret" not in str(e.value)


#: Databricks' ``apply_changes`` example (change rows of one table), then a truncate and an
#: insert; a row without its key is a dead letter.
CHANGES_SCHEMA = "userId bigint, name string, city string, operation string, sequenceNum bigint"
LATER = [(None, None, None, "TRUNCATE", 7), (127, "Ana", None, "INSERT", 8)]
KEYLESS = (None, "Bo", "Puebla", "INSERT", 9)


def _apply_rows(
    session: Any, rows: list[Any], scd: int, namespace: str, checkpoint: Path, **settings: Any
) -> Any:
    return _apply(
        session.createDataFrame(rows, CHANGES_SCHEMA), scd, namespace, checkpoint, **settings
    )


def _apply(source: Any, scd: int, namespace: str, checkpoint: Path, **settings: Any) -> Any:
    """``apply_changes`` of change rows (a batch or a stream) into ``users``."""
    excluded = ["operation", "sequenceNum"] if scd == 1 else ["operation"]
    return cdc.apply_changes(
        target="users",
        source=source,
        keys=["userId"],
        sequence_by="sequenceNum",
        apply_as_deletes="operation = 'DELETE'",
        apply_as_truncates="operation = 'TRUNCATE'",
        except_column_list=excluded,
        stored_as_scd_type=scd,
        namespace=namespace,
        checkpoint=str(checkpoint),
        **settings,
    )


def _replica(session: Any, namespace: str) -> list[tuple[Any, ...]]:
    """A replica's rows without its ``_cdc`` column (which holds when it was applied)."""
    table = session.table(f"cdc.{namespace}.users")
    columns = [c for c in table.columns if c != "_cdc"]
    return sorted(tuple(r) for r in table.select(*columns).collect())


def test_apply_changes_over_connect_equals_a_classic_session(
    spark: Any, connect: Any, tmp_path: Path
) -> None:
    """Change rows applied as current state (merge) and as history (scd2), two batches each
    (the second a truncate and an insert), give the same replicas, batch histories and dead
    letters over Spark Connect as on a classic session; the commits over Connect carry the
    ledger's entries in their snapshot summaries."""
    for scd in (1, 2):
        namespace = f"connect_scd{scd}"
        seen = {}
        for session, kind in ((spark, "classic"), (connect, "connect")):
            checkpoint = tmp_path / kind / namespace
            first = _apply_rows(session, [*DATABRICKS_FEED, KEYLESS], scd, namespace, checkpoint)
            second = _apply_rows(session, LATER, scd, namespace, checkpoint)
            assert (first.exit_status, second.exit_status) == (EXIT_DEAD_LETTERS, EXIT_OK), kind
            assert [first.dead_lettered, second.dead_lettered] == [1, 0], kind
            history = session.sql(
                f"SELECT batch_id, events, dead_lettered FROM cdc.{namespace}__cdcflow.batches"
            ).collect()
            dead = session.sql(
                f"SELECT error_code, batch_id, raw FROM cdc.{namespace}__cdcflow.dead_letters"
            ).collect()
            seen[kind] = (
                _replica(session, namespace),
                sorted(tuple(r) for r in history),
                sorted(tuple(r) for r in dead),
            )
        assert seen["connect"] == seen["classic"], scd
        assert [r[0] for r in seen["connect"][1]] == [0, 1]
        summaries = connect.sql(
            f"SELECT summary FROM cdc.{namespace}.users.snapshots ORDER BY committed_at"
        ).collect()
        steps = [
            (s["summary"].get("cdcflow.batch"), s["summary"].get("cdcflow.step")) for s in summaries
        ]
        step = "merge" if scd == 1 else "versions"
        assert steps == [("0", step), ("1", step)], steps


def test_a_batch_stopped_after_a_commit_over_connect_is_not_applied_twice(
    connect: Any, tmp_path: Path
) -> None:
    """Stopped right after its dead letters are committed, a batch run again over Spark
    Connect is the same batch (its id again): the ledger in the snapshot summaries says the
    dead letters are written, so they are not written twice, and the replica equals a run
    that was never stopped."""
    from cdcflow.iceberg import ledger

    class Stopped(Exception):
        pass

    def stop(props: Any) -> None:
        if props.get(ledger.STEP) == "dead_letters":
            raise Stopped

    rows = [*DATABRICKS_FEED, KEYLESS]
    ledger.STEP_HOOKS.append(stop)
    try:
        with pytest.raises(Stopped):
            _apply_rows(connect, rows, 1, "connect_rerun", tmp_path / "chk")
    finally:
        ledger.STEP_HOOKS.remove(stop)
    again = _apply_rows(connect, rows, 1, "connect_rerun", tmp_path / "chk")
    assert [r.batch_id for r in again.reports] == [0]
    _apply_rows(connect, rows, 1, "connect_once", tmp_path / "chk_once")
    assert _replica(connect, "connect_rerun") == _replica(connect, "connect_once")
    dead = connect.sql("SELECT batch_id FROM cdc.connect_rerun__cdcflow.dead_letters").collect()
    assert [r["batch_id"] for r in dead] == [0]


def test_maintenance_over_connect_keeps_the_replica(connect: Any, tmp_path: Path) -> None:
    """A maintenance round after every batch over Spark Connect: data files rewritten, old
    snapshots expired by Iceberg's procedure (the newest kept), orphans looked for, each
    recorded in the maintenance table with its figures; the replica is the one a run without
    maintenance gives."""
    policy = {
        "every_batches": 1,
        "rewrite_data_files": 2,
        "rewrite_delete_files": 1,
        "snapshot_retention": "1s",
        "keep_snapshots": 1,
    }
    for namespace, settings in (("connect_upkeep", {"maintenance": policy}), ("connect_bare", {})):
        for rows in (DATABRICKS_FEED, LATER, [(130, "Eva", "Leon", "INSERT", 9)]):
            checkpoint = tmp_path / namespace
            result = _apply_rows(connect, rows, 1, namespace, checkpoint, **settings)
            assert result.exit_status == EXIT_OK
    assert _replica(connect, "connect_upkeep") == _replica(connect, "connect_bare")
    actions = connect.sql(
        "SELECT batch_id, action, snapshots_before, snapshots_after "
        "FROM cdc.connect_upkeep__cdcflow.maintenance WHERE `table` = 'users'"
    ).collect()
    done = {r.action for r in actions}
    assert {"rewrite_data_files", "expire_snapshots", "remove_orphan_files"} <= done, actions
    expired = [r for r in actions if r.action == "expire_snapshots"]
    assert all(r.snapshots_after < r.snapshots_before for r in expired), expired
    left = connect.sql("SELECT count(*) AS n FROM cdc.connect_upkeep.users.snapshots").first()
    assert left is not None and left.n <= expired[-1].snapshots_after + 1


# ---------------------------------------------------------------------------- streaming


def _landing_messages(seq: int, n: int) -> list[dict[str, Any]]:
    """Savegress events over two tables from commit position ``seq``: inserts, an update and
    a delete of each table."""
    out: list[dict[str, Any]] = []
    for table in ("orders", "users"):
        for i in range(n):
            out.append(ev("INSERT", table, seq + i, after={"id": i, "v": f"{table}-{i}"}))
        out.append(ev("UPDATE", table, seq + n, after={"id": 0, "v": "changed"}))
        out.append(ev("DELETE", table, seq + n + 1, before={"id": 1}))
    return out


KEYS = {"orders": ["id"], "users": ["id"]}


def _run_config(root: Path, namespace: str, landing: Path, **extra: Any) -> Path:
    """A configuration file of a pipeline over ``landing`` without a catalog (the session's:
    the Spark Connect server's, or the classic test session's)."""
    import yaml

    doc: dict[str, Any] = {
        "pipeline": namespace,
        "checkpoint": str(root / "checkpoint"),
        "namespace": namespace,
        "sources": [{"name": "src", "path": str(landing), "dialect": "savegress", "keys": KEYS}],
        **extra,
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "cdcflow.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _tables(session: Any, namespace: str) -> dict[str, Any]:
    """Every replica's rows (without ``_cdc``) and the dead letters (code, raw bytes) of a
    pipeline's namespace."""
    out: dict[str, Any] = {}
    for name in ("orders", "users"):
        table = session.table(f"cdc.{namespace}.{name}")
        columns = [c for c in table.columns if c != "_cdc"]
        out[name] = sorted((tuple(r) for r in table.select(*columns).collect()), key=repr)
    dead = session.sql(f"SELECT error_code, raw FROM cdc.{namespace}__cdcflow.dead_letters")
    out["dead_letters"] = sorted(tuple(r) for r in dead.collect())
    return out


def test_cdcflow_run_remote_equals_a_classic_run(
    spark: Any, connect: Any, spark_connect: Any, tmp_path: Path
) -> None:
    """``cdcflow run --remote`` runs a landing zone's pipeline (a table kept as current state,
    one as a changelog) on the Spark Connect server: its progress lines and exit statuses (3
    with dead letters — a line no dialect reads and a zero-byte file — then 0), replicas and
    dead letters are those of the same pipeline run on a classic session; the checkpoint
    records the streaming query that applies the source."""
    from click.testing import CliRunner

    from cdcflow.cli.main import cli
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline
    from tests.scenario import land

    landing = tmp_path / "landing"
    landing.mkdir()
    land(landing, _landing_messages(10, 5))
    land(landing, b"{not json\n")
    (landing / "empty.jsonl").write_bytes(b"")
    # orders kept as a changelog (append), users as current state (merge)
    tables = {"orders": {"mode": "append"}}
    remote = _run_config(tmp_path / "remote", "connect_run", landing, tables=tables)
    classic = _run_config(tmp_path / "classic", "connect_run_classic", landing, tables=tables)

    def both() -> tuple[Any, Any]:
        shown = CliRunner().invoke(cli, ["run", str(remote), "--remote", spark_connect.url])
        result = Pipeline(load_config_file(classic), spark).run()
        return shown, result

    shown, result = both()
    assert shown.exit_code == EXIT_DEAD_LETTERS == result.exit_status, shown.output
    assert "batch 0: 16 events" in shown.output, shown.output
    assert "done: 1 batch(es), 16 events, 2 dead-lettered" in shown.output, shown.output
    first = _tables(connect, "connect_run")
    assert first == _tables(spark, "connect_run_classic")
    assert {code for code, _ in first["dead_letters"]} == {"NOT_JSON", "EMPTY_FILE"}
    assert len(first["orders"]) == 7  # one row per event
    assert len(first["users"]) == 4 and ("0", "changed") in {
        (str(r[0]), r[1]) for r in first["users"]
    }

    land(landing, _landing_messages(30, 3))
    shown, result = both()
    assert shown.exit_code == EXIT_OK == result.exit_status, shown.output
    assert "batch 1:" in shown.output and "done: 1 batch(es)" in shown.output, shown.output
    assert _tables(connect, "connect_run") == _tables(spark, "connect_run_classic")
    sources = list((tmp_path / "remote" / "checkpoint" / "sources").iterdir())
    record = orjson.loads((sources[0] / "source.json").read_bytes())
    query = orjson.loads((sources[0] / "query" / "metadata").read_bytes())
    assert record["query"] == query["id"]


def test_a_kafka_source_over_connect_stopped_mid_batch_then_rerun_equals_the_oracle(
    connect: Any, kafka: Any, tmp_path: Path
) -> None:
    """Debezium's Kafka form read by a ``kafka:`` source whose queries run on the Spark
    Connect server, following; stopped in the middle of a batch (a replica committed, the
    batch history not yet), then run again to the end: the replicas equal the oracle and
    every batch is in the history once."""
    from cdcflow.config import load_config
    from cdcflow.dialects import kafka_delivery, renderer_features
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.simulation.workload import generate
    from cdcflow.testing.compare import compare_replicas
    from cdcflow.testing.kafka import produce

    w = generate(83, tables=3, transactions=40, features=renderer_features("debezium"))
    sent = kafka_delivery("debezium", w, seed=83, prefix="connect83")
    assert len(produce(kafka.bootstrap, sent.records)) == len(sent.records)
    name = "connect_kafka"
    cfg = load_config(
        {
            "pipeline": name,
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": name,
            "parallel_tables": 1,
            "follow_interval": "1s",
            "sources": [
                {
                    "name": "k",
                    "dialect": "debezium",
                    "kafka": {
                        "bootstrap_servers": kafka.bootstrap,
                        "topics": sent.topics,
                        "max_offsets_per_trigger": 60,
                    },
                    "keys": {t: list(k) for t, k in sent.options.table_keys.items()},
                    "types": {t: dict(c) for t, c in sent.options.column_types.items()},
                    "options": dict(sent.options.extra),
                }
            ],
        }
    )
    tables = sorted(w.tables)

    def committed(batch: int) -> bool:
        """Whether a replica holds a commit of ``batch``."""
        return any(
            connect.sql(
                f"SELECT 1 FROM cdc.{name}.{t}.snapshots "
                f"WHERE summary['cdcflow.batch'] = '{batch}' LIMIT 1"
            ).count()
            for t in tables
            if connect.catalog.tableExists(f"cdc.{name}.{t}")
        )

    stopped = Pipeline(cfg, connect).run(follow=True, should_stop=lambda: committed(1))
    assert stopped.stopped
    done = {
        r["batch_id"]
        for r in connect.sql(f"SELECT batch_id FROM cdc.{name}__cdcflow.batches").collect()
    }
    assert 1 not in done, done  # stopped between the batch's first commit and its end

    result = Pipeline(cfg, connect).run()
    assert result.exit_status == EXIT_OK and result.reports.batches >= 1
    compare_replicas(connect, w, name).assert_equal()
    counts = connect.sql(
        f"SELECT batch_id, count(*) AS n FROM cdc.{name}__cdcflow.batches GROUP BY batch_id"
    ).collect()
    assert len(counts) >= 3 and all(r["n"] == 1 for r in counts), counts


def test_a_connect_session_a_run_made_outlives_the_run(spark_connect: Any) -> None:
    """A Connect session cdcflow makes (``cdcflow run --remote``, a ``Pipeline`` without a
    session) is kept until the process ends, stopped or not: PySpark closes a collected
    Connect session's client and with it shuts down the thread pool every Connect session
    shares, waiting for it — a collection inside that pool's ``submit`` (another session
    fetching results) never returned, and a test run hung there."""
    import gc
    import weakref

    from cdcflow.config import load_config
    from cdcflow.pipeline.session import connect_session

    cfg = load_config(
        {"pipeline": "kept", "sources": [{"name": "s", "path": "/landing", "dialect": "debezium"}]}
    )
    made = connect_session(cfg, spark_connect.url)
    assert made.sql("SELECT 1 AS x").collect()[0]["x"] == 1
    made.stop()
    ref = weakref.ref(made)
    del made
    gc.collect()
    assert ref() is not None


def test_what_a_connect_run_reads_from_its_settings_and_its_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Connect address comes from ``spark.remote``, ``--remote`` or ``SPARK_REMOTE``; one
    holding a token is refused in the file and on the command line without showing it. A
    batch's cdcflow error reaches the client as the server's Python traceback: its code is
    given back; Spark's Kafka restart bug is told by the JVM trace's text."""
    from cdcflow.cli.pipeline import with_remote
    from cdcflow.config import load_config
    from cdcflow.errors import ConfigError
    from cdcflow.pipeline.remote import batch_failure
    from cdcflow.pipeline.session import remote_url
    from cdcflow.spark.errors import kafka_restart_bug_trace

    doc = {"sources": [{"name": "s", "path": str(tmp_path)}]}
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert remote_url(load_config(doc)) is None
    monkeypatch.setenv("SPARK_REMOTE", "sc://env:2/;token=t")
    assert remote_url(load_config(doc)) == "sc://env:2/;token=t"
    monkeypatch.delenv("SPARK_REMOTE")
    cfg = load_config({**doc, "spark": {"remote": "sc://host:15002"}})
    assert remote_url(cfg) == "sc://host:15002"
    assert remote_url(with_remote(load_config(doc), "sc://other:1")) == "sc://other:1"
    for bad in ("sc://host:15002/;token=s3cret", "http://host"):
        with pytest.raises(ConfigError) as e:
            load_config({**doc, "spark": {"remote": bad}})
        assert "s3cret" not in str(e.value)
        with pytest.raises(ConfigError) as e:
            with_remote(load_config(doc), bad)
        assert "s3cret" not in str(e.value)

    trace = (
        "Found error inside foreachBatch Python process: Traceback (most recent call last):\n"
        '  File "/x/batch.py", line 3, in __call__\n'
        "cdcflow.pipeline.batch.StopRequested: [STOP_REQUESTED] batch 3 left for later\n"
    )
    found = batch_failure(trace)
    assert found is not None and found.code == "STOP_REQUESTED"
    assert found.message == "batch 3 left for later"
    assert batch_failure("java.lang.IllegalStateException: boom") is None
    from cdcflow.pipeline.query import remote_failure

    assert remote_failure(RuntimeError(trace), "s").code == "STOP_REQUESTED"
    lost = remote_failure(RuntimeError("[KAFKA_DATA_LOSS.START_OFFSET_RESET] gone\n…"), "k")
    assert lost.code == "KAFKA_DATA_LOSS" and "source 'k'" in str(lost)
    other = remote_failure(RuntimeError("[STREAM_FAILED] boom\nJVM stacktrace: …"), "s")
    assert (
        other.code == "PIPELINE_FAILED" and str(other) == "[PIPELINE_FAILED] [STREAM_FAILED] boom"
    )
    npe = (
        "Caused by: java.lang.NullPointerException: Cannot invoke\n"
        "\tat org.apache.spark.sql.kafka010.KafkaMicroBatchStream$.metrics(K.scala:520)\n"
    )
    assert kafka_restart_bug_trace(npe)
    assert not kafka_restart_bug_trace(npe.replace("metrics", "latestOffset"))


def test_apply_changes_of_a_stream_over_connect_equals_a_classic_session(
    spark: Any, connect: Any, tmp_path: Path
) -> None:
    """Change rows arriving as a stream (parquet files, two runs) applied as history (scd2)
    over Spark Connect give the replica, batch history and dead letters that the same stream
    gives on a classic session; the started pipeline's reports are the batches'."""
    seen = {}
    for session, kind in ((spark, "classic"), (connect, "connect")):
        folder = tmp_path / kind / "feed"
        namespace = f"connect_stream_{kind}"
        results = []
        for i, rows in enumerate(([*DATABRICKS_FEED, KEYLESS], LATER)):
            session.createDataFrame(rows, CHANGES_SCHEMA).write.parquet(str(folder / f"{i}"))
            stream = session.readStream.schema(CHANGES_SCHEMA).parquet(f"{folder}/*")
            pipe = _apply(stream, 2, namespace, tmp_path / kind / "checkpoint")
            assert isinstance(pipe, cdc.Pipeline)
            result = pipe.wait()
            results.append((result.exit_status, [r.batch_id for r in result.reports]))
        history = session.sql(
            f"SELECT batch_id, events, dead_lettered FROM cdc.{namespace}__cdcflow.batches"
        ).collect()
        dead = session.sql(
            f"SELECT error_code, batch_id FROM cdc.{namespace}__cdcflow.dead_letters"
        ).collect()
        seen[kind] = (
            results,
            _replica(session, namespace),
            sorted(tuple(r) for r in history),
            sorted(tuple(r) for r in dead),
        )
    assert seen["connect"] == seen["classic"]
    assert seen["connect"][0] == [(EXIT_DEAD_LETTERS, [0]), (EXIT_OK, [1])]


def test_dead_letters_replayed_over_connect(connect: Any, tmp_path: Path) -> None:
    """Events of a table without a key, dead-lettered by a pipeline run over Spark Connect,
    are applied by a replay over Connect once the configuration gives the key; replayed, they
    are not replayed again."""
    from cdcflow.config import load_config
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.replay import DeadLetterFilter, replay_dead_letters
    from tests.scenario import land

    landing = tmp_path / "landing"
    landing.mkdir()
    land(landing, [ev("INSERT", "extra", 5 + i, after={"id": i, "v": "x"}) for i in range(3)])
    land(landing, _landing_messages(10, 2))

    def cfg(keys: dict[str, list[str]]) -> Any:
        return load_config(
            {
                "pipeline": "connect_replay",
                "checkpoint": str(tmp_path / "checkpoint"),
                "namespace": "connect_replay",
                "sources": [
                    {"name": "src", "path": str(landing), "dialect": "savegress", "keys": keys}
                ],
            }
        )

    run = Pipeline(cfg(KEYS), connect).run()
    assert run.exit_status == EXIT_DEAD_LETTERS and run.dead_lettered == 3
    replayed = replay_dead_letters(cfg({**KEYS, "extra": ["id"]}), connect, DeadLetterFilter())
    assert replayed.exit_status == EXIT_OK and replayed.claimed == {"src": 3}, replayed.summary()
    rows = connect.sql("SELECT id, v FROM cdc.connect_replay.extra ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(0, "x"), (1, "x"), (2, "x")]
    again = replay_dead_letters(cfg({**KEYS, "extra": ["id"]}), connect, DeadLetterFilter())
    assert again.claimed == {}
