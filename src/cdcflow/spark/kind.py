"""What kind of SparkSession cdcflow was given: a classic one (a JVM in this process, reached
through py4j) or a Spark Connect one (a client of a Spark Connect server: SQL and DataFrames
only, no JVM here).

PySpark's ``pyspark.sql.utils.is_remote()`` answers for the whole process (whether it was put in
Connect mode), not for one session, and a process can hold a session of each kind; a session's
kind is its class. ``pyspark.sql.connect`` is not imported here: it needs the Connect client's
packages, and a process that never imported it holds no Connect session.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from cdcflow.errors import EnvironmentProblem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The modules of PySpark's Spark Connect session and column classes.
CONNECT_MODULE = "pyspark.sql.connect.session"
CONNECT_COLUMN_MODULE = "pyspark.sql.connect.column"


class ConnectUnsupported(EnvironmentProblem):
    """Something cdcflow does not do over a Spark Connect session yet (terminal)."""

    code = "CONNECT_UNSUPPORTED"


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session."""
    module = sys.modules.get(CONNECT_MODULE)
    return module is not None and isinstance(spark, module.SparkSession)


def functions(spark: SparkSession) -> ModuleType:
    """PySpark's functions for columns of ``spark``'s kind: ``pyspark.sql.functions`` builds
    the columns of the process's mode, which is classic in a process holding both kinds."""
    if is_connect(spark):
        return importlib.import_module("pyspark.sql.connect.functions")
    return importlib.import_module("pyspark.sql.functions")


def parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once: Spark's default parallelism on a classic
    session; over Spark Connect (no SparkContext), ``spark.default.parallelism`` when set,
    else the shuffle partitions."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    found = spark.conf.get("spark.default.parallelism", None) or spark.conf.get(
        "spark.sql.shuffle.partitions", "2"
    )
    return max(1, int(str(found)))


def is_connect_column(value: object) -> bool:
    """Whether ``value`` is a column of a Spark Connect session (an expression sent to the
    server, with no JVM column behind it)."""
    module = sys.modules.get(CONNECT_COLUMN_MODULE)
    return module is not None and isinstance(value, module.Column)


def refuse_connect_column(value: object, name: str) -> None:
    """Raise :class:`ConnectUnsupported` when ``value`` (given as ``name``) is a column of a
    Spark Connect session: cdcflow reads a column's SQL from its JVM expression."""
    if is_connect_column(value):
        raise ConnectUnsupported(
            f"{name} given as a Column of a Spark Connect session cannot be read yet",
            hint="give it as Spark SQL text (e.g. \"after['op'] = 'D'\") or column names",
        )


def require_classic(spark: SparkSession, what: str) -> None:
    """Raise :class:`ConnectUnsupported` naming ``what`` when ``spark`` is a Spark Connect
    session."""
    if is_connect(spark):
        raise ConnectUnsupported(
            f"{what} does not run over a Spark Connect session",
            hint="start the pipeline's own queries (cdcflow.api.start, cdcflow.api.apply_changes "
            "of a streaming DataFrame, cdcflow run --remote), which do; or use a classic "
            "SparkSession; see docs/python-api.md, Over Spark Connect",
        )


def connect_asked(conf: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """What would make PySpark's session builder give a Spark Connect client in this process
    (``SPARK_REMOTE``, the ``spark.remote`` setting, ``spark.api.mode=connect`` as a setting or
    ``SPARK_API_MODE``, or a Connect session made here before), named without its value (a
    Connect URL may hold a token); ``None`` when nothing does."""
    if "SPARK_REMOTE" in environ:
        return "the environment variable SPARK_REMOTE"
    if "spark.remote" in conf:
        return "the setting spark.remote"
    if str(conf.get("spark.api.mode", environ.get("SPARK_API_MODE", ""))).lower() == "connect":
        return "spark.api.mode=connect"
    if "SPARK_CONNECT_MODE_ENABLED" in environ:
        return "a Spark Connect session made earlier in this process"
    return None


def refuse_connect_build(conf: Mapping[str, str], environ: Mapping[str, str]) -> None:
    """Raise :class:`ConnectUnsupported` when a session built now would be a Spark Connect
    client (see :func:`connect_asked`)."""
    asked = connect_asked(conf, environ)
    if asked is not None:
        raise ConnectUnsupported(
            f"{asked} makes a new SparkSession a Spark Connect client; cdcflow builds and "
            "applies with classic sessions only (cdcflow.api.decode runs over Spark Connect)",
            hint="unset it for cdcflow run and cdcflow.api.session; see docs/python-api.md, "
            "Over Spark Connect",
        )
