"""cdcflow's functions in Spark's Python workers: the importers of Spark's own archives keep
what they read (no re-read of ``pyspark.zip`` and the ``spark-core`` jar before every task);
any other archive is read again as before."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark

from cdcflow.spark.worker import InWorker, map_in_arrow, spark_archive

if TYPE_CHECKING:
    import pyarrow as pa

LIB = Path(pyspark.__file__).parent / "python" / "lib"

_PROBE = """
import importlib, json, sys, time, zipimport
import pyspark, pyspark.sql, py4j, user_module
reads = []
original = zipimport._read_directory
def counting(archive):
    reads.append(archive)
    return original(archive)
zipimport._read_directory = counting
def reread():
    reads.clear()
    importlib.invalidate_caches()
    return sorted(set(reads))
before = reread()
from cdcflow.spark.worker import steady_imports
steady_imports()
steady_imports()
after = reread()
json.dump({"before": before, "after": after}, sys.stdout)
"""


def test_spark_archives_are_not_read_again_other_archives_are(tmp_path: Path) -> None:
    """A Python process that imports PySpark and py4j from Spark's zips and a module from a zip
    of its own (as an ``addPyFile`` zip is): before, ``importlib.invalidate_caches()`` reads
    every archive's directory again; after :func:`steady_imports`, only the user's."""
    pyspark_zip = next(LIB.glob("pyspark.zip"), None)
    py4j_zip = next(LIB.glob("py4j-*.zip"), None)
    assert pyspark_zip is not None and py4j_zip is not None, f"no Spark archives in {LIB}"
    user = tmp_path / "user.zip"
    with zipfile.ZipFile(user, "w") as z:
        z.writestr("user_module.py", "VALUE = 1\n")
    src = Path(__file__).parent.parent / "src"
    path = ":".join(str(p) for p in (pyspark_zip, py4j_zip, user, src))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found["before"]) == {str(pyspark_zip), str(py4j_zip), str(user)}
    assert found["after"] == [str(user)]


def test_which_archives_are_sparks() -> None:
    for path in (
        "/opt/spark/python/lib/pyspark.zip",
        "/x/python/lib/py4j-0.10.9.9-src.zip",
        "/x/jars/spark-core_2.13-4.1.1.jar",
        "/x/jars/spark-core_2.12-3.5.7.jar",
    ):
        assert spark_archive(path), path
    for path in ("/tmp/spark-files/deps.zip", "/x/pyspark-extras.zip", "/x/py4j.txt"):
        assert not spark_archive(path), path


def _worker_state(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """What a task sees in its worker: Spark archives among its importers, and which archives
    ``importlib.invalidate_caches()`` reads again."""
    import importlib
    import os
    import zipimport

    import pyarrow as pa

    reads: list[str] = []
    original: Any = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(archive: str) -> Any:
        reads.append(archive)
        return original(archive)

    zipimport._read_directory = counting  # type: ignore[attr-defined]
    try:
        importlib.invalidate_caches()
    finally:
        zipimport._read_directory = original  # type: ignore[attr-defined]
    held = sorted(
        {
            str(v.archive)
            for v in list(sys.path_importer_cache.values())
            if isinstance(v, zipimport.zipimporter) and spark_archive(str(v.archive))
        }
    )
    for batch in batches:
        yield pa.RecordBatch.from_pydict(
            {
                "pid": [os.getpid()] * batch.num_rows,
                "held": [json.dumps(held)] * batch.num_rows,
                "reread": [json.dumps(sorted(set(reads)))] * batch.num_rows,
            }
        )


def test_a_task_in_a_spark_worker_reads_no_spark_archive_again(spark: Any) -> None:
    """Tasks of a real Spark job (Spark's own workers, several tasks each): the workers import
    from Spark's archives, and a task run through :func:`map_in_arrow` makes no
    ``invalidate_caches`` read them again."""
    df = spark.range(0, 64, 1, 16)
    rows = map_in_arrow(df, _worker_state, "pid long, held string, reread string").collect()
    held = {a for r in rows for a in json.loads(r["held"])}
    assert any(Path(a).name == "pyspark.zip" for a in held), held
    assert all(json.loads(r["reread"]) == [] for r in rows), [r["reread"] for r in rows]


def test_in_worker_pickles_and_calls_through() -> None:
    import pyarrow as pa
    from pyspark import cloudpickle

    def double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield pa.RecordBatch.from_pydict({"x": [v * 2 for v in b.column(0).to_pylist()]})

    fn = cloudpickle.loads(cloudpickle.dumps(InWorker(double)))
    out = list(fn([pa.RecordBatch.from_pydict({"x": [1, 2]})]))
    assert out[0].column(0).to_pylist() == [2, 4]
