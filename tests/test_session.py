"""How the session is built: cdcflow's own settings when it starts the JVM, the submitted ones
under ``spark-submit`` (decided as data, no SparkSession)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest

from cdcflow.errors import EnvironmentProblem
from cdcflow.spark.session import (
    SparkSettings,
    launched_by_spark_submit,
    session_plan,
)

_EXT = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_JAR = "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
_ABSENT_JAR = f"/nonexistent/{ICEBERG_JAR}"

#: What ``SparkConf().getAll()`` holds in a driver started by ``spark-submit --master
#: 'local-cluster[2,1,1024]' --jars … --conf spark.sql.shuffle.partitions=8``.
_SUBMITTED = {
    "spark.app.name": "submit.py",
    "spark.master": "local-cluster[2,1,1024]",
    "spark.submit.deployMode": "client",
    "spark.submit.pyFiles": "",
    "spark.jars": "file:/opt/jars/iceberg.jar",
    "spark.sql.shuffle.partitions": "8",
}


def _settings(jar: str = _ABSENT_JAR, **kw: Any) -> SparkSettings:
    return SparkSettings(iceberg_jar=jar, warehouse="/data/wh", **kw)


def test_spark_submit_is_recognised_by_the_gateway_it_hands_to_python() -> None:
    assert launched_by_spark_submit({"PYSPARK_GATEWAY_PORT": "40000", "HOME": "/root"})
    assert not launched_by_spark_submit({"SPARK_HOME": "/opt/spark", "HOME": "/root"})


def test_without_spark_submit_the_configuration_decides_everything(tmp_path: Path) -> None:
    jar = tmp_path / ICEBERG_JAR
    jar.write_bytes(b"")
    plan = session_plan(_settings(str(jar), master="local[2]", shuffle_partitions=3), None)
    assert plan.master == "local[2]"
    assert plan.set_python
    assert plan.conf["spark.jars"] == str(jar)
    assert plan.conf["spark.pyspark.python"] == sys.executable
    assert plan.conf["spark.sql.shuffle.partitions"] == "3"
    assert plan.conf["spark.sql.extensions"] == _EXT
    assert plan.conf["spark.sql.catalog.cdc.warehouse"] == "/data/wh"
    with pytest.raises(EnvironmentProblem) as e:
        session_plan(_settings(), None)
    assert e.value.code == "ICEBERG_JAR_MISSING"


def test_under_spark_submit_the_submitted_master_and_keys_win() -> None:
    settings = _settings(master="local[*]", shuffle_partitions=3, conf={"spark.ui.enabled": "1"})
    plan = session_plan(settings, _SUBMITTED)
    assert plan.master is None  # keep local-cluster, not the file's local[*]
    assert not plan.set_python  # spark.pyspark.python / PYSPARK_PYTHON as submitted
    assert set(plan.conf).isdisjoint(_SUBMITTED)
    assert set(plan.conf).isdisjoint(
        {"spark.jars", "spark.jars.packages", "spark.driver.memory", "spark.pyspark.python"}
    )
    # what the submission leaves unset still comes from the configuration
    assert plan.conf["spark.sql.extensions"] == _EXT
    assert plan.conf["spark.sql.catalog.cdc"] == "org.apache.iceberg.spark.SparkCatalog"
    assert plan.conf["spark.sql.catalog.cdc.warehouse"] == "/data/wh"
    assert plan.conf["spark.ui.enabled"] == "1"
    # the submission brings the Iceberg jar (--jars): none needs to be installed with cdcflow
    assert "spark.jars" not in session_plan(_settings(), {**_SUBMITTED, "spark.jars": ""}).conf


def test_the_session_keeps_a_batchs_compiled_code_for_the_next(tmp_path: Path) -> None:
    """A batch runs ≈ 70 pieces of generated code; Spark keeps 100 compiled ones, so each
    batch compiled the last one's again. cdcflow's sessions keep more, under spark-submit too
    unless the submission says otherwise."""
    jar = tmp_path / ICEBERG_JAR
    jar.write_bytes(b"")
    key = "spark.sql.codegen.cache.maxEntries"
    assert int(session_plan(_settings(str(jar)), None).conf[key]) >= 1000
    assert int(session_plan(_settings(), _SUBMITTED).conf[key]) >= 1000
    assert key not in session_plan(_settings(), {**_SUBMITTED, key: "50"}).conf


def test_under_spark_submit_iceberg_joins_the_submitted_sql_extensions() -> None:
    other = "io.delta.sql.DeltaSparkSessionExtension"
    plan = session_plan(_settings(), {**_SUBMITTED, "spark.sql.extensions": other})
    assert plan.conf["spark.sql.extensions"] == f"{other},{_EXT}"
    plan = session_plan(_settings(), {**_SUBMITTED, "spark.sql.extensions": f"{_EXT}, {other}"})
    assert "spark.sql.extensions" not in plan.conf


def test_under_spark_submit_submitted_catalog_settings_win() -> None:
    submitted = {**_SUBMITTED, "spark.sql.catalog.cdc.warehouse": "s3a://bucket/wh"}
    plan = session_plan(_settings(catalog_options={"io-impl": "x.Y"}), submitted)
    assert "spark.sql.catalog.cdc.warehouse" not in plan.conf
    assert plan.conf["spark.sql.catalog.cdc.io-impl"] == "x.Y"


def test_under_spark_submit_what_is_not_taken_is_said() -> None:
    settings = SparkSettings(
        master="local[4]",
        iceberg_jar="/opt/iceberg.jar",
        shuffle_partitions=3,
        conf={"spark.driver.memory": "8g", "spark.ui.enabled": "1"},
    )
    ignored = "\n".join(session_plan(settings, _SUBMITTED).ignored)
    assert "spark.master 'local[4]'" in ignored and "local-cluster[2,1,1024]" in ignored
    assert "spark.iceberg_jar" in ignored and "--jars" in ignored
    assert "spark.driver.memory" in ignored
    assert "spark.sql.shuffle.partitions '3': the submitted value '8' is used" in ignored
    assert "spark.ui.enabled" not in ignored  # taken: the submission does not set it
    # nothing to say when the configuration asks for nothing the submission overrides
    assert session_plan(SparkSettings(shuffle_partitions=8), _SUBMITTED).ignored == ()


# ---------------------------------------------------------------------- jars by coordinates


def _coordinates(settings: SparkSettings, version: str = "4.1.1") -> list[str]:
    from cdcflow.spark.session import needs

    return [c for n in needs(settings, version) for c in n.coordinates]


def test_the_jars_follow_the_spark_line() -> None:
    from cdcflow.spark import jars

    v = jars.ICEBERG_VERSION
    # a session not built for one configuration: everything cdcflow can load
    assert _coordinates(SparkSettings()) == [
        f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{v}",
        jars.SQLITE_JDBC,
        jars.POSTGRESQL_JDBC,
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1",
    ]
    assert _coordinates(SparkSettings(), "3.5.1")[0] == (
        f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{v}"
    )
    assert _coordinates(SparkSettings(), "3.5.1")[-1] == (
        "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1"
    )
    # a cluster's own Iceberg: by coordinates instead of cdcflow's, or as a local jar
    own = _coordinates(SparkSettings(iceberg_packages="org.apache.iceberg:x:1"))
    assert own[0] == "org.apache.iceberg:x:1" and not any("runtime" in c for c in own)
    assert not any("iceberg" in c for c in _coordinates(SparkSettings(iceberg_jar="/j.jar")))
    with pytest.raises(EnvironmentProblem) as e:
        jars.spark_line("4.0.1")
    assert e.value.code == "SPARK_UNSUPPORTED" and "3.5 and 4.1" in e.value.message


def _pipeline_needs(version: str = "4.1.4", **cfg: Any) -> dict[str, bool]:
    """What a pipeline's session loads: label → required."""
    from cdcflow.config import load_config
    from cdcflow.pipeline.session import spark_settings
    from cdcflow.spark.session import needs

    settings = spark_settings(load_config({"sources": [{"name": "s", "path": "/l"}], **cfg}))
    return {n.label: n.required for n in needs(settings, version)}


