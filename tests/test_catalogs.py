"""Catalogs other than the session's: two pipelines writing one REST catalog at the same time,
and a warehouse written by a Hadoop catalog (refused by the embedded one, then moved into
it). The scenario suite itself runs on every catalog (``world`` in ``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.cli.main import main
from cdcflow.config import load_config
from cdcflow.dialects import renderer, renderer_features
from cdcflow.errors import ConfigError
from cdcflow.iceberg.migrate import hadoop_tables, move_tables, unregistered
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.session import open_session
from cdcflow.simulation.workload import generate
from cdcflow.spark.session import SparkSettings, catalog_conf
from cdcflow.testing.compare import compare_replicas
from tests.processes import run_conf
from tests.scenario import config, ev, land, rows

pytestmark = pytest.mark.spark


@pytest.mark.services
def test_two_pipelines_write_one_rest_catalog_at_the_same_time(
    spark: Any, rest_catalog: Any, tmp_path: Path
) -> None:
    """Two ``cdcflow run`` processes, each its own Spark application, commit to one REST
    catalog at once; each pipeline's replicas equal its oracle."""
    for key, value in catalog_conf(
        SparkSettings(catalog_name="rest", catalog_type="rest", catalog_uri=rest_catalog.uri)
    ).items():
        spark.conf.set(key, value)
    runs = []
    for n, dialect in enumerate(("savegress", "debezium")):
        root = tmp_path / dialect
        w = generate(40 + n, tables=2, transactions=30, features=renderer_features(dialect))
        res = renderer(dialect)(w, root / "landing", seed=40 + n)
        doc = {
            "pipeline": f"both_{dialect}",
            "checkpoint": str(root / "checkpoint"),
            "namespace": f"both_{dialect}",
            "catalog": {"name": "rest", "type": "rest", "uri": rest_catalog.uri},
            "spark": {"master": "local[1]", "shuffle_partitions": 2, "conf": run_conf()},
            "sources": [
                {
                    "name": "s",
                    "path": str(root / "landing"),
                    "dialect": dialect,
                    "keys": {t: list(k) for t, k in res.options.table_keys.items()},
                    "types": {t: dict(c) for t, c in res.options.column_types.items()},
                    "options": dict(res.options.extra),
                    "max_files_per_batch": 1,
                }
            ],
        }
        path = root / "pipeline.yaml"
        path.write_text(yaml.safe_dump(doc))
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdcflow", "run", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        runs.append((w, doc, proc))
    for w, doc, proc in runs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err[-3000:]
        batches = [line for line in out.splitlines() if line.startswith("batch ")]
        assert len(batches) > 1, out  # several commits each, interleaved with the other's
        compare_replicas(spark, w, doc["namespace"], catalog="rest").assert_equal()


def test_a_hadoop_warehouse_is_refused_then_moved_into_the_embedded_catalog(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "warehouse"
    # what an earlier version wrote: a Hadoop catalog's tables in the warehouse folder
    for key, value in catalog_conf(
        SparkSettings(catalog_name="hadoop_old", catalog_type="hadoop", warehouse=str(old))
    ).items():
        spark.conf.set(key, value)
    land(tmp_path / "landing", [ev("INSERT", "t", 10, after={"id": 1, "v": "a"})])
    land(tmp_path / "landing", [ev("UPDATE", "t", 20, after={"id": 1, "v": "b"})])
    cfg = config(tmp_path, "moved", keys={"t": ["id"]}, catalog="hadoop_old")
    Pipeline(cfg, spark).run()
    written = {(t.namespace, t.name) for t in hadoop_tables(old)}
    assert written >= {("moved", "t"), ("moved__cdcflow", "batches")}
    # pyiceberg cannot list a Hadoop catalog: the read commands say so in one line, read
    # with Spark
    path = tmp_path / "hadoop.yaml"
    doc = cfg.model_dump(mode="json")
    doc["catalog"] = {"name": "hadoop_old", "type": "hadoop", "warehouse": str(old)}
    path.write_text(yaml.safe_dump(doc))
    assert main(["tables", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["table               rows", "hadoop_old.moved.t     1"]
    assert err.splitlines() == [
        "cdcflow: catalog 'hadoop_old': a Hadoop catalog keeps no list of its tables that "
        "pyiceberg reads; reading it with Spark"
    ]

    # the same warehouse under the embedded default: refused before a session starts
    embedded = load_config({**cfg.model_dump(), "catalog": {"name": "cdc", "warehouse": str(old)}})
    with pytest.raises(ConfigError) as e:
        open_session(embedded)
    assert e.value.code == "HADOOP_WAREHOUSE"
    assert "moved.t" in e.value.message and "cdcflow migrate-catalog" in (e.value.hint or "")

    # moved: registered in a JDBC catalog on the SQLite file inside that warehouse
    for key, value in catalog_conf(
        SparkSettings(catalog_name="moved_to", warehouse=str(old))
    ).items():
        spark.conf.set(key, value)
    said: list[str] = []
    moved = move_tables(spark, "moved_to", old, said.append)
    assert {(t.namespace, t.name) for t in moved} >= {("moved", "t"), ("moved__cdcflow", "batches")}
    assert unregistered(old, old / "catalog.db", "moved_to") == []
    assert move_tables(spark, "moved_to", old, said.append) == []  # a second run changes nothing
    assert any(line.endswith("listed already") for line in said)

    # the pipeline goes on in the new catalog where it was: the ledger came along
    after = cfg.model_copy(update={"catalog": cfg.catalog.model_copy(update={"name": "moved_to"})})
    land(tmp_path / "landing", [ev("UPDATE", "t", 30, after={"id": 1, "v": "c"})])
    reports = Pipeline(after, spark).run().reports
    assert [r.events for r in reports] == [1]
    assert [r["v"] for r in rows(spark, after, "t", "v")] == ["c"]
