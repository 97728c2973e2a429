"""Shared fixtures: one SparkSession for the whole run (UTC, small shuffle partitions)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

# The suite draws the same examples on every run, so it fails for a change and never for a
# draw; ``make fuzz`` (CDCFLOW_HYPOTHESIS=explore) draws new ones on every run.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("CDCFLOW_HYPOTHESIS", "suite"))


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
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenario world (``tests/scenario_world.py``), run once for every scenario test."""
    from tests.scenario_world import build

    return build(spark, tmp_path_factory.mktemp("scenarios"))