def test_a_pipeline_loads_the_jars_its_configuration_uses() -> None:
    iceberg, kafka = (
        "Iceberg's Spark runtime",
        "Spark's Kafka connector (Kafka sources and outputs)",
    )
    sqlite = "the SQLite JDBC driver (the embedded catalog)"
    postgresql = "the PostgreSQL JDBC driver (JDBC catalogs on PostgreSQL)"
    # a landing zone on the embedded catalog: no Kafka connector, no PostgreSQL driver
    assert _pipeline_needs() == {iceberg: True, sqlite: True}
    topics = {"name": "k", "kafka": {"bootstrap_servers": "b:9092", "topics": ["t"]}}
    assert _pipeline_needs(sources=[topics]) == {iceberg: True, sqlite: True, kafka: True}
    out = {"name": "o", "type": "kafka", "kafka": {"bootstrap_servers": "b:9092", "topic": "t"}}
    assert _pipeline_needs(outputs=[out])[kafka] is True
    # a DataFrame given through the Python API may come from Spark's Kafka source
    assert _pipeline_needs(sources=[{"name": "api"}])[kafka] is False
    pg = {"uri": "jdbc:postgresql://db/cat", "warehouse": "s3://b/wh"}
    assert _pipeline_needs(catalog=pg) == {iceberg: True, postgresql: True}
    assert _pipeline_needs(catalog={"type": "rest", "uri": "http://c"}) == {iceberg: True}
    # a Kafka connector of the configuration's own replaces cdcflow's
    given = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
    spark_packages = {"packages": [given]}
    assert _pipeline_needs(sources=[topics], spark=spark_packages) == {
        iceberg: True,
        sqlite: True,
        "spark.packages": True,
    }
    local = {"conf": {"spark.jars": "/opt/jars/spark-sql-kafka-0-10_2.13-4.1.1.jar,/opt/x.jar"}}
    assert kafka not in _pipeline_needs(sources=[topics], spark=local)


