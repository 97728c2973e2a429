"""The jars a session needs, by their official Maven coordinates, resolved once and cached.

A session loads Iceberg's Spark runtime of the running PySpark's line, the JDBC driver of its
catalog (SQLite for the embedded one, PostgreSQL for a JDBC catalog there) and, when a source or
an output uses Kafka, Spark's Kafka connector of the running Spark version (:func:`needs`). Each
of them is a :class:`Need`, resolved on its own with its dependencies, so one that cannot be had
names itself and stops only the sessions that need it. When cdcflow's cache folder
(:func:`cache_root`) lacks one, Spark's own resolver (Ivy, ``spark.jars.packages``) fetches it
from Maven Central (or ``$CDCFLOW_MAVEN_REPOSITORY``) into it, in a child process
(:mod:`cdcflow.spark.resolve`), under a lock on the folder (two processes filling one cache
would break each other's downloads), and the files are recorded there; sessions load the
recorded files (``spark.jars``), so a run needs no network after the first. ``cdcflow jars
--fetch`` (run by ``make setup``) resolves all of them ahead of time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse, urlsplit

from cdcflow.errors import EnvironmentProblem

#: The Iceberg release whose Spark runtime cdcflow runs with (see docs/deploy.md for why).
ICEBERG_VERSION = "1.12.0"
#: Spark lines cdcflow runs on → the Scala binary version of PySpark's build of that line.
SCALA: dict[str, str] = {"3.5": "2.12", "4.1": "2.13"}
#: The PySpark release of each line that CI runs on (constraints*.txt): its jars, Spark's Kafka
#: connector included, resolve from the Maven repository CI reaches.
TESTED_PYSPARK: dict[str, str] = {"3.5": "3.5.7", "4.1": "4.1.1"}
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"
POSTGRESQL_JDBC = "org.postgresql:postgresql:42.7.14"
#: Environment variable naming the cache folder.
CACHE_ENV = "CDCFLOW_JAR_CACHE"
#: Environment variable naming a Maven repository (URL or folder) to resolve from instead of
#: Maven Central: a mirror, or a repository manager of one's own.
REPOSITORY_ENV = "CDCFLOW_MAVEN_REPOSITORY"
#: The artifact name of Spark's Kafka connector (before its Scala suffix).
KAFKA_ARTIFACT = "spark-sql-kafka-0-10"

#: Whether a session loads Spark's Kafka connector: ``required`` (a Kafka source or output),
#: ``optional`` (when it resolves: DataFrames given through the Python API may come from Spark's
#: Kafka source), ``none``.
KafkaUse = Literal["required", "optional", "none"]

_log = logging.getLogger("cdcflow")


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
    return f"org.apache.spark:{KAFKA_ARTIFACT}_{SCALA[line]}:{spark_version}"


@dataclass(frozen=True)
class Need:
    """Jars a session loads, resolved together with their dependencies and apart from the
    others: ``label`` says what they are for, ``advice`` what to do when they cannot be
    resolved (besides a mirror or a copied cache). One that is not ``required`` is loaded when
    it resolves, and the session starts without it (said) when not."""

    label: str
    coordinates: tuple[str, ...]
    required: bool = True
    advice: str = ""


def iceberg_need(spark_version: str) -> Need:
    """Iceberg's Spark runtime of the running Spark line."""
    return Need(
        "Iceberg's Spark runtime",
        (iceberg_runtime(spark_version),),
        advice="give a local iceberg-spark-runtime jar of the same Spark line with "
        "spark.iceberg_jar",
    )


SQLITE_NEED = Need(
    "the SQLite JDBC driver (the embedded catalog)",
    (SQLITE_JDBC,),
    advice="give a local sqlite-jdbc jar with spark.conf spark.jars",
)
POSTGRESQL_NEED = Need(
    "the PostgreSQL JDBC driver (JDBC catalogs on PostgreSQL)",
    (POSTGRESQL_JDBC,),
    advice="give a local postgresql jar with spark.conf spark.jars",
)

#: The JDBC drivers cdcflow loads, by the prefix of the catalog URIs they serve.
DRIVERS: dict[str, Need] = {"jdbc:sqlite:": SQLITE_NEED, "jdbc:postgresql:": POSTGRESQL_NEED}


def catalog_drivers(uri: str | None) -> tuple[Need, ...]:
    """The driver of a catalog's URI, when it is one cdcflow loads (other JDBC drivers come
    with ``spark.packages``)."""
    return tuple(d for prefix, d in DRIVERS.items() if (uri or "").startswith(prefix))


