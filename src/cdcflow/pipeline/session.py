"""A pipeline's SparkSession, from its configuration: the settings (its catalog, the JDBC
driver the catalog needs, Spark's Kafka connector when a source or an output needs it), the
session built from them, or the catalog given to a session built elsewhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from cdcflow.config import PipelineConfig
from cdcflow.errors import ConfigError, EnvironmentProblem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.spark.session import SparkSettings


def spark_settings(cfg: PipelineConfig) -> SparkSettings:
    """Spark settings from a pipeline configuration. Its session loads its catalog's JDBC
    driver alone, and Spark's Kafka connector only when a source or an output uses Kafka (or,
    when it resolves, for sources given as DataFrames: they may come from Spark's Kafka
    source)."""
    from cdcflow.spark.session import settings_from_mapping

    needs = {src.source().kafka_connector for src in cfg.sources}
    if any(o.type == "kafka" for o in cfg.outputs):
        needs.add("required")
    kafka = next((n for n in ("required", "optional") if n in needs), "none")

    s = cfg.spark
    c = cfg.catalog
    return settings_from_mapping(
        {
            "master": s.master,
            "shuffle_partitions": s.shuffle_partitions,
            "iceberg_jar": s.iceberg_jar,
            "iceberg_packages": s.iceberg_packages,
            "packages": tuple(s.packages),
            "conf": dict(s.conf),
            "catalog_name": c.name,
            "catalog_type": c.type,
            "catalog_uri": c.uri,
            "warehouse": c.warehouse,
            "catalog_options": dict(c.options),
            "kafka": kafka,
            "catalog_driver_only": True,
        }
    )


def open_session(cfg: PipelineConfig, settings: SparkSettings | None = None) -> SparkSession:
    """The session of a pipeline, built from its configuration (or ``settings`` derived from
    it); a local warehouse that a Hadoop catalog wrote is refused when the catalog configured
    is another one (its tables would look absent, and replicas would start again beside
    them)."""
    from cdcflow.spark.session import build_session, catalog_uri

    url = remote_url(cfg)
    if url is not None:
        return connect_session(cfg, url)
    settings = settings or spark_settings(cfg)
    uri = catalog_uri(settings)
    if uri and uri.startswith("jdbc:sqlite:") and "://" not in settings.warehouse:
        from cdcflow.iceberg.migrate import unregistered

        found = unregistered(
            Path(settings.warehouse), Path(uri.removeprefix("jdbc:sqlite:")), cfg.catalog.name
        )
        if found:
            names = ", ".join(f"{t.namespace}.{t.name}" for t in found[:5])
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            raise ConfigError(
                f"warehouse {settings.warehouse} holds {len(found)} table(s) written by a Hadoop "
                f"catalog ({names}{more}) that catalog {cfg.catalog.name!r} does not list",
                code="HADOOP_WAREHOUSE",
                hint="to go on with the Hadoop catalog, set `catalog: {type: hadoop}`; to move "
                "the tables into the embedded catalog, run `cdcflow migrate-catalog CONFIG` "
                "(docs/operations.md, Moving a Hadoop warehouse)",
            )
    return build_session(settings)


def remote_url(cfg: PipelineConfig) -> str | None:
    """The Spark Connect server a pipeline runs on: ``spark.remote`` (or ``spark.remote`` among
    its ``conf``), else the environment variable ``SPARK_REMOTE`` (the address with a token);
    ``None``: a session of this process."""
    return cfg.spark.remote or cfg.spark.conf.get("spark.remote") or os.environ.get("SPARK_REMOTE")


#: The Spark Connect sessions this process made, kept until it ends. PySpark's Connect
#: session, when garbage-collected, closes its client, and with it shuts down (and waits for)
#: the thread pool every Connect session of the process shares; a collection that happens
#: while another session is inside that pool's ``submit`` waits for itself forever. A session
#: stopped by its pipeline costs a closed channel here.
_KEPT: list[SparkSession] = []


def connect_session(cfg: PipelineConfig, url: str) -> SparkSession:
    """A new session of the Spark Connect server at ``url`` for a pipeline: the
    configuration's runtime settings set on it (``conf``, ``shuffle_partitions`` when given;
    settings the server fixed at its start stay the server's) and its catalog given to it
    (:func:`bind_catalog`). The server must carry the Iceberg runtime and, for Kafka, Spark's
    Kafka connector (``cdcflow jars`` lists them)."""
    try:
        from pyspark.sql.connect.session import SparkSession as RemoteSession
    except ImportError as e:
        raise EnvironmentProblem(
            f"a Spark Connect session needs PySpark's Connect client, which does not import "
            f"here ({e.name or e})",
            hint="install PySpark 4 with its connect extra (pip install 'pyspark[connect]')",
        ) from None
    from pyspark.errors import AnalysisException

    from cdcflow.spark.session import quiet_pyspark_logs

    quiet_pyspark_logs()
    # a Connect session is a SparkSession to every caller (the API both kinds share)
    spark = cast("SparkSession", RemoteSession.builder.remote(url).create())
    _KEPT.append(spark)
    given = dict(cfg.spark.conf)
    if "shuffle_partitions" in cfg.spark.model_fields_set:
        given["spark.sql.shuffle.partitions"] = str(cfg.spark.shuffle_partitions)
    for key, value in given.items():
        if key in ("spark.remote", "spark.master") or key.startswith("spark.jars"):
            continue
        try:
            spark.conf.set(key, value)
        except AnalysisException:  # a static setting: the server's own holds
            continue
    bind_catalog(spark, cfg)
    return spark


def bind_catalog(spark: SparkSession, cfg: PipelineConfig) -> None:
    """Give a session the configuration's catalog, so it is set in one place: a session
    without a catalog of that name gets it (Spark loads catalogs on first use); one whose
    catalog of that name is configured otherwise than the configuration says is refused
    (``CATALOG_MISMATCH``) when the configuration names a catalog, and used as it is when not."""
    from cdcflow.spark.session import attach_catalog, catalog_conf

    settings = spark_settings(cfg)
    if spark.conf.get(f"spark.sql.catalog.{cfg.catalog.name}", None) is not None and (
        "catalog" not in cfg.model_fields_set
    ):
        return
    differ = attach_catalog(spark, settings)
    if differ:
        wanted = catalog_conf(settings)
        shown = ", ".join(f"{k}={spark.conf.get(k, None)!r} (not {wanted[k]!r})" for k in differ)
        raise ConfigError(
            f"the session's catalog {cfg.catalog.name!r} is not the configuration's: {shown}",
            code="CATALOG_MISMATCH",
            hint="give the catalog once: in the configuration (cdcflow.api.session(config) "
            "builds the session with it), or leave catalog out of the configuration to use "
            "the session's",
        )
