"""The pipeline beyond one JVM: ``spark-submit`` of ``cdcflow run`` onto Spark's
``local-cluster`` master through ``scripts/cluster-submit.sh`` (what ``make cluster-demo`` runs),
where decoding runs in the Python workers of two executor JVMs that import cdcflow from the zip
given with ``--py-files``, and the MERGE writes there too; the replicas equal the oracle and the
batch is in the ledger. The jars are the pipeline's own, from a jar cache and a Maven repository
that lack Spark's Kafka connector: a pipeline without Kafka does not need it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.dialects import renderer, renderer_features
from cdcflow.simulation.workload import generate
from cdcflow.spark.session import SparkSettings, attach_catalog
from cdcflow.testing.compare import compare_replicas
from tests.processes import SHORT_RUN_CONF

pytestmark = [pytest.mark.spark, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[1]
#: The master scripts/cluster-submit.sh submits to: two workers of one core and 1 GiB each,
#: every one with its own executor JVM.
MASTER = "local-cluster[2,1,1024]"
_QUICK_JVM = SHORT_RUN_CONF["spark.driver.extraJavaOptions"]
#: Short-lived, small JVMs (driver and executors), and an event log to see where tasks ran.
CLUSTER_CONF: dict[str, str] = {
    **SHORT_RUN_CONF,
    "spark.executor.extraJavaOptions": _QUICK_JVM,
    "spark.driver.memory": "1g",
    "spark.eventLog.enabled": "true",
    # one plain JSON-lines file (Spark 4 rolls and compresses event logs by default)
    "spark.eventLog.rolling.enabled": "false",
    "spark.eventLog.compress": "false",
}


def _executors_python(root: Path) -> Path:
    """The executors' Python: a venv that reaches this environment's libraries but not
    cdcflow (an editable install is a path in a ``.pth`` file, which a folder added by another
    ``.pth`` file does not read), so the executors import cdcflow from the zip alone."""
    env = root / "executors"
    venv.create(env, with_pip=False, symlinks=True)
    [site] = (env / "lib").glob("python3*/site-packages")
    (site / "libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = env / "bin" / "python"
    alone = subprocess.run([python, "-c", "import pyarrow, cdcflow"], capture_output=True)
    assert b"No module named 'cdcflow'" in alone.stderr, alone.stderr
    return python


def _cdcflow_zip(root: Path) -> Path:
    """cdcflow as ``--py-files`` takes it: a zip of the package."""
    import cdcflow

    package = Path(cdcflow.__file__).parent
    archive = root / "cdcflow.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(package.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f.relative_to(package.parent).as_posix())
    return archive


def _without_kafka(root: Path, config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """An environment whose jar cache holds the jars of ``config``'s session (taken from the
    usual cache, fetched there when missing) and whose Maven repository is an empty folder:
    nothing else, Spark's Kafka connector included, can be resolved in it; and those jars."""
    import pyspark

    from cdcflow.config import load_config
    from cdcflow.pipeline.session import spark_settings
    from cdcflow.spark import jars
    from cdcflow.spark.session import needs

    wanted = needs(spark_settings(load_config(config)), pyspark.__version__)
    usual = jars.JarCache(jars.cache_root())
    cache = jars.JarCache(root / "jar-cache")
    held: list[str] = []
    for need, files in jars.fetch(wanted, usual).items():
        assert isinstance(files, list), files
        cache.record(need.coordinates, files)
        held += files
    (root / "empty-repository").mkdir()
    env = {jars.CACHE_ENV: str(cache.root), jars.REPOSITORY_ENV: str(root / "empty-repository")}
    return env, held


def _events(log_dir: Path) -> Iterator[dict[str, Any]]:
    (log,) = log_dir.iterdir()  # one application
    with log.open() as f:
        for line in f:
            yield json.loads(line)


def _accumulated(task_end: dict[str, Any], name: str) -> int:
    return sum(
        int(a.get("Update", 0))
        for a in task_end["Task Info"]["Accumulables"]
        if a.get("Name") == name
    )


def test_local_cluster_run_equals_the_oracle(spark: Any, tmp_path: Path) -> None:
    # the unified format: DDL, truncates, transaction markers, duplicates, reordering
    w = generate(21, tables=2, transactions=40, features=renderer_features("savegress"))
    landing = tmp_path / "landing"
    res = renderer("savegress")(w, landing, seed=21)
    source = {
        "name": "s",
        "path": str(landing),
        "dialect": "savegress",
        "keys": {t: list(k) for t, k in res.options.table_keys.items()},
        "types": {t: dict(c) for t, c in res.options.column_types.items()},
        "options": dict(res.options.extra),
    }
    events = tmp_path / "events"
    events.mkdir()
    namespace = "cluster"
    # a warehouse of its own that does not exist yet: the submitted driver creates the folder
    # of the embedded catalog's file (read here through a catalog of the same name)
    warehouse = str(tmp_path / "warehouse")
    cfg = {
        "pipeline": namespace,
        "checkpoint": str(tmp_path / "checkpoint"),
        "namespace": namespace,
        "catalog": {"name": "cluster", "warehouse": warehouse},
        "spark": {"shuffle_partitions": 2},
        "sources": [source],
    }
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(cfg))
    without, held = _without_kafka(tmp_path, cfg)
    assert not any("kafka" in j for j in held)
    env = {**os.environ, **without}
    # there, Spark's Kafka connector cannot be resolved, and this pipeline runs: its jars, given
    # to spark-submit (as set -x shows), are the Iceberg runtime and the SQLite driver
    conf = [
        f"--conf={k}={v}" for k, v in {**CLUSTER_CONF, "spark.eventLog.dir": str(events)}.items()
    ]
    proc = subprocess.run(
        [
            str(ROOT / "scripts" / "cluster-submit.sh"),
            str(tmp_path),
            sys.prefix,
            str(_executors_python(tmp_path)),
            str(_cdcflow_zip(tmp_path)),
            str(config),
            *conf,
            "--",
            "run",
            str(config),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith("done:"), proc.stdout
    given = re.search(r" --jars (\S+) ", proc.stderr)
    assert given is not None and given[1].split(",") == held, proc.stderr[-3000:]

    assert not attach_catalog(spark, SparkSettings(catalog_name="cluster", warehouse=warehouse))
    compare_replicas(spark, w, namespace, catalog="cluster").assert_equal()
    # the ledger: the batch in the history
    hist = spark.sql(f"SELECT batch_id, events FROM cluster.{namespace}__cdcflow.batches").collect()
    assert [r["batch_id"] for r in hist] == [0] and hist[0]["events"] > 0

    # Where the work ran: the application's own record of it.
    masters, executors, tasks = [], set(), []
    for e in _events(events):
        if e["Event"] == "SparkListenerEnvironmentUpdate":
            masters.append(e["Spark Properties"]["spark.master"])
        elif e["Event"] == "SparkListenerExecutorAdded":
            executors.add(e["Executor ID"])
        elif e["Event"] == "SparkListenerTaskEnd":
            tasks.append(e)
    assert masters == [MASTER]
    assert executors and "driver" not in executors
    assert tasks and {t["Task Info"]["Executor ID"] for t in tasks} <= executors
    decoded = [t for t in tasks if _accumulated(t, "data returned from Python workers") > 0]
    written = [t for t in tasks if _accumulated(t, "internal.metrics.output.recordsWritten") > 0]
    assert decoded, "no task returned rows from a Python worker"
    assert written, "no task wrote table files"
