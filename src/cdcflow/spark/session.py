"""The SparkSession builder used everywhere.

Defaults: ``local[*]``; the jars the session needs by their Maven coordinates (the Iceberg Spark
runtime of the running PySpark's line, the catalog's JDBC driver, Spark's Kafka connector when
Kafka is used), resolved once into cdcflow's jar cache and loaded from it afterwards
(:mod:`cdcflow.spark.jars`);
an Iceberg JDBC catalog named ``cdc`` on an SQLite file inside the warehouse ``./warehouse``,
which readers other than Spark open by table name; UTC session time zone; workers on the
driver's Python; Spark logging at WARN. Everything can be overridden. Settings apply to the
first session of a process (``getOrCreate``).

Under ``spark-submit`` the JVM is already running with the submitted configuration: its master
and every key it set win over the configuration file and these defaults (see
:func:`session_plan`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.errors import ConfigError, EnvironmentProblem
from cdcflow.spark import jars
from cdcflow.spark.kind import refuse_connect_build

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The file of the embedded catalog, inside the warehouse.
CATALOG_FILE = "catalog.db"
_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

#: Keys that only mean something when cdcflow itself starts the JVM: under ``spark-submit`` the
#: driver is already running (its memory and classpath fixed) and the workers' Python comes from
#: ``spark.pyspark.python`` as submitted, or ``PYSPARK_PYTHON``.
_LAUNCH_ONLY = frozenset(
    {
        "spark.driver.memory",
        "spark.jars",
        "spark.jars.packages",
        "spark.pyspark.python",
        "spark.pyspark.driver.python",
    }
)


@dataclass(frozen=True)
class SparkSettings:
    """How to build the SparkSession."""

    master: str = "local[*]"
    app_name: str = "cdcflow"
    catalog_name: str = "cdc"
    catalog_type: str = "jdbc"
    catalog_uri: str | None = None
    warehouse: str = "./warehouse"
    catalog_options: Mapping[str, str] = field(default_factory=dict)
    iceberg_jar: str | None = None
    iceberg_packages: str | None = None
    #: further jars by Maven coordinates (resolved and cached like cdcflow's own)
    packages: tuple[str, ...] = ()
    #: Spark's Kafka connector: ``required``, ``optional`` (loaded when it resolves) or ``none``
    kafka: jars.KafkaUse = "required"
    #: only the catalog's own JDBC driver (a pipeline's session), not every catalog's cdcflow
    #: runs on (a session that may be given other catalogs later)
    catalog_driver_only: bool = False
    shuffle_partitions: int = 4
    conf: Mapping[str, str] = field(default_factory=dict)
    log_level: str = "WARN"


def settings_from_mapping(d: Mapping[str, Any]) -> SparkSettings:
    """Settings from a configuration mapping; unknown keys are errors naming the allowed ones."""
    allowed = {f.name for f in fields(SparkSettings)}
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown Spark setting(s) {unknown}; allowed: {', '.join(sorted(allowed))}"
        )
    return SparkSettings(**{k: v for k, v in d.items() if v is not None})


def find_java() -> str:
    """Path of the ``java`` executable, or :class:`EnvironmentProblem` saying what to install."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise EnvironmentProblem(
            "java not found: Spark needs a Java 17 runtime. Install one (e.g. "
            "`apt-get install openjdk-17-jre-headless`) or set JAVA_HOME.",
            code="JAVA_MISSING",
        )
    return found


def _warehouse(path: str) -> str:
    if "://" in path:
        return path
    return str(Path(path).resolve())


def catalog_uri(settings: SparkSettings) -> str | None:
    """The catalog's URI: the configured one, else for a JDBC catalog the embedded default, an
    SQLite file inside a local warehouse."""
    if settings.catalog_uri or settings.catalog_type != "jdbc":
        return settings.catalog_uri
    if "://" in settings.warehouse and not settings.warehouse.startswith("file:"):
        raise ConfigError(
            f"catalog type jdbc with warehouse {settings.warehouse!r} needs catalog.uri (a JDBC "
            "URL such as jdbc:postgresql://host/db): the embedded SQLite catalog file needs a "
            "local warehouse"
        )
    folder = Path(settings.warehouse.removeprefix("file:")).resolve()
    return f"jdbc:sqlite:{folder / CATALOG_FILE}"