def test_the_kafka_connector_says_what_to_do_when_it_is_missing(tmp_path: Path) -> None:
    from cdcflow.spark import jars

    need = jars.kafka_need("4.1.4")
    e = jars.unresolved(need, jars.JarCache(tmp_path), ["module not found: x"], None)
    assert e.code == "JAR_UNRESOLVED" and e.hint is not None
    said = f"{need.coordinates[0]} (module not found: x)"
    assert e.message.startswith(f"could not resolve {need.label}: {said}")
    assert need.label == "Spark's Kafka connector (Kafka sources and outputs)"
    assert "Maven Central" in e.message and str(tmp_path) in e.message
    assert e.hint.startswith("install a PySpark whose connector the repository serves (`pip "
                             "install 'pyspark==4.1.1'`")  # fmt: skip
    assert "spark.conf spark.jars" in e.hint and "spark.packages" in e.hint
    assert "pipelines without Kafka do not need it" in e.hint
    assert f"point {jars.REPOSITORY_ENV} at a Maven repository" in e.hint
    # on the release CI runs on there is no other release to point at
    tested = jars.unresolved(jars.kafka_need("4.1.1"), jars.JarCache(tmp_path))
    assert tested.hint is not None and "pip install" not in tested.hint
    # several at once: each named, what to do for each, and once for all
    both = jars.joined(
        {need: e, jars.SQLITE_NEED: jars.unresolved(jars.SQLITE_NEED, jars.JarCache(tmp_path))}
    )
    assert both.message.startswith(
        "2 sets of jars could not be resolved:\n  could not resolve Spark's"
    )
    assert "\n  could not resolve the SQLite JDBC driver" in both.message
    assert both.hint is not None and both.hint.count(jars.REPOSITORY_ENV) == 1
    assert (
        "for the SQLite JDBC driver (the embedded catalog): give a local sqlite-jdbc" in both.hint
    )
    # a mirror is named without the user and password in its URL
    shown = jars.shown_repository("https://me:secret@mirror.example:8443/maven/")
    assert "secret" not in shown and "mirror.example:8443/maven/" in shown


def test_the_jar_cache_records_what_a_set_resolved_to(tmp_path: Path) -> None:
    from cdcflow.spark.jars import JarCache, local_paths

    cache = JarCache(tmp_path)
    wanted = ["a:b:1", "c:d:2"]
    assert cache.lookup(wanted) is None
    files = [tmp_path / "ivy" / "jars" / n for n in ("a_b-1.jar", "c_d-2.jar")]
    files[0].parent.mkdir(parents=True)
    for f in files:
        f.write_bytes(b"")
    cache.record(wanted, [str(f) for f in files])
    assert cache.lookup(list(reversed(wanted))) == [str(f) for f in files]  # a set: any order
    assert cache.lookup(["a:b:1"]) is None
    files[1].unlink()
    assert cache.lookup(wanted) is None  # a file gone: resolve again
    spark_jars = f"file://{files[0]},file:///elsewhere/x.jar,,{files[1]}"
    assert local_paths(spark_jars, tmp_path / "ivy") == [str(files[0]), str(files[1])]


def test_a_process_that_finds_the_lock_just_taken_reads_its_holder_again(tmp_path: Path) -> None:
    """The holder writes its process id right after taking the lock: one that finds the lock
    taken in between reads an empty file, and reads again rather than saying "another"."""
    import threading

    from cdcflow.spark.jars import _holder

    lock = tmp_path / "lock"
    lock.write_bytes(b"")
    fd = os.open(lock, os.O_RDWR)
    try:
        later = threading.Timer(0.2, lambda: lock.write_text("4242"))
        later.start()
        assert _holder(fd) == "4242"
        later.join()
        lock.write_bytes(b"")
        assert _holder(fd) == "another"  # nobody ever wrote: said after a second, not forever
    finally:
        os.close(fd)


