"""Pipeline configuration: a YAML file validated with clear errors.

Example::

    pipeline: shop                     # name; identifies this pipeline in table commits
    checkpoint: ./checkpoints/shop
    namespace: shop                    # Iceberg namespace of the replicas
    catalog: {name: cdc, type: jdbc, warehouse: ./warehouse}   # the embedded default
    spark: {master: "local[*]", conf: {spark.driver.memory: 4g}}
    sources:
      - name: pg
        path: ./landing/pg             # local path or any Hadoop-filesystem URI
        dialect: savegress             # or auto
        keys: {users: [id]}            # for producers that send no key names
        types: {users: {amount: "numeric(10,2)"}}
    tables:
      default: {mode: merge, deletes: hard}
      audit_log: {mode: append}
    tombstone_retention: 7d
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from cdcflow.config_base import (
    ConfigModel,
    SecretFrom,
    check_declared_types,
    known_dialect,
    old_secret_keys,
    parse_duration,
    read_yaml_mapping,
    validate,
)
from cdcflow.dialects.model import DialectOptions
from cdcflow.sources.base import Source
from cdcflow.sources.given import GivenSource
from cdcflow.sources.kafka import KafkaConfig, KafkaConnection, KafkaSource
from cdcflow.sources.landing import LandingFields, LandingSource


class CatalogConfig(ConfigModel):
    """The Iceberg catalog the replicas live in. The default is embedded: Iceberg's JDBC
    catalog on an SQLite file inside the warehouse (``<warehouse>/catalog.db``), which pyiceberg
    and the engines over it open by table name; ``uri`` points a JDBC catalog elsewhere
    (PostgreSQL). ``hadoop`` is a catalog in the warehouse folder itself (earlier versions'
    default; one writer at a time)."""

    name: str = "cdc"
    type: Literal["hadoop", "rest", "hive", "jdbc", "glue"] = "jdbc"
    uri: str | None = None
    warehouse: str = "./warehouse"
    options: dict[str, str] = Field(default_factory=dict)


class MetricsConfig(ConfigModel):
    """Where a running pipeline answers ``/metrics`` (Prometheus), ``/healthz``, ``/readyz``,
    ``/status.json`` and its status page (``/``); ``ready_intervals``: ``/readyz`` answers
    ready while a batch succeeded (or a trigger found nothing new) within that many follow
    intervals."""

    port: int = Field(ge=0, le=65535)
    host: str = "127.0.0.1"
    ready_intervals: int = Field(default=3, ge=1)


class SparkConfig(ConfigModel):
    """Spark settings; ``conf`` is passed through. ``remote``: the address of a Spark Connect
    server (``sc://host:port``) to run on instead of a session of this process (its own
    settings then hold: ``master``, the jars and packages are the server's; ``conf`` and
    ``shuffle_partitions`` are set on the run's Connect session where they are runtime
    settings). A token is a secret: give a URL holding one in the environment variable
    ``SPARK_REMOTE``, never in the file."""

    master: str = "local[*]"
    shuffle_partitions: int = 4
    iceberg_jar: str | None = None
    iceberg_packages: str | None = None
    packages: list[str] = Field(default_factory=list)
    conf: dict[str, str] = Field(default_factory=dict)
    remote: str | None = None

    @model_validator(mode="after")
    def _remote(self) -> SparkConfig:
        for url in (self.remote, self.conf.get("spark.remote")):
            if url is not None:
                check_remote(url)
        return self


def check_remote(url: str) -> None:
    """Refuse a Spark Connect address that is not one (``sc://host:port``) or that holds a
    token (a secret: ``SPARK_REMOTE`` is where it goes), without showing the token."""
    if not url.startswith("sc://"):
        raise ValueError("remote must be a Spark Connect address, sc://host:port")
    if "token=" in url.lower():
        raise ValueError(
            "remote holds a token, a secret: give the address with its token in the "
            "environment variable SPARK_REMOTE instead"
        )


class KafkaOutputConfig(KafkaConnection):
    """Where a ``kafka`` output writes: one ``topic``."""

    topic: str


#: Placeholders of a source's ``replica_name`` template.
NAME_FIELDS: tuple[str, ...] = ("source", "database", "schema", "table")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class SourceConfig(LandingFields):
    """One source of raw messages and how to decode them: a landing zone (``path`` and the
    other settings of :class:`~cdcflow.sources.landing.LandingFields`), Kafka topics
    (``kafka``: :class:`~cdcflow.sources.kafka.KafkaConfig`), or a DataFrame given through the
    Python API (neither); :meth:`source` is how the pipeline reads it.

    ``replica_name``: how the source's tables are named in the catalog, a template of
    ``{source}``, ``{database}``, ``{schema}`` and ``{table}`` (lower-cased, other characters
    than letters, digits and ``_`` become ``_``). When absent, the name the source got on its
    first run is kept: ``{table}`` for the sole source of a new pipeline (and for every source
    of a pipeline from before names were recorded), ``{source}__{table}`` otherwise, so two
    sources with a table ``users`` never share a replica.
    """

    name: str
    kafka: KafkaConfig | None = None
    dialect: str = "auto"
    keys: dict[str, list[str]] = Field(default_factory=dict)
    types: dict[str, dict[str, str]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    replica_name: str | None = None
    renamed_from: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> SourceConfig:
        if self.path is not None and self.kafka is not None:
            raise ValueError("give path (a landing zone) or kafka (topics), not both")
        if self.kafka is not None and self.landing_only:
            raise ValueError(
                f"{' and '.join(self.landing_only)} are for landing zones; a kafka source "
                "bounds its batches with kafka.max_offsets_per_trigger"
            )
        return self

    def source(self) -> Source:
        """The source as the pipeline reads it: the one place that tells its kind."""
        options = self.decoder_options()
        if self.kafka is not None:
            return KafkaSource(self.name, self.dialect, options, self.kafka)
        if self.path is not None:
            return LandingSource(self.name, self.dialect, options, self)
        return GivenSource(self.name, self.dialect, options)

    def decoder_options(self) -> DialectOptions:
        """The decoder's options for the source's messages."""
        return DialectOptions(
            table_keys={t: tuple(k) for t, k in self.keys.items()},
            column_types={t: dict(c) for t, c in self.types.items()},
            extra=dict(self.options),
        )

    @property
    def location(self) -> str:
        """Where the source reads: its landing zone, its Kafka subscription, or ``""``."""
        return self.source().location

    def relative_to(self, fix: Callable[[str], str]) -> SourceConfig:
        """A copy whose local folders and secret files are resolved by ``fix``."""
        update: dict[str, Any] = dict(self.landing_relative_to(fix))
        if self.kafka is not None:
            update["kafka"] = self.kafka.with_files_relative_to(fix)
        return self.model_copy(update=update)

    @field_validator("name", "renamed_from")
    @classmethod
    def _source_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", v):
            raise ValueError(f"must be letters, digits, _, . or - (got {v!r})")
        return v

    @field_validator("replica_name")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        found = _PLACEHOLDER.findall(v)
        unknown = sorted(set(found) - set(NAME_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {unknown} in {v!r}; use "
                + ", ".join("{" + f + "}" for f in NAME_FIELDS)
            )
        if "table" not in found:
            raise ValueError(f"{v!r} must contain {{table}}: every table needs its own replica")
        return v

    _known_dialect = field_validator("dialect")(known_dialect)
    _readable_types = field_validator("types")(check_declared_types)


class MaintenanceConfig(ConfigModel):
    """When the running pipeline maintains a table (between batches, under its run lock).

    Every ``every_batches`` batches, each table written since the last round is checked: with
    ``rewrite_delete_files`` delete files or ``rewrite_data_files`` data files or more, its
    data files are rewritten (small files bin-packed, deletes folded in); snapshots older than
    ``snapshot_retention`` expire, the newest ``keep_snapshots`` always kept; files no snapshot
    references, older than ``orphan_age`` (at least 24h, Iceberg's floor), are removed at most
    once per ``orphan_interval``. The internal tables get the same.
    """

    #: ``maintenance: off`` in the configuration
    enabled: bool = True
    every_batches: int = Field(default=20, ge=1)
    rewrite_delete_files: int = Field(default=20, ge=1)
    rewrite_data_files: int = Field(default=40, ge=2)
    snapshot_retention: str = "1h"
    keep_snapshots: int = Field(default=20, ge=1)
    orphan_age: str = "3d"
    orphan_interval: str = "1d"

    @field_validator("snapshot_retention", "orphan_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @field_validator("orphan_age")
    @classmethod
    def _orphan_age(cls, v: str) -> str:
        if parse_duration(v) < 24 * 3600:
            raise ValueError(
                f"{v!r} is under 24h: files of a commit in progress could be taken for orphans"
            )
        return v

    @property
    def snapshot_retention_seconds(self) -> int:
        return parse_duration(self.snapshot_retention)

    @property
    def orphan_age_seconds(self) -> int:
        return parse_duration(self.orphan_age)

    @property
    def orphan_interval_seconds(self) -> int:
        return parse_duration(self.orphan_interval)


def _maintenance(v: Any) -> Any:
    """``off``/``false`` → no maintenance, ``on``/``true`` → the defaults."""
    if v is False or (isinstance(v, str) and v.strip().lower() in ("off", "false", "no")):
        return {"enabled": False}
    if v is True or (isinstance(v, str) and v.strip().lower() in ("on", "true", "yes")):
        return {}
    return v


class TableConfig(ConfigModel):
    """How one target table is written.

    ``mode``: ``merge`` (current state, one row per key), ``append`` (changelog of canonical
    events) or ``scd2`` (history: one row per version of a key with its validity).
    ``keys``: the key columns, or ``none`` for a table without a primary key (``merge`` only):
    the replica is then a multiset of rows — an insert adds a copy of its row, a delete removes
    one copy of its before image, an update both — so the producer must send whole before
    images (PostgreSQL ``REPLICA IDENTITY FULL``).
    ``except_columns``: source columns not written to the table.
    ``track_history_columns`` / ``track_history_except_columns`` (``scd2`` only, one of them):
    the columns whose changes open a new version; a change to other columns only updates the
    current version in place.
    ``columns``: the only source columns written (key columns always are); the other way
    round from ``except_columns``, not both.
    ``sequence_by``: a column of the row image (or several, compared in turn) whose values
    order a key's events instead of the producer's ``sequence``.
    ``apply_as_deletes``: a Spark SQL condition over the canonical event's fields (e.g.
    ``after['op'] = 'D'``) marking row events that delete their key: such an event is applied
    as a ``DELETE`` whose before image is its row image.
    ``apply_as_truncates``: a condition marking row events that truncate their table: such an
    event is applied as a ``TRUNCATE`` at its sequence.
    ``ignore_null_updates``: a row event's ``NULL`` values leave the row's columns as they are
    (the event updates only the columns it gives a value), as a partial event does.
    ``table_properties``: Iceberg table properties of the replica (``format-version``,
    ``write.delete.granularity``, ``write.target-file-size-bytes``, …), set when the table is
    created and on an existing table whose value differs.
    """

    mode: Literal["merge", "append", "scd2"] = "merge"
    keys: list[str] | Literal["none"] | None = None
    deletes: Literal["hard", "soft"] = "hard"
    name: str | None = None
    except_columns: list[str] = Field(default_factory=list)
    columns: list[str] | None = None
    track_history_columns: list[str] | None = None
    track_history_except_columns: list[str] | None = None
    sequence_by: tuple[str, ...] = ()
    apply_as_deletes: str | None = None
    apply_as_truncates: str | None = None
    ignore_null_updates: bool = False
    table_properties: dict[str, str] = Field(default_factory=dict)
    #: this table's maintenance (``None``: the pipeline's)
    maintenance: MaintenanceConfig | None = None

    @field_validator("maintenance", mode="before")
    @classmethod
    def _maintenance(cls, v: Any) -> Any:
        return _maintenance(v)

    @field_validator("table_properties", mode="before")
    @classmethod
    def _properties(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"property names are non-empty strings, got {key!r}")
            if key.startswith("cdcflow."):
                raise ValueError(f"{key!r}: properties named cdcflow.* are cdcflow's own")
            if isinstance(value, bool):
                value = str(value).lower()
            if not isinstance(value, str | int | float):
                raise ValueError(f"{key!r}: a property's value is a string, got {value!r}")
            out[key] = str(value)
        if out.get("format-version", "2") not in ("2", "3"):
            raise ValueError(
                f"format-version {out['format-version']!r}: cdcflow writes format 2 or 3"
            )
        return out

    @field_validator("apply_as_deletes", "apply_as_truncates")
    @classmethod
    def _condition(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must be a Spark SQL condition, e.g. after['op'] = 'D'")
        return v

    @field_validator("sequence_by", mode="before")
    @classmethod
    def _ordering(cls, v: Any) -> Any:
        # one spelling from here on: the columns in turn, none for the producer's order
        if v is None:
            return ()
        if isinstance(v, str):
            return (v,)
        if isinstance(v, list | tuple) and not v:
            raise ValueError("must name at least one column")
        return v

    @field_serializer("sequence_by")
    def _ordering_written(self, v: tuple[str, ...]) -> list[str] | None:
        # written as the configuration spells it, so that what is dumped loads again
        return list(v) or None

    @model_validator(mode="after")
    def _history(self) -> TableConfig:
        tracked = self.track_history_columns is not None
        excepted = self.track_history_except_columns is not None
        if (tracked or excepted) and self.mode != "scd2":
            raise ValueError("track_history_columns/track_history_except_columns need mode scd2")
        if tracked and excepted:
            raise ValueError("give track_history_columns or track_history_except_columns, not both")
        if self.mode == "scd2" and self.deletes == "soft":
            raise ValueError("deletes: soft is for merge tables (scd2 closes the version)")
        if self.columns is not None and self.except_columns:
            raise ValueError("give columns or except_columns, not both")
        if self.keys == "none":
            if self.mode != "merge":
                raise ValueError(
                    "keys: none is for mode merge (a table without a key is kept as a multiset "
                    "of its rows; append keeps every event whatever its key, scd2 needs a key)"
                )
            if self.deletes == "soft":
                raise ValueError("keys: none removes a copy of the row: deletes: soft needs keys")
            if self.sequence_by:
                raise ValueError(
                    "keys: none counts a table's rows whatever the order of its events: "
                    "sequence_by has nothing to order"
                )
        return self


class OutputConfig(ConfigModel):
    """One downstream output of the canonical stream (``outputs:``).

    ``files``: JSON lines under ``<path>/batch=<batch id>/`` in the unified batch format
    (``format: unified_batch``) or the Kafka message form (``format: kafka``).
    ``webhook``: HTTP POSTs of unified batches (or single events when ``batch_size`` is 1)
    with retries, signed with ``secret`` when given; what still fails is dead-lettered as
    ``DELIVERY_FAILED``.
    ``kafka``: records of the unified format's Kafka message form written to ``kafka.topic``
    with Spark's Kafka sink (key ``<table>:<primary key>``, so a key stays on one partition;
    the event id in the ``savegress-event-id`` header); a batch whose write fails is
    dead-lettered as ``DELIVERY_FAILED``.
    """

    type: Literal["files", "webhook", "kafka"]
    name: str
    path: str | None = None
    kafka: KafkaOutputConfig | None = None
    format: Literal["unified_batch", "kafka"] = "unified_batch"
    url: str | None = None
    secret: SecretFrom | None = None
    batch_size: int = Field(default=100, ge=1)
    max_attempts: int = Field(default=5, ge=1)
    timeout: float = Field(default=10.0, gt=0)
    backoff: float = Field(default=0.5, ge=0)
    concurrency: int = Field(default=2, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _old_secret(cls, data: Any) -> Any:
        name = data.get("name") if isinstance(data, Mapping) else None
        return old_secret_keys(data, "secret", "secret_env", "secret_file", f"output {name!r}")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.-]+$", v):
            raise ValueError(f"must be letters, digits, _, . or - (got {v!r})")
        return v

    @model_validator(mode="after")
    def _per_type(self) -> OutputConfig:
        if self.type != "kafka" and self.kafka is not None:
            raise ValueError(f"output {self.name!r}: 'kafka' is for kafka outputs")
        if self.type == "kafka":
            if self.kafka is None:
                raise ValueError(
                    f"output {self.name!r}: a kafka output needs 'kafka' "
                    "({bootstrap_servers: ..., topic: ...})"
                )
            for key in ("path", "url", "secret"):
                if getattr(self, key) is not None:
                    raise ValueError(f"output {self.name!r}: '{key}' is not for kafka outputs")
        elif self.type == "files":
            if not self.path:
                raise ValueError(f"output {self.name!r}: a files output needs 'path'")
            for key in ("url", "secret"):
                if getattr(self, key) is not None:
                    raise ValueError(f"output {self.name!r}: '{key}' is for webhook outputs")
        else:
            if not self.url or not re.match(r"^https?://", self.url):
                raise ValueError(
                    f"output {self.name!r}: a webhook output needs 'url' (http:// or https://)"
                )
            if self.path is not None:
                raise ValueError(f"output {self.name!r}: 'path' is for files outputs")
        return self


class PipelineConfig(ConfigModel):
    """A whole pipeline (``cdcflow run CONFIG``)."""

    pipeline: str = "cdcflow"
    checkpoint: str = "./checkpoints/cdcflow"
    namespace: str = "cdc"
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    sources: list[SourceConfig]
    tables: dict[str, TableConfig] = Field(default_factory=dict)
    tombstone_retention: str = "7d"
    segment_wait: str = "1h"
    consistency: Literal["none", "transactions", "resolved"] = "none"
    follow_interval: str = "10s"
    parallel_tables: int = Field(default=4, ge=1)
    outputs: list[OutputConfig] = Field(default_factory=list)
    #: maintenance of the tables between batches (``off``: none)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    #: a running pipeline's metrics, health endpoints and status page
    metrics: MetricsConfig | None = None

    @field_validator("maintenance", mode="before")
    @classmethod
    def _maintenance(cls, v: Any) -> Any:
        return _maintenance(v)

    @field_validator("sources")
    @classmethod
    def _unique_sources(cls, v: list[SourceConfig]) -> list[SourceConfig]:
        if not v:
            raise ValueError("at least one source is needed")
        names = [s.name for s in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"source names must be unique (repeated: {', '.join(dup)})")
        return v

    @field_validator("outputs")
    @classmethod
    def _unique_outputs(cls, v: list[OutputConfig]) -> list[OutputConfig]:
        names = [o.name for o in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"output names must be unique (repeated: {', '.join(dup)})")
        return v

    @field_validator("tombstone_retention", "segment_wait", "follow_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @field_validator("namespace", "pipeline")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError(f"must be letters, digits and _ (got {v!r})")
        return v

    @model_validator(mode="after")
    def _keyless_tables_need_before_images(self) -> PipelineConfig:
        from cdcflow.dialects import dialect_class

        keyless = sorted(n for n, t in self.tables.items() if t.keys == "none")
        dialects = sorted({s.dialect for s in self.sources})
        if not keyless or "auto" in dialects:
            return self
        if not any(dialect_class(d).capabilities.before_images for d in dialects):
            raise ValueError(
                f"tables.{keyless[0]}.keys: none keeps a table without a key as the multiset "
                "of its rows, where an update or a delete removes the row equal to its before "
                f"image; dialect {' and '.join(dialects)} sends no before images: keep the "
                "table as a changelog (mode: append) or give it keys"
            )
        return self

    def table(self, name: str) -> TableConfig:
        """Settings of a target table (its own entry, else ``default``)."""
        return self.tables.get(name) or self.tables.get("default") or TableConfig()

    def maintenance_of(self, name: str | None) -> MaintenanceConfig | None:
        """The maintenance of a target table (``None``: an internal table), ``None`` when
        off."""
        own = self.table(name).maintenance if name is not None else None
        found = self.maintenance if own is None else own
        return found if found.enabled else None

    @property
    def retention_seconds(self) -> int:
        """Tombstone retention in seconds."""
        return parse_duration(self.tombstone_retention)


def load_config(data: Mapping[str, Any], origin: str = "") -> PipelineConfig:
    """Validate a configuration mapping; errors name each bad key and the allowed values."""
    return validate(PipelineConfig, data, f"configuration {origin}".strip())


def load_config_file(path: str | Path) -> PipelineConfig:
    """Read and validate a YAML configuration file."""
    p = Path(path)
    return relative_to(load_config(read_yaml_mapping(p), f"({p})"), p.parent)


def relative_to(cfg: PipelineConfig, base: Path) -> PipelineConfig:
    """The configuration with its relative local paths resolved against ``base`` (the
    configuration file's folder)."""

    def fix(path: str) -> str:
        if "://" in path or Path(path).is_absolute():
            return path
        return str((base / path).resolve())

    fixed = cfg.model_copy(
        update={
            "checkpoint": fix(cfg.checkpoint),
            "catalog": cfg.catalog.model_copy(update={"warehouse": fix(cfg.catalog.warehouse)}),
            "sources": [s.relative_to(fix) for s in cfg.sources],
            "outputs": [_output_relative_to(o, fix) for o in cfg.outputs],
        }
    )
    if "catalog" not in cfg.model_fields_set:
        # still a configuration that names no catalog: a session's own is then used
        fixed.__pydantic_fields_set__.discard("catalog")
    return fixed


def _output_relative_to(out: OutputConfig, fix: Any) -> OutputConfig:
    if out.path:
        return out.model_copy(update={"path": fix(out.path)})
    if out.kafka is not None:
        return out.model_copy(update={"kafka": out.kafka.with_files_relative_to(fix)})
    if out.secret is not None:
        return out.model_copy(update={"secret": out.secret.relative_to(fix)})
    return out
