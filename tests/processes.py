"""Settings for the short-lived ``cdcflow`` processes that tests start (crashes, signals).

Such a process spends most of its life starting a JVM and loading Spark's and Iceberg's
classes. A test session keeps those classes in a class-data-sharing archive (the JVM's
``-XX:SharedArchiveFile``), made once by ``python -m tests.processes ARCHIVE`` the first time a
test asks for :func:`run_conf`: a process starts 3.5–4 s sooner with it (measured: 8.5 s →
4.9 s for a run over an empty landing zone, 39.6/37.5 s → 35.3/33.8 s for a four-batch run
with maintenance). The archive's path is in :data:`ARCHIVE_ENV`
(set by ``conftest.py`` for the session); without it, or when it could not be made, processes
start without one. When a test module of the session configures such processes
(:func:`pipeline_config`, :func:`run_conf`), the archive is started as the session starts
(:func:`make_archive_in_background`, from ``conftest.py``) and made beside the first tests: the
first test that needs it waits for what is left of it, not for all of it (measured on a slow
machine: the first crash test of the suite 155 s → 52 s, the test before it slower by the
overlap).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

#: A driver JVM tuned for a short life: the quick (C1) compiler only and a serial collector
#: start a pipeline process about a third faster; long-running pipelines should not copy it.
#: The C1-only JVM reserves 48 MB for compiled code by default, which a pipeline process of a
#: few batches can fill (the JVM then stops compiling and crawls): it gets the usual 240 MB.
SHORT_RUN_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
    ),
}
#: Environment variable naming the test session's class-data-sharing archive.
ARCHIVE_ENV = "CDCFLOW_TEST_JVM_ARCHIVE"


#: The process making the session's archive, when one was started and not waited for yet.
_MAKING: subprocess.Popen[bytes] | None = None


def _start_making(path: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m tests.processes ARCHIVE`` (its output in ``ARCHIVE.log``)."""
    with path.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.processes", str(path)],
            cwd=Path(__file__).resolve().parents[1],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def make_archive_in_background() -> None:
    """Start making the session's archive (when it has a path and none is made or being
    made); :func:`run_conf` waits for it."""
    global _MAKING
    archive = os.environ.get(ARCHIVE_ENV)
    if not archive or _MAKING is not None or Path(archive).exists():
        return
    _MAKING = _start_making(Path(archive))


def stop_making() -> None:
    """Stop an archive still being made (the session ends before any test needed it)."""
    global _MAKING
    if _MAKING is not None and _MAKING.poll() is None:
        os.killpg(_MAKING.pid, signal.SIGKILL)
        _MAKING.wait(timeout=60)
    _MAKING = None


def _made(path: Path) -> None:
    """Wait for the archive being made (started now when it is not), for up to 10 minutes;
    record why it could not be made in ``ARCHIVE.failed``."""
    global _MAKING
    proc = _MAKING if _MAKING is not None else _start_making(path)
    _MAKING = None
    try:
        status = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        status = proc.wait(timeout=60)
    if status != 0 or not path.exists():
        path.with_suffix(".failed").write_bytes(path.with_suffix(".log").read_bytes()[-4000:])


def run_conf(make: bool = True) -> dict[str, str]:
    """:data:`SHORT_RUN_CONF` with the session's class archive, made first when missing and
    ``make`` (see the module's text)."""
    archive = os.environ.get(ARCHIVE_ENV)
    if not archive:
        return dict(SHORT_RUN_CONF)
    path = Path(archive)
    if make and not path.exists() and not path.with_suffix(".failed").exists():
        _made(path)
    if not path.exists():
        return dict(SHORT_RUN_CONF)
    options = SHORT_RUN_CONF["spark.driver.extraJavaOptions"]
    # a JVM that cannot use the archive (another Java, another class path) runs without it
    return {
        "spark.driver.extraJavaOptions": f"{options} -XX:SharedArchiveFile={path} -Xlog:cds*=off"
    }


def _make_archive(path: Path) -> None:
    """Run a small pipeline (decode, merge, dead letters, a maintenance round) in a JVM that
    writes the classes it loaded to ``path`` as it exits, and wait for that JVM to exit."""
    import tempfile

    from pyspark import SparkContext

    from cdcflow.config import load_config_file
    from cdcflow.dialects.savegress.render import render_to_landing
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.simulation.workload import generate
    from cdcflow.spark.session import SparkSettings, build_session

    os.environ.pop(ARCHIVE_ENV, None)  # this process makes it
    partial = path.with_suffix(".partial")
    with tempfile.TemporaryDirectory(prefix="cdcflow-archive-") as tmp:
        root = Path(tmp)
        w = generate(1, tables=2, transactions=20)
        res = render_to_landing(w, root / "landing", seed=1, files=2)
        (root / "landing" / "bad.jsonl").write_bytes(b"not json\n")
        policy = {"every_batches": 1, "rewrite_delete_files": 1, "rewrite_data_files": 2}
        config = pipeline_config(
            root, str(root / "warehouse"), res.options, namespace="archive", maintenance=policy
        )
        options = SHORT_RUN_CONF["spark.driver.extraJavaOptions"]
        conf = {"spark.driver.extraJavaOptions": f"{options} -XX:ArchiveClassesAtExit={partial}"}
        spark = build_session(
            SparkSettings(
                master="local[2]",
                warehouse=str(root / "warehouse"),
                shuffle_partitions=2,
                conf=conf,
            )
        )
        Pipeline(load_config_file(config), spark).run()
        gateway = SparkContext._gateway
        spark.stop()
        assert gateway is not None
        # the JVM exits when its standard input closes, writing the archive on the way
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=300)
    partial.rename(path)


def pipeline_config(
    root: Path,
    warehouse: str,
    options: Any,
    namespace: str = "crash",
    dialect: str = "savegress",
    files_per_batch: int | None = 1,
    kafka: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """``root/pipeline.yaml`` for one source over ``root/landing`` (or the Kafka topics of
    ``kafka``, the source's ``kafka:`` section) with the decoder options a renderer gave (keys,
    types, options), on the test session's warehouse."""
    source: dict[str, Any] = {
        "name": "s",
        **({"kafka": kafka} if kafka else {"path": str(root / "landing")}),
        "dialect": dialect,
        "keys": {t: list(k) for t, k in options.table_keys.items()},
        "types": {t: dict(c) for t, c in options.column_types.items()},
        "options": dict(options.extra),
    }
    if files_per_batch is not None and not kafka:
        source["max_files_per_batch"] = files_per_batch
    cfg = {
        "pipeline": namespace,
        "checkpoint": str(root / "checkpoint"),
        "namespace": namespace,
        "catalog": {"name": "cdc", "warehouse": warehouse},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": run_conf()},
        "sources": [source],
        **extra,
    }
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


if __name__ == "__main__":
    _make_archive(Path(sys.argv[1]))