def test_the_embedded_catalog_is_an_sqlite_file_inside_the_warehouse() -> None:
    from cdcflow.errors import ConfigError
    from cdcflow.spark.session import catalog_conf, catalog_uri

    conf = catalog_conf(SparkSettings(warehouse="/data/wh"))
    assert conf["spark.sql.catalog.cdc.type"] == "jdbc"
    assert conf["spark.sql.catalog.cdc.uri"] == "jdbc:sqlite:/data/wh/catalog.db"
    assert conf["spark.sql.catalog.cdc.jdbc.schema-version"] == "V1"
    given = SparkSettings(catalog_uri="jdbc:postgresql://db/cat", warehouse="s3://b/wh")
    assert catalog_uri(given) == "jdbc:postgresql://db/cat"
    assert catalog_uri(SparkSettings(catalog_type="hadoop")) is None
    with pytest.raises(ConfigError) as e:
        catalog_uri(SparkSettings(warehouse="s3://b/wh"))
    assert "needs catalog.uri" in e.value.message


# ------------------------------------------------ resolving, from a Maven repository in a folder

#: The one artifact of :func:`_maven_repository`.
PROBE = "test.cdcflow:probe:1.0"


def _maven_repository(root: Path) -> Path:
    """A Maven repository in a folder (what ``$CDCFLOW_MAVEN_REPOSITORY`` may name instead of
    Maven Central) holding :data:`PROBE`: its pom and a jar of only a manifest."""
    folder = root / "test" / "cdcflow" / "probe" / "1.0"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "probe-1.0.jar", "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    (folder / "probe-1.0.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>test.cdcflow</groupId><artifactId>probe</artifactId><version>1.0</version>"
        "</project>\n"
    )
    return root


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An empty jar cache that two processes started at once both resolve :data:`PROBE` into
    (from a repository in a folder: no network), with what each printed."""
    from cdcflow.spark import jars

    root = tmp_path_factory.mktemp("resolving")
    repo = _maven_repository(root / "repo")
    env = {**os.environ, jars.CACHE_ENV: str(root / "cache"), jars.REPOSITORY_ENV: str(repo)}
    code = (
        "from cdcflow.spark import jars; "
        f"print('FILES', *jars.session_jars([jars.Need('the probe', ({PROBE!r},))]))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=PIPE, stderr=PIPE, text=True)
        for _ in range(2)
    ]
    done = [(p.pid, *p.communicate(timeout=300), p.returncode) for p in procs]
    return {"repo": repo, "cache": jars.JarCache(root / "cache"), "done": done}


@pytest.mark.spark
@pytest.mark.services
def test_two_processes_fill_an_empty_jar_cache_one_after_the_other(filled: dict[str, Any]) -> None:
    cache = filled["cache"]
    (jar,) = cache.ivy.joinpath("jars").iterdir()
    assert jar.name == "test.cdcflow_probe-1.0.jar"
    for _pid, out, err, status in filled["done"]:
        assert status == 0, err
        assert out.split() == ["FILES", str(jar)]
    # the second found the cache being filled, said by whom, waited, and took what was recorded
    waited = [
        (pid, err)
        for pid, _out, err, _status in filled["done"]
        if "waiting for the jar cache" in err
    ]
    assert len(waited) == 1, filled["done"]
    (holder,) = {pid for pid, *_ in filled["done"]} - {waited[0][0]}
    assert f"{cache.root}: process {holder} is filling it" in waited[0][1]
    assert len(list(cache.root.joinpath("resolved").iterdir())) == 1


@pytest.mark.spark
@pytest.mark.services
def test_a_jar_that_cannot_be_resolved_is_named_and_stops_only_what_needs_it(
    filled: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from cdcflow.spark import jars

    monkeypatch.setenv(jars.REPOSITORY_ENV, str(filled["repo"]))
    cache = filled["cache"]
    probe = jars.Need("the probe", (PROBE,))
    missing = jars.Need(
        "the missing one", ("test.cdcflow:missing:1.0",), required=False, advice="do this"
    )
    found = jars.fetch([probe, missing], cache)
    assert found[probe] == cache.lookup(probe.coordinates)  # cached: not resolved again
    problem = found[missing]
    assert isinstance(problem, EnvironmentProblem) and problem.code == "JAR_UNRESOLVED"
    message = problem.message
    # what it is, what Spark's resolver said, where it looked; what to do
    assert message.startswith(
        "could not resolve the missing one: test.cdcflow:missing:1.0 "
        "(module not found: test.cdcflow#missing;1.0); "
    )
    assert message.endswith(f"{jars.REPOSITORY_ENV} {filled['repo'].as_uri()}/")
    assert str(cache.root) in message
    assert problem.hint is not None and problem.hint.startswith("do this; or point")
    assert cache.lookup(missing.coordinates) is None
    # optional: the session starts without it, and says so
    with caplog.at_level(logging.WARNING, logger="cdcflow"):
        assert jars.loaded(found) == found[probe]
    assert "the session starts without the missing one: [JAR_UNRESOLVED]" in caplog.text
    # required: it stops the session, named alone
    with pytest.raises(EnvironmentProblem) as e:
        jars.loaded({probe: found[probe], replace(missing, required=True): problem})
    assert e.value is problem
