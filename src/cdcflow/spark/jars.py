"""The jars a session needs, by their official Maven coordinates, resolved once and cached.

The Iceberg Spark runtime that matches the running PySpark, Spark's Kafka connector and the
JDBC drivers of the catalogs cdcflow runs on are named by their coordinates (:func:`required`).
When cdcflow's cache folder (:func:`cache_root`) lacks a set of them, Spark's own resolver (Ivy,
``spark.jars.packages``) fetches them from Maven Central into it, in a child process
(:mod:`cdcflow.spark.resolve`), and the files are recorded there; sessions load the recorded
files (``spark.jars``), so a run needs no network after the first. ``cdcflow jars --fetch`` (run
by ``make setup``) resolves ahead of time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from cdcflow.errors import EnvironmentProblem

#: The Iceberg release whose Spark runtime cdcflow runs with (see docs/deploy.md for why).
ICEBERG_VERSION = "1.12.0"
#: Spark lines cdcflow runs on → the Scala binary version of PySpark's build of that line.
SCALA: dict[str, str] = {"3.5": "2.12", "4.1": "2.13"}
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"
POSTGRESQL_JDBC = "org.postgresql:postgresql:42.7.14"
#: Environment variable naming the cache folder.
CACHE_ENV = "CDCFLOW_JAR_CACHE"


def spark_line(version: str) -> str:
    """The line (``major.minor``) of a Spark version, which must be one cdcflow runs on."""
    line = ".".join(version.split(".")[:2])
    if line not in SCALA:
        raise EnvironmentProblem(
            f"PySpark {version} is not supported: cdcflow runs on Spark "
            f"{' and '.join(sorted(SCALA))} (the lines an Iceberg {ICEBERG_VERSION} Spark runtime "
            "exists for). Install one of them, e.g. `pip install 'pyspark[sql]>=4.1,<4.2'`.",
            code="SPARK_UNSUPPORTED",
        )
    return line


def iceberg_runtime(spark_version: str) -> str:
    """Coordinates of the Iceberg Spark runtime for a Spark version."""
    line = spark_line(spark_version)
    return f"org.apache.iceberg:iceberg-spark-runtime-{line}_{SCALA[line]}:{ICEBERG_VERSION}"


def kafka_connector(spark_version: str) -> str:
    """Coordinates of Spark's Kafka connector built for exactly this Spark version."""
    line = spark_line(spark_version)
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA[line]}:{spark_version}"


def required(
    spark_version: str, *, iceberg: bool = True, extra: Iterable[str] = ()
) -> tuple[str, ...]:
    """The coordinates a session cdcflow starts loads: the Iceberg runtime of the Spark line
    (unless the Iceberg runtime is given otherwise), the JDBC drivers of the catalogs cdcflow
    runs on (SQLite for the embedded one, PostgreSQL), Spark's Kafka connector, and ``extra``.
    Always the same set for a Spark version, so one resolution serves every pipeline."""
    out = [iceberg_runtime(spark_version)] if iceberg else []
    out += [SQLITE_JDBC, POSTGRESQL_JDBC, kafka_connector(spark_version), *extra]
    return tuple(dict.fromkeys(out))


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The folder cdcflow resolves jars into: ``$CDCFLOW_JAR_CACHE``, else
    ``$XDG_CACHE_HOME/cdcflow/jars``, else ``~/.cache/cdcflow/jars``."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdcflow" / "jars"


@dataclass(frozen=True)
class JarCache:
    """Resolved jar sets under one folder: Spark's resolver works in ``ivy/``, and
    ``resolved/<digest>.json`` records the files each set of coordinates resolved to."""

    root: Path

    @property
    def ivy(self) -> Path:
        """The folder given to Spark as ``spark.jars.ivy``."""
        return self.root / "ivy"

    def _manifest(self, coordinates: Sequence[str]) -> Path:
        digest = hashlib.sha256("\n".join(sorted(coordinates)).encode()).hexdigest()[:24]
        return self.root / "resolved" / f"{digest}.json"

    def lookup(self, coordinates: Sequence[str]) -> list[str] | None:
        """The jar files a set of coordinates resolved to, when every one is still there."""
        path = self._manifest(coordinates)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        jars = data.get("jars") if isinstance(data, dict) else None
        if not isinstance(jars, list) or not jars:
            return None
        if sorted(data.get("coordinates", [])) != sorted(coordinates):
            return None
        if not all(isinstance(j, str) and Path(j).is_file() for j in jars):
            return None
        return jars

    def record(self, coordinates: Sequence[str], jars: Sequence[str]) -> None:
        """Remember what a set of coordinates resolved to (written atomically)."""
        path = self._manifest(coordinates)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"coordinates": sorted(coordinates), "jars": list(jars)}))
        tmp.replace(path)


def local_paths(spark_jars: str, ivy: Path) -> list[str]:
    """The local files of a session's ``spark.jars`` that Spark's resolver put under ``ivy``
    (``file:`` URIs or plain paths, comma-separated)."""
    out: list[str] = []
    root = ivy.resolve()
    for item in (s.strip() for s in spark_jars.split(",")):
        if not item:
            continue
        parsed = urlparse(item)
        path = Path(unquote(parsed.path)) if parsed.scheme in ("file", "") else None
        if path is not None and path.resolve().is_relative_to(root):
            out.append(str(path.resolve()))
    return out


def unresolved(
    coordinates: Sequence[str], cache: JarCache, reasons: Sequence[str] = ()
) -> EnvironmentProblem:
    """The error of a set of jars that could not be resolved (``reasons``: what Spark's
    resolver said)."""
    said = f" ({'; '.join(reasons)})" if reasons else ""
    return EnvironmentProblem(
        "could not resolve " + ", ".join(coordinates) + f"{said}: the cache {cache.root} does "
        "not hold them and Spark's resolver could not fetch them. With access to Maven Central, "
        "run `cdcflow jars --fetch` once; offline, copy a cache folder from a machine that has one "
        f"and point {CACHE_ENV} at it, or give local jar files with spark.iceberg_jar and "
        "spark.conf spark.jars.",
        code="JAR_UNRESOLVED",
    )