def catalog_conf(settings: SparkSettings) -> dict[str, str]:
    """The session settings that define the catalog (``spark.sql.catalog.<name>*``); they can
    also be set on a running session, which loads a catalog when it is first named."""
    cat = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {cat: "org.apache.iceberg.spark.SparkCatalog", f"{cat}.type": settings.catalog_type}
    conf[f"{cat}.warehouse"] = _warehouse(settings.warehouse)
    # A streaming query runs its batches in a cloned session with its own catalog instance; a
    # cached table in one session would then miss the other's commits. Load fresh metadata.
    conf[f"{cat}.cache-enabled"] = "false"
    uri = catalog_uri(settings)
    if uri:
        conf[f"{cat}.uri"] = uri
    if settings.catalog_type == "jdbc":
        # V1: the schema with views that pyiceberg's SqlCatalog shares; SQLite writers of one
        # file (tables committed concurrently) wait for each other instead of failing
        conf[f"{cat}.jdbc.schema-version"] = "V1"
        if uri and uri.startswith("jdbc:sqlite:"):
            conf[f"{cat}.jdbc.busy_timeout"] = "60000"
    for k, v in settings.catalog_options.items():
        conf[f"{cat}.{k}"] = str(v)
    return conf


#: Spark's cache of compiled generated code, by the code's text (static; Spark's default 100).
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
CODEGEN_CACHE_ENTRIES = 2000


def spark_conf(
    settings: SparkSettings, *, launch: bool = True, jar_files: Sequence[str] = ()
) -> dict[str, str]:
    """The Spark configuration a session gets (without building it). ``launch``: with the keys
    that only apply when cdcflow starts the JVM itself (driver memory, the workers' Python, the
    jars: ``jar_files``, and a local ``iceberg_jar``, which must then exist)."""
    conf: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.extensions": _EXTENSIONS,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # a batch compiles ≈ 70 classes of generated code (a MERGE alone ≈ 20) and Spark keeps
        # 100: each batch evicted the last one's and compiled them all again (≈ 70 × 10 ms in
        # a batch of one table); kept, a steady batch compiles ≈ 6 (static: applies when the
        # session starts)
        CODEGEN_CACHE: str(CODEGEN_CACHE_ENTRIES),
    }
    conf.update(catalog_conf(settings))
    if launch:
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
        conf["spark.driver.memory"] = "4g"
        local = [settings.iceberg_jar] if settings.iceberg_jar else []
        for jar in local:
            if "://" not in jar and not Path(jar).exists():
                raise EnvironmentProblem(
                    f"Iceberg runtime jar not found: {jar}. Point spark.iceberg_jar at an "
                    "iceberg-spark-runtime jar of the running Spark's line, or leave it unset "
                    "to have cdcflow resolve it by its Maven coordinates.",
                    code="ICEBERG_JAR_MISSING",
                )
        files = [*local, *jar_files]
        if files:
            conf["spark.jars"] = ",".join(files)
    for k, v in settings.conf.items():
        if k == "spark.jars" and conf.get(k):
            conf[k] = ",".join([conf[k], str(v)])
        else:
            conf[k] = str(v)
    return conf


def needs(settings: SparkSettings, spark_version: str) -> tuple[jars.Need, ...]:
    """The jars a session started by cdcflow loads (:func:`cdcflow.spark.jars.needs`): the
    Iceberg runtime of the Spark line (or ``iceberg_packages``; none with a local
    ``iceberg_jar``), the JDBC driver of the catalog (both of cdcflow's unless
    ``catalog_driver_only``), Spark's Kafka connector as ``kafka`` says (none when the
    configuration gives its own), and ``packages``."""
    given = [c.strip() for c in (settings.iceberg_packages or "").split(",") if c.strip()]
    iceberg = () if settings.iceberg_jar else (given or None)
    drivers = tuple(jars.DRIVERS.values())
    if settings.catalog_driver_only:
        drivers = jars.catalog_drivers(catalog_uri(settings))
    own = jars.gives_kafka_connector(settings.packages, settings.conf.get("spark.jars", ""))
    return jars.needs(
        spark_version,
        iceberg=iceberg,
        drivers=drivers,
        kafka="none" if own else settings.kafka,
        extra=settings.packages,
    )