def kafka_need(spark_version: str, *, required: bool = True) -> Need:
    """Spark's Kafka connector of the running Spark version."""
    line = spark_line(spark_version)
    tested = TESTED_PYSPARK[line]
    pin = (
        f"install a PySpark whose connector the repository serves (`pip install "
        f"'pyspark=={tested}'`, the release CI tests on the {line} line), or "
        if spark_version != tested
        else ""
    )
    return Need(
        "Spark's Kafka connector (Kafka sources and outputs)",
        (kafka_connector(spark_version),),
        required=required,
        advice=pin + "give the connector as local jars with spark.conf spark.jars (its "
        f"{KAFKA_ARTIFACT} jar, the matching spark-token-provider-kafka-0-10 jar, kafka-clients "
        "and commons-pool2), or by other coordinates with spark.packages; pipelines without "
        "Kafka do not need it",
    )


def gives_kafka_connector(packages: Iterable[str], spark_jars: str) -> bool:
    """Whether a configuration brings a Kafka connector of its own: by coordinates
    (``spark.packages``) or as a file (``spark.conf`` ``spark.jars``)."""
    named = [c.split(":")[1] for c in packages if c.count(":") >= 2]
    named += [Path(urlparse(j.strip()).path).name for j in spark_jars.split(",") if j.strip()]
    return any(n.startswith(KAFKA_ARTIFACT) for n in named)


def needs(
    spark_version: str,
    *,
    iceberg: Sequence[str] | None = None,
    drivers: Sequence[Need] = tuple(DRIVERS.values()),
    kafka: KafkaUse = "required",
    extra: Sequence[str] = (),
) -> tuple[Need, ...]:
    """What a session loads: the Iceberg runtime (``iceberg``: other coordinates of it, ``()``
    none: a local jar is given), the catalog ``drivers``, Spark's Kafka connector as ``kafka``
    says, and the configuration's ``extra`` coordinates (as one set)."""
    out: list[Need] = []
    if iceberg is None:
        out.append(iceberg_need(spark_version))
    elif iceberg:
        out.append(Need("spark.iceberg_packages", tuple(iceberg)))
    out += drivers
    if kafka != "none":
        out.append(kafka_need(spark_version, required=kafka == "required"))
    if extra:
        out.append(Need("spark.packages", tuple(dict.fromkeys(extra))))
    return tuple(out)


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The folder cdcflow resolves jars into: ``$CDCFLOW_JAR_CACHE``, else
    ``$XDG_CACHE_HOME/cdcflow/jars``, else ``~/.cache/cdcflow/jars``."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdcflow" / "jars"


def repository(environ: Mapping[str, str] | None = None) -> str | None:
    """The Maven repository to resolve from instead of Maven Central (``$CDCFLOW_MAVEN_REPOSITORY``:
    a URL, or a folder of a repository's layout), as a URL; ``None``: Maven Central."""
    env = os.environ if environ is None else environ
    given = env.get(REPOSITORY_ENV, "").strip()
    if not given:
        return None
    url = given if "://" in given else Path(given).expanduser().resolve().as_uri()
    return url if url.endswith("/") else url + "/"


def shown_repository(url: str | None) -> str:
    """A repository as messages name it (without any user or password in its URL)."""
    if url is None:
        return "Maven Central"
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{REPOSITORY_ENV} {parts._replace(netloc=netloc).geturl()}"


@dataclass(frozen=True)
class JarCache:
    """Resolved jars under one folder: Spark's resolver works in ``ivy/``, and
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

    @contextmanager
    def filling(self) -> Iterator[None]:
        """Hold the cache's lock (``lock`` in its folder) while resolving into it: Spark's
        resolver in two processes at once over one folder breaks both downloads. A process
        that finds the lock held says who holds it and waits; the lock goes with its holder's
        process, so a crashed one leaves none behind."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                _log.warning(
                    "cdcflow: waiting for the jar cache %s: process %s is filling it",
                    self.root,
                    holder,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """The process id the lock's holder wrote into the lock file. A holder writes it right
    after taking the lock, so a process that finds the lock taken an instant earlier reads
    the file empty: it reads again for up to a second before saying only "another"."""
    deadline = time.monotonic() + 1.0
    while True:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if holder or time.monotonic() >= deadline:
            return holder or "another"
        time.sleep(0.02)


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
    need: Need, cache: JarCache, reasons: Sequence[str] = (), repo: str | None = None
) -> EnvironmentProblem:
    """The error of jars that could not be resolved (``reasons``: what Spark's resolver
    said): what they are for, why, and what to do (the hint)."""
    said = f" ({'; '.join(reasons)})" if reasons else ""
    return EnvironmentProblem(
        f"could not resolve {need.label}: {', '.join(need.coordinates)}{said}; the jar cache "
        f"{cache.root} does not hold it and Spark's resolver did not find it in "
        f"{shown_repository(repo)}",
        code="JAR_UNRESOLVED",
        hint=(f"{need.advice}; or " if need.advice else "") + _ELSEWHERE,
    )


