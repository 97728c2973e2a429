"""Shared fixtures: one SparkSession for the whole run (UTC, small shuffle partitions)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# The suite draws the same examples on every run, so it fails for a change and never for a
# draw; ``make fuzz`` (CDCFLOW_HYPOTHESIS=explore) draws new ones on every run.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("CDCFLOW_HYPOTHESIS", "suite"))


_ARCHIVE_DIR = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="write the golden files of tests/golden/ from what is decoded (review the diff)",
    )


def pytest_configure(config: pytest.Config) -> None:
    import tempfile

    from tests import golden
    from tests.processes import ARCHIVE_ENV

    golden.UPDATE = bool(config.getoption("--update-goldens"))
    # the class archive of the session's cdcflow processes (tests/processes.py): made beside
    # the first tests when the session configures such processes (pytest_collection_finish)
    if ARCHIVE_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="cdcflow-jvm-")
        os.environ[ARCHIVE_ENV] = str(Path(folder) / "classes.jsa")
        config.stash[_ARCHIVE_DIR] = folder


def pytest_collection_finish(session: pytest.Session) -> None:
    # when a module of the session configures cdcflow processes, their class archive is made
    # beside the first tests (else the first test that configures one makes it, and waits)
    from tests import processes

    makers = (processes.pipeline_config, processes.run_conf)
    modules = {getattr(item, "module", None) for item in session.items}
    if _ARCHIVE_DIR in session.config.stash and any(
        value is maker
        for module in modules
        if module is not None
        for value in vars(module).values()
        for maker in makers
    ):
        processes.make_archive_in_background()


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.processes import stop_making

    stop_making()
    folder = config.stash.get(_ARCHIVE_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


#: Fixtures that start a server; a test using one is marked ``services`` (as is a scenario run
#: on a catalog behind a server), so ``-m "not services"`` leaves them all out.
SERVICE_FIXTURES = frozenset({"kafka", "postgres", "rest_catalog", "spark_connect"})
SERVICE_CATALOGS = frozenset({"pg", "rest"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.crashing import every_line, spark_line

    # a crash test marked line("3.5") or line("4") runs on that Spark line only
    # (tests/crashing.py)
    here = spark_line()
    elsewhere = [
        item
        for item in items
        if (mark := item.get_closest_marker("line")) is not None
        and mark.args[0] != here
        and not every_line()
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if item not in elsewhere]
    for item in items:
        callspec = getattr(item, "callspec", None)
        catalog = callspec.params.get("world") if callspec is not None else None
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVICE_FIXTURES or catalog in SERVICE_CATALOGS:
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The test SparkSession with an Iceberg Hadoop catalog ``cdc`` in a temp warehouse."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Spark tests need a Java 17 runtime")
    from cdcflow.spark.session import SparkSettings, build_session

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = build_session(
        SparkSettings(
            master="local[2]",
            warehouse=str(warehouse),
            shuffle_partitions=2,
            conf={
                "spark.driver.memory": "2g",
                "spark.sql.adaptive.coalescePartitions.enabled": "true",
            },
        )
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Spark Connect server for the run, from the installed PySpark, with the test
    session's jars and settings (its own warehouse, a 1 GiB driver); its ``url`` is what
    ``SparkSession.builder.remote`` takes."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Spark tests need a Java 17 runtime")
    import pyspark

    from cdcflow.testing.services.spark_connect import SparkConnectServer, server_jar

    if server_jar() is None:
        pytest.skip(
            f"PySpark {pyspark.__version__} carries no Spark Connect server (PySpark 4's "
            "package does): the tests over Spark Connect run on Spark 4.1"
        )
    with SparkConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


@pytest.fixture(scope="session")
def connect(spark_connect: Any) -> Iterator[Any]:
    """One Spark Connect session of the ``spark_connect`` server for the run (the classic
    ``spark`` session keeps running: the Connect builder is used directly, so this process
    stays in classic mode)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    session = RemoteSession.builder.remote(spark_connect.url).create()
    yield session
    session.stop()


@pytest.fixture(params=["classic", "connect"])
def any_session(request: pytest.FixtureRequest) -> Any:
    """The classic test session, then a Spark Connect session (skipped where PySpark carries
    no Spark Connect server): a test taking it runs on both kinds."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka broker for the run (KRaft, from its Maven artifacts)."""
    from cdcflow.testing.services.kafka import KafkaBroker

    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One PostgreSQL server for the run (Debian's packages, logical decoding on)."""
    import tempfile

    from cdcflow.testing.services.postgres import Postgres

    # outside pytest's own temporary root: another pytest session on the machine resets that
    # root to 0700, and the server's user (postgres, when run as root) must traverse to it
    root = Path(tempfile.mkdtemp(prefix="cdcflow-postgres-"))
    try:
        with Postgres(root / "data") as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Iceberg REST catalog server for the run (from Iceberg's Maven artifacts)."""
    from cdcflow.testing.services.rest import RestCatalog

    with RestCatalog(tmp_path_factory.mktemp("rest")) as server:
        yield server


#: The catalogs the scenario suite runs on: the embedded default (the session's ``cdc``),
#: Iceberg's JDBC catalog on PostgreSQL, Iceberg's REST catalog.
CATALOGS = ("cdc", "pg", "rest")


def use_catalog(request: pytest.FixtureRequest, name: str) -> str:
    """Make catalog ``name`` (one of :data:`CATALOGS`) a catalog of the test session, starting
    the server behind it the first time it is asked for; returns its name."""
    from cdcflow.spark.session import SparkSettings, catalog_conf

    spark = request.getfixturevalue("spark")
    factory = request.getfixturevalue("tmp_path_factory")
    if name == "pg":
        server = request.getfixturevalue("postgres")
        settings = SparkSettings(
            catalog_name="pg",
            catalog_uri=server.jdbc_url,
            warehouse=str(factory.mktemp("pg-warehouse")),
            catalog_options={"jdbc.user": server.user, "jdbc.password": server.password},
        )
    elif name == "rest":
        server = request.getfixturevalue("rest_catalog")
        settings = SparkSettings(
            catalog_name="rest",
            catalog_type="rest",
            catalog_uri=server.uri,
            warehouse=str(server.warehouse),
        )
    else:
        return name
    for key, value in catalog_conf(settings).items():
        spark.conf.set(key, value)
    return name


@pytest.fixture(scope="session", params=CATALOGS)
def world(
    request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The scenario world (``tests/scenario_world.py``), run once per catalog for every
    scenario test."""
    from tests.scenario_world import build

    catalog = use_catalog(request, str(request.param))
    return build(spark, tmp_path_factory.mktemp(f"scenarios-{catalog}"), catalog)