@dataclass(frozen=True)
class SessionPlan:
    """What :func:`build_session` does: the master to set (``None``: keep the one the running
    JVM was submitted with), the settings to give the builder, and whether to point
    ``PYSPARK_PYTHON`` at this interpreter."""

    master: str | None
    conf: Mapping[str, str]
    set_python: bool
    #: settings of the configuration that the submission overrides or that cannot apply to a
    #: JVM already running, each with why (said at session start, never silently dropped)
    ignored: tuple[str, ...] = ()


def session_plan(
    settings: SparkSettings,
    submitted: Mapping[str, str] | None,
    jar_files: Sequence[str] = (),
) -> SessionPlan:
    """Decide the session's master and settings. ``submitted`` is the configuration of a JVM
    that ``spark-submit`` started (``None`` when cdcflow starts its own): then the submitted
    master and every submitted key win, the keys that only apply at JVM launch are left to
    the submission (``--jars``, ``--driver-memory``, ``spark.pyspark.python``), and Iceberg's
    SQL extensions are added to any the submission names."""
    if submitted is None:
        return SessionPlan(
            master=settings.master,
            conf=spark_conf(settings, jar_files=jar_files),
            set_python=True,
        )
    conf = spark_conf(settings, launch=False)
    kept = {k: v for k, v in conf.items() if k not in submitted and k not in _LAUNCH_ONLY}
    ignored = _overridden(settings, conf, submitted)
    extensions = [e.strip() for e in submitted.get("spark.sql.extensions", "").split(",")]
    extensions = [e for e in extensions if e]
    if extensions and _EXTENSIONS not in extensions:
        kept["spark.sql.extensions"] = ",".join([*extensions, _EXTENSIONS])
    return SessionPlan(master=None, conf=kept, set_python=False, ignored=ignored)


def _overridden(
    settings: SparkSettings, conf: Mapping[str, str], submitted: Mapping[str, str]
) -> tuple[str, ...]:
    """What the configuration asks for that a ``spark-submit`` run does not take."""
    out: list[str] = []
    master = submitted.get("spark.master")
    if settings.master != SparkSettings.master and settings.master != master:
        out.append(f"spark.master {settings.master!r}: the submitted master {master!r} is used")
    for name in ("iceberg_jar", "iceberg_packages", "packages"):
        if getattr(settings, name):
            out.append(
                f"spark.{name}: the submitted JVM's classpath is used (give the Iceberg "
                "runtime to spark-submit with --jars or --packages)"
            )
    for k in sorted(settings.conf):
        if k in _LAUNCH_ONLY:
            out.append(f"spark.conf {k}: applies at JVM launch; pass it to spark-submit")
    for k in sorted(conf):
        if k in submitted and submitted[k] != conf[k] and k != "spark.sql.extensions":
            out.append(f"{k} {conf[k]!r}: the submitted value {submitted[k]!r} is used")
    return tuple(out)


def launched_by_spark_submit(environ: Mapping[str, str]) -> bool:
    """Whether this Python process was started by ``spark-submit`` (PySpark then connects to
    the JVM that started it instead of launching one)."""
    return "PYSPARK_GATEWAY_PORT" in environ


def submitted_conf() -> dict[str, str] | None:
    """The configuration ``spark-submit`` started the JVM with, or ``None`` when this process
    was not started by ``spark-submit``."""
    if not launched_by_spark_submit(os.environ):
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connect to the submitting JVM to read its settings
    return dict(SparkConf().getAll())