#: What to do about any jar that cannot be resolved.
_ELSEWHERE = (
    f"point {REPOSITORY_ENV} at a Maven repository that has it (a mirror), or copy a jar cache "
    f"that holds it from another machine and point {CACHE_ENV} at it"
)


def resolver_said(stderr: str) -> list[str]:
    """Why Spark's resolver failed, from what it wrote: the modules it did not find or could
    not download, else its error lines."""
    lines = [ln.strip() for ln in stderr.splitlines()]
    said = [ln for ln in lines if ln.startswith("module not found:") or "download failed" in ln]
    if not said:
        said = [ln for ln in lines if "unresolved dependency" in ln or "JAVA_" in ln]
    return list(dict.fromkeys(said))[:6]


def resolve(need: Need, cache: JarCache) -> list[str]:
    """The jar files of one need, resolved now by Spark's resolver in a child process (the
    only step that needs the network) and recorded; ``JAR_UNRESOLVED`` when it cannot be. The
    caller holds :meth:`JarCache.filling`."""
    done = subprocess.run(
        [sys.executable, "-m", "cdcflow.spark.resolve", str(cache.ivy), *need.coordinates],
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    lines = done.stdout.splitlines()
    resolved = [ln.removeprefix("JAR ") for ln in lines if ln.startswith("JAR ")]
    if done.returncode != 0 or not resolved:
        raise unresolved(need, cache, resolver_said(done.stderr), repository())
    cache.record(need.coordinates, resolved)
    return resolved


#: What :func:`fetch` found for a need: its files, the error it could not be resolved with, or
#: ``None`` (not cached, and not resolved).
Found = list[str] | EnvironmentProblem | None


def fetch(needs: Sequence[Need], cache: JarCache, *, resolving: bool = True) -> dict[Need, Found]:
    """Each need's jar files from the cache; with ``resolving``, those the cache lacks are
    resolved now, one need at a time under the cache's lock, each failure kept apart."""
    found: dict[Need, Found] = {n: cache.lookup(n.coordinates) for n in needs}
    missing = [n for n, files in found.items() if files is None]
    if not missing or not resolving:
        return found
    with cache.filling():
        for need in missing:
            files = cache.lookup(need.coordinates)  # another process may have resolved it
            if files is None:
                try:
                    files = resolve(need, cache)
                except EnvironmentProblem as e:
                    found[need] = e
                    continue
            found[need] = files
    return found


def session_jars(needs: Sequence[Need], cache: JarCache | None = None) -> list[str]:
    """The jar files a session loads: every need from the cache, resolved when missing
    (:func:`loaded`)."""
    return loaded(fetch(needs, cache or JarCache(cache_root())))


def loaded(found: Mapping[Need, Found]) -> list[str]:
    """The jar files of what :func:`fetch` found. A required need that could not be resolved
    raises ``JAR_UNRESOLVED`` (naming each such need); an optional one is said and left
    out."""
    failed = {n: f for n, f in found.items() if n.required and isinstance(f, EnvironmentProblem)}
    if failed:
        raise joined(failed)
    out: list[str] = []
    for need, files in found.items():
        if isinstance(files, EnvironmentProblem):
            _log.warning(
                "cdcflow: the session starts without %s: %s (%s)", need.label, files, files.hint
            )
        elif files:
            out += files
    return list(dict.fromkeys(out))


def joined(failed: Mapping[Need, EnvironmentProblem]) -> EnvironmentProblem:
    """One error for the needs that could not be resolved."""
    if len(failed) == 1:
        return next(iter(failed.values()))
    advice = [f"for {n.label}: {n.advice}" for n in failed if n.advice]
    return EnvironmentProblem(
        f"{len(failed)} sets of jars could not be resolved:\n"
        + "\n".join(f"  {p.message}" for p in failed.values()),
        code="JAR_UNRESOLVED",
        hint="; ".join([*advice, f"for any of them: {_ELSEWHERE}"]),
    )
