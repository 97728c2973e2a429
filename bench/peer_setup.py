"""The peer's own install for ``python -m bench peer``: PyFlink (``apache-flink`` bundles Flink)
in a venv of its own, and the jars its job needs in that Flink's ``lib`` folder — Iceberg's
Flink runtime, Flink's Kafka SQL connector, the SQLite JDBC driver of the embedded catalog and
Hadoop's client (Iceberg's Flink catalogs load Hadoop's ``Configuration``) — resolved with
``mvn`` by their Maven coordinates. Nothing of it enters cdcflow's dependencies: PyFlink 2.0
pins numpy 2.1, pyarrow 16, protobuf 5 and grpcio 1.65, below cdcflow's pins.

``python -m bench.peer_setup`` installs it (a few minutes the first time, then cached under
``~/.cache/cdcflow/peer``) and prints the interpreter's path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The Flink line and the releases that resolve together on it.
FLINK = "2.0.2"
ICEBERG = "1.11.0"
KAFKA_CONNECTOR = "4.0.1-2.0"
HADOOP = "3.4.1"
#: cdcflow's own SQLite driver release (``cdcflow.spark.jars.SQLITE_JDBC``).
SQLITE = "3.54.1.0"

ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.iceberg", "iceberg-flink-runtime-2.0", ICEBERG),
    ("org.apache.flink", "flink-sql-connector-kafka", KAFKA_CONNECTOR),
    ("org.xerial", "sqlite-jdbc", SQLITE),
    ("org.apache.hadoop", "hadoop-client-api", HADOOP),
    ("org.apache.hadoop", "hadoop-client-runtime", HADOOP),
)


class PeerUnavailable(RuntimeError):
    """The peer could not be installed here (the reason says why)."""


def pom() -> str:
    """A POM naming each jar without its dependencies: the runtimes and connectors are shaded
    jars, and Flink's own classes come from PyFlink."""
    deps = "".join(
        f"""
    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>
      </exclusions></dependency>"""
        for g, a, v in ARTIFACTS
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcflow.bench</groupId><artifactId>flink-peer</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>{deps}
  </dependencies>
</project>
"""


def home() -> Path:
    """Where the peer is installed: one folder per set of versions."""
    key = hashlib.sha256(f"{FLINK} {pom()}".encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "cdcflow" / "peer" / f"flink-{FLINK}-{key}"


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerUnavailable(f"{what} failed: {(done.stderr or done.stdout)[-1500:]}")


def install() -> Path:
    """The peer's interpreter, installing it first when missing; :class:`PeerUnavailable`
    when it cannot be (no Python 3.11 to make the venv, pip or mvn refused)."""
    folder = home()
    python = folder / "venv" / "bin" / "python"
    if (folder / ".installed").exists():
        return python
    base = shutil.which("python3.11") or (
        sys.executable if sys.version_info[:2] == (3, 11) else None
    )
    if base is None:
        raise PeerUnavailable("no python3.11 to make PyFlink's venv with")
    folder.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        _run([base, "-m", "venv", str(folder / "venv")], "making the peer's venv")
    _run([str(python), "-m", "pip", "install", "-q", f"apache-flink=={FLINK}"], "pip install")
    from cdcflow.testing.services.base import ServiceError, maven_jars

    try:
        jars = maven_jars("flink-peer", pom())
    except ServiceError as e:
        raise PeerUnavailable(str(e)) from e
    found = subprocess.run(
        [str(python), "-c", "import pyflink, os; print(os.path.dirname(pyflink.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    )
    lib = Path(found.stdout.strip()) / "lib"
    for jar in sorted(jars.glob("*.jar")):
        target = lib / jar.name
        if not target.exists():
            os.symlink(jar, target)
    (folder / ".installed").write_text(FLINK + "\n")
    return python


if __name__ == "__main__":
    try:
        print(install())
    except PeerUnavailable as e:
        print(f"peer: {e}", file=sys.stderr)
        sys.exit(1)