def session_running() -> bool:
    """Whether this process already has a Spark context (one that a caller started, which
    :func:`build_session` would reuse and a command must then not stop)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def attach_catalog(spark: SparkSession, settings: SparkSettings) -> list[str]:
    """Give a running session the catalog of ``settings`` when it has none of that name (Spark
    loads a catalog when it is first named); returns the settings of an existing catalog of
    that name that differ from ``settings`` (nothing is changed then)."""
    wanted = catalog_conf(settings)
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    if spark.conf.get(prefix, None) is None:
        _embedded_warehouse(settings)
        for k, v in wanted.items():
            spark.conf.set(k, v)
        return []
    return sorted(
        k
        for k, v in wanted.items()
        if not k.endswith(".cache-enabled") and spark.conf.get(k, None) != v
    )


def _reuse(settings: SparkSettings) -> SparkSession:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    wanted = catalog_conf(settings)
    differ = attach_catalog(spark, settings)
    if differ:
        shown = ", ".join(f"{k}={spark.conf.get(k, None)!r} (not {wanted[k]!r})" for k in differ)
        raise ConfigError(
            f"the running session's catalog {settings.catalog_name!r} is not the one asked "
            f"for: {shown}",
            code="CATALOG_MISMATCH",
            hint="one catalog of a name per process: give the same catalog settings, or "
            "another catalog name",
        )
    return spark


def _embedded_warehouse(settings: SparkSettings) -> None:
    """Create the folder of an embedded catalog's SQLite file (SQLite creates no folders)."""
    uri = catalog_uri(settings)
    if uri and uri.startswith("jdbc:sqlite:"):
        path = uri.removeprefix("jdbc:sqlite:")
        if not path.startswith(":"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def quiet_pyspark_logs() -> None:
    """PySpark's own loggers as a session cdcflow makes leaves them: py4j and PySpark at
    warnings; PySpark 4 logs every error it hands over to Python as a JSON line on stderr (a
    Connect client too), and cdcflow reports the errors it receives itself (coded), and lets
    its callers do the same."""
    for name in ("py4j", "py4j.clientserver", "pyspark"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:  # made as PySpark makes them: it logs with keywords only its own logger class takes
        from pyspark.logger import PySparkLogger

        logger_of: Callable[[str], logging.Logger] = PySparkLogger.getLogger
    except ImportError:  # PySpark 3.5: no such loggers
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logger_of(name).setLevel(logging.CRITICAL)


def build_session(settings: SparkSettings | None = None) -> SparkSession:
    """Create (or get) the SparkSession with Iceberg configured. A session already running in
    this process is reused as it is, given the catalog if it lacks one of that name; one whose
    catalog of that name is configured otherwise is refused (``CATALOG_MISMATCH``): Spark keeps
    a catalog it has loaded, so reads and writes could land in different warehouses."""
    settings = settings or SparkSettings()
    if session_running():
        return _reuse(settings)
    refuse_connect_build(settings.conf, os.environ)
    find_java()
    quiet_pyspark_logs()
    submitted = submitted_conf()
    files: list[str] = []
    if submitted is None or f"spark.sql.catalog.{settings.catalog_name}.uri" not in submitted:
        _embedded_warehouse(settings)  # under spark-submit too, unless it names the catalog
    if submitted is None:
        import pyspark

        files = jars.session_jars(needs(settings, pyspark.__version__))
    plan = session_plan(settings, submitted, files)
    for what in plan.ignored:
        logging.getLogger("cdcflow").warning("cdcflow: under spark-submit, ignored: %s", what)
    if plan.set_python:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if plan.master is not None:
        builder = builder.master(plan.master).appName(settings.app_name)
    for k, v in plan.conf.items():
        builder = builder.config(k, v)
    with jvm_output(submitted is None):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    _quiet_jvm_loggers(spark)
    return spark


#: JVM loggers whose warnings are expected: Hadoop's process helper interrupted while a
#: stopping query's threads end (with a stack trace); every release of a batch's local
#: checkpoint ("RDD … was locally checkpointed, its lineage has been truncated"); a
#: ``--follow`` batch longer than ``follow_interval`` ("Current batch is falling behind",
#: Spark 4's package, then Spark 3.5's), which the progress line's seconds already say.
_QUIET_JVM = (
    "org.apache.hadoop.util.Shell",
    "org.apache.spark.rdd.MapPartitionsRDD",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
)


#: The loggers of a streaming query's execution (Spark 4's package, then Spark 3.5's): a batch
#: refused because the pipeline is stopping ends its query "with error", with a stack trace.
_QUERY_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)


@contextmanager
def queries_stopping_quietly(spark: SparkSession) -> Iterator[None]:
    """Keep the streaming queries' own error lines off stderr while they are being stopped
    (levels restored afterwards)."""
    jvm: Any = spark.sparkContext._jvm
    saved: dict[str, Any] = {}
    try:
        log4j = jvm.org.apache.logging.log4j
        for name in _QUERY_LOGGERS:
            saved[name] = log4j.LogManager.getLogger(name).getLevel()
            log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    except Exception:  # another logging backend, or a JVM going away: nothing to quiet
        saved = {}
    try:
        yield
    finally:
        for name, level in saved.items():
            try:
                jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
            except Exception:  # a JVM going away
                break


def _quiet_jvm_loggers(spark: SparkSession) -> None:
    jvm: Any = spark.sparkContext._jvm
    try:
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in _QUIET_JVM:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # another logging backend than log4j 2: leave it as configured
        return


# ---------------------------------------------------------------------------- the JVM's output

#: A log4j line of Spark's console layout (``yy/MM/dd HH:mm:ss LEVEL logger: message``).
_LOG_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
#: What the JVM and Spark print as they start, before any log level applies.
_START_LINES = (
    "WARNING: Using incubator modules",
    "Using Spark's default log4j profile",
    'Setting default log level to "',
    "To adjust logging level use sc.setLogLevel",
)
#: Warnings of Spark's a user must see, passed on in cdcflow's words (at most once a minute
#: each): (pattern of the log line, what cdcflow says).
PASSED_ON: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"WARN \S*NetworkClient: .*(could not be established|disconnected)"),
        "cdcflow: a Kafka broker does not answer; Kafka's client keeps trying",
    ),
    (
        re.compile(r"WARN \S*MemoryStore: Not enough space to cache"),
        "cdcflow: Spark's memory is short (data is recomputed instead of cached): raise "
        "spark.driver.memory in spark.conf",
    ),
)


