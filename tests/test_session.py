"""How the session is built: cdcflow's own settings when it starts the JVM, the submitted ones
under ``spark-submit`` (decided as data, no SparkSession)."""

from __future__ import annotations

import sys
from pathlib import Path
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


def test_the_jars_follow_the_spark_line() -> None:
    from cdcflow.spark import jars
    from cdcflow.spark.session import coordinates

    v = jars.ICEBERG_VERSION
    assert coordinates(SparkSettings(), "4.1.1") == (
        f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{v}",
        jars.SQLITE_JDBC,
        jars.POSTGRESQL_JDBC,
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1",
    )
    assert coordinates(SparkSettings(), "3.5.1")[0] == (
        f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{v}"
    )
    assert coordinates(SparkSettings(), "3.5.1")[-1] == (
        "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1"
    )
    # a cluster's own Iceberg: by coordinates instead of cdcflow's, or as a local jar
    own = coordinates(SparkSettings(iceberg_packages="org.apache.iceberg:x:1"), "4.1.1")
    assert own[0] == jars.SQLITE_JDBC and "org.apache.iceberg:x:1" in own
    assert not any(
        "iceberg" in c for c in coordinates(SparkSettings(iceberg_jar="/j.jar"), "4.1.1")
    )
    with pytest.raises(EnvironmentProblem) as e:
        jars.spark_line("4.0.1")
    assert e.value.code == "SPARK_UNSUPPORTED" and "3.5 and 4.1" in e.value.message


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


@pytest.mark.spark
def test_a_jar_that_cannot_be_resolved_is_named(tmp_path: Path) -> None:
    from cdcflow.spark.jars import JarCache
    from cdcflow.spark.session import resolve_jars

    with pytest.raises(EnvironmentProblem) as e:
        resolve_jars(["org.apache.iceberg:iceberg-no-such-module:0.0.1"], JarCache(tmp_path))
    assert e.value.code == "JAR_UNRESOLVED"
    assert "org.apache.iceberg:iceberg-no-such-module:0.0.1" in e.value.message
    assert "unresolved dependency" in e.value.message  # what Spark's resolver said
    assert "cdcflow jars --fetch" in e.value.message and str(tmp_path) in e.value.message
