"""The pipeline beyond one JVM: ``cdcflow run`` on Spark's ``local-cluster`` master, where
decoding runs in the Python workers of two executor JVMs and the MERGE writes there too; the
replicas equal the oracle and the batch is in the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.testing import oracle
from cdcflow.testing.compare import diff_table, read_replica
from cdcflow.testing.renderers import renderer, renderer_features
from cdcflow.testing.workload import generate
from tests.processes import SHORT_RUN_CONF

pytestmark = [pytest.mark.spark, pytest.mark.services]

#: Two workers of one core and 1 GiB each, every one with its own executor JVM.
MASTER = "local-cluster[2,1,1024]"
_QUICK_JVM = SHORT_RUN_CONF["spark.driver.extraJavaOptions"]
#: Short-lived, small JVMs (driver and executors), and an event log to see where tasks ran.
CLUSTER_CONF: dict[str, str] = {
    **SHORT_RUN_CONF,
    "spark.executor.extraJavaOptions": _QUICK_JVM,
    "spark.driver.memory": "1g",
    "spark.executor.memory": "512m",
    "spark.eventLog.enabled": "true",
    # one plain JSON-lines file (Spark 4 rolls and compresses event logs by default)
    "spark.eventLog.rolling.enabled": "false",
    "spark.eventLog.compress": "false",
}


def _spark_home(root: Path) -> Path:
    """A Spark home for the cluster: links to the installed PySpark's folders (executors start
    from its jars, Python workers from its python/lib), so that the folders the workers keep
    per application (``work/``) land under ``root`` rather than inside the package."""
    import pyspark

    package = Path(pyspark.__file__).parent
    home = root / "spark-home"
    home.mkdir()
    for name in ("bin", "jars", "python"):
        (home / name).symlink_to(package / name)
    return home


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
    config = tmp_path / "pipeline.yaml"
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config.write_text(
        yaml.safe_dump(
            {
                "pipeline": namespace,
                "checkpoint": str(tmp_path / "checkpoint"),
                "namespace": namespace,
                "catalog": {"name": "cdc", "warehouse": warehouse},
                "spark": {
                    "master": MASTER,
                    "shuffle_partitions": 2,
                    "conf": {**CLUSTER_CONF, "spark.eventLog.dir": str(events)},
                },
                "sources": [source],
            }
        )
    )
    # the executors inherit this environment (PYTHONPATH: their Python workers import this
    # cdcflow; the session sets PYSPARK_PYTHON to this interpreter)
    env = {**os.environ, "SPARK_HOME": str(_spark_home(tmp_path))}
    proc = subprocess.run(
        [sys.executable, "-m", "cdcflow", "run", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith("done:"), proc.stdout

    expected = oracle.apply(w)
    for name, table in w.tables.items():
        cols = list(table.columns)
        actual = read_replica(spark, f"cdc.{namespace}.{name}", cols)
        d = diff_table(name, list(expected[name].values()), actual, cols)
        assert d.equal, f"{name}: missing {d.missing[:3]} unexpected {d.unexpected[:3]}"
    # the ledger: the batch in the history
    hist = spark.sql(f"SELECT batch_id, events FROM cdc.{namespace}__cdcflow.batches").collect()
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
