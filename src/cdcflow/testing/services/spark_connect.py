"""A Spark Connect server (``org.apache.spark.sql.connect.service.SparkConnectServer``) from the
installed PySpark, with cdcflow's jars and catalog settings.

PySpark 4's package carries the server (``pyspark/jars/spark-connect_<scala>-<version>.jar``)
and ``spark-submit``; the server is submitted with the configuration a session built by
:func:`cdcflow.spark.session.build_session` gets (the Iceberg runtime, the catalog's JDBC
drivers, the Iceberg SQL extensions, UTC, workers on this Python), on a free port of the loopback
interface. Spark 3.5's package carries no server: :func:`server_jar` is then ``None``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from cdcflow.spark import jars
from cdcflow.spark.session import SparkSettings, needs, spark_conf
from cdcflow.testing.services.base import Background, Service, ServiceError, free_port

MAIN_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

#: JVM options of the server's driver: a small JVM beside the tests' own (``SMALL_JVM`` of the
#: other servers without its 512k thread stacks, which Spark's analyzer can outgrow).
DRIVER_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1"


def pyspark_home() -> Path:
    """The installed PySpark's folder (its ``bin/`` and ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def server_jar() -> Path | None:
    """The Spark Connect server's jar in the installed PySpark, or ``None`` (Spark 3.5)."""
    found = sorted((pyspark_home() / "jars").glob("spark-connect_*.jar"))
    return found[0] if found else None


def default_settings(home: Path) -> SparkSettings:
    """The test suite's session settings, with a smaller driver: two cores, two shuffle
    partitions, 1 GiB, the embedded catalog ``cdc`` in ``<home>/warehouse``."""
    return SparkSettings(
        master="local[2]",
        warehouse=str(home / "warehouse"),
        shuffle_partitions=2,
        conf={"spark.driver.memory": "1g"},
    )


def answers(port: int) -> bool:
    """Whether something accepts connections on ``port`` of 127.0.0.1."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class SparkConnectServer(Service):
    """One Spark Connect server with its own folder (``home``): the warehouse of its
    catalog, its output (``stdout.log``) and state."""

    def __init__(self, home: Path, settings: SparkSettings | None = None) -> None:
        self.home = home.resolve()
        self.settings = settings or default_settings(self.home)
        self.process = Background(self.home, b"SparkConnectServer")

    @property
    def url(self) -> str:
        """The server's address for ``SparkSession.builder.remote``: ``sc://127.0.0.1:<port>``."""
        port = self.process.state.get("port")
        if not port or self.process.pid is None:
            raise ServiceError(f"the Spark Connect server in {self.home} is not running")
        return f"sc://127.0.0.1:{port}"

    def command(self, port: int) -> list[str]:
        """The ``spark-submit`` command line of the server on ``port``."""
        import pyspark

        if server_jar() is None:
            raise ServiceError(
                f"PySpark {pyspark.__version__} carries no Spark Connect server (no "
                f"spark-connect jar in {pyspark_home() / 'jars'}): it comes with PySpark 4"
            )
        files = jars.session_jars(needs(self.settings, pyspark.__version__))
        conf = spark_conf(self.settings, jar_files=files)
        conf["spark.master"] = self.settings.master
        conf["spark.app.name"] = f"{self.settings.app_name} (Spark Connect)"
        conf["spark.driver.extraJavaOptions"] = DRIVER_JAVA_OPTIONS
        conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
        conf["spark.connect.grpc.binding.port"] = str(port)
        # the port asked for or a failed start, never another port
        conf["spark.connect.grpc.port.maxRetries"] = "0"
        cmd = [str(pyspark_home() / "bin" / "spark-submit"), "--class", MAIN_CLASS]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, "--name", conf["spark.app.name"]]

    def start(self, timeout: float = 180.0) -> str:
        """Start the server and wait until it accepts connections; returns :attr:`url`."""
        self.home.mkdir(parents=True, exist_ok=True)
        Path(self.settings.warehouse).mkdir(parents=True, exist_ok=True)
        port = free_port()
        cmd = self.command(port)
        env = {
            **os.environ,
            "SPARK_HOME": str(pyspark_home()),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        self.process.record(port=port)
        started = time.monotonic()
        self.process.spawn(
            cmd, lambda: answers(port), env=env, timeout=timeout, what="the Spark Connect server"
        )
        self.process.record(start_seconds=round(time.monotonic() - started, 2))
        return self.url

    def stop(self) -> str:
        """Stop the server (SIGTERM: Spark stops its context; SIGKILL after 30 s)."""
        return self.process.stop(grace=30)