class JvmOutput:
    """What a JVM that cdcflow starts writes on its standard error, read by this process:
    Spark's and log4j's lines are kept back (the last ones are kept for ``--debug``), the
    warnings of :data:`PASSED_ON` said in cdcflow's words, anything else passed on; with
    ``verbose`` everything is passed on as written."""

    #: set by the command line: filter the output of the JVMs it starts, and how
    enabled = False
    verbose = False

    def __init__(self, keep: int = 200) -> None:
        self.kept: deque[str] = deque(maxlen=keep)
        self._said: dict[str, float] = {}
        self._in_event = False

    def line(self, text: str) -> str | None:
        """What to print for one line of the JVM's output (``None``: nothing)."""
        if self.verbose:
            return text
        stripped = text.rstrip("\n")
        if _LOG_LINE.match(stripped):
            self._in_event = True
            self.kept.append(stripped)
            for pattern, said in PASSED_ON:
                if pattern.search(stripped):
                    return self._once(said)
            return None
        if self._in_event and (stripped[:1].isspace() or stripped.startswith(("Caused by", "at "))):
            self.kept.append(stripped)
            return None
        self._in_event = False
        if stripped.startswith(_START_LINES) or not stripped:
            return None
        return text

    def _once(self, said: str) -> str | None:
        now = time.monotonic()
        if now - self._said.get(said, -1e9) < 60:
            return None
        self._said[said] = now
        return said + "\n"

    def relay(self, fd: int) -> None:
        """Read the JVM's output until it ends, printing what :meth:`line` says to."""
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
            for text in stream:
                shown = self.line(text)
                if shown:
                    try:
                        sys.stderr.write(shown)
                        sys.stderr.flush()
                    except (OSError, ValueError):  # this process's stderr is gone
                        continue


#: The output of the JVM this process started, once started.
JVM_OUTPUT: JvmOutput | None = None


@contextmanager
def jvm_output(launching: bool) -> Iterator[None]:
    """While a JVM is launched, make its standard error a pipe that :class:`JvmOutput` reads
    (when the command line asked for it: :attr:`JvmOutput.enabled`)."""
    global JVM_OUTPUT
    if not (launching and JvmOutput.enabled):
        yield
        return
    output = JvmOutput()
    read_end, write_end = os.pipe()
    threading.Thread(
        target=output.relay, args=(read_end,), name="cdcflow-jvm-output", daemon=True
    ).start()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)
    JVM_OUTPUT = output
