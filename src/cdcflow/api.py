"""cdcflow from PySpark: decode raw messages, apply canonical events, read the results.

::

    import cdcflow.api as cdc

    decoded = cdc.decode(kafka_df, dialect="debezium")           # batch or streaming
    pipe = cdc.start(decoded, namespace="shop", checkpoint="/chk/shop", keys=["id"])
    pipe.wait()
    pipe.table("customers").show()

Settings are the configuration ``cdcflow run`` reads from YAML
(:class:`~cdcflow.config.PipelineConfig`): give one (``config=``, a ``PipelineConfig``, a
mapping or a YAML file), or keyword arguments that :func:`pipeline_config` turns into one, with
the names Spark users know from ``apply_changes`` where the concept is the same. ``cdcflow
run`` goes through the same :class:`~cdcflow.pipeline.query.Pipeline`, decoder and batch
function. See ``docs/python-api.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from cdcflow.config import PipelineConfig, SourceConfig, TableConfig, load_config, load_config_file
from cdcflow.decode.spark import KAFKA_SCHEMA, Decoded, decode_dataframe
from cdcflow.errors import ConfigError, did_you_mean
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.report import BatchReport, RunResult
from cdcflow.pipeline.session import bind_catalog

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "KAFKA_SCHEMA",
    "BatchApplier",
    "Decoded",
    "Pipeline",
    "PipelineConfig",
    "RunResult",
    "SourceConfig",
    "TableConfig",
    "apply_changes",
    "decode",
    "foreach_batch",
    "pipeline",
    "pipeline_config",
    "session",
    "start",
    "table_config",
]

#: Source name given by :func:`pipeline_config` when none is.
DEFAULT_SOURCE = "main"

Config = PipelineConfig | Mapping[str, Any] | str | Path
#: A condition over canonical events: Spark SQL text or a ``pyspark.sql.Column``.
Condition: TypeAlias = "str | Column"
#: The columns ordering a key's events: a name, names, or a ``Column`` (column or struct).
Ordering: TypeAlias = "str | Sequence[str] | Column"


# ---------------------------------------------------------------------------- decoding


def decode(
    raw: DataFrame,
    dialect: str = "auto",
    *,
    types: Mapping[str, Mapping[str, str]] | None = None,
    keys: Mapping[str, Sequence[str]] | None = None,
    options: Mapping[str, Any] | None = None,
    source: SourceConfig | None = None,
) -> Decoded:
    """Decode a DataFrame of raw messages, batch or streaming, into canonical events.

    ``raw`` holds rows of Spark's Kafka source (:data:`KAFKA_SCHEMA`: ``value`` and any of
    ``key``, ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``), ``binaryFile``
    rows (``path``, ``content``: one file each), or one binary or string column (one message
    per row). A Kafka record's origin is ``kafka://<topic>/<partition>`` and its offset is its
    delivery position, so the latest delivered copy of an event is the one with the highest
    offset; its key and headers reach the dialects that read them.

    ``dialect``: a registered dialect or ``auto`` (detected per message). ``types``: column
    types per table for formats that carry none; ``keys``: key columns per table for producers
    that send key values without names; ``options``: dialect options (e.g. ``schema_dir`` for
    Confluent Avro). Or ``source``: a configured source, whose settings are used instead.

    Decoding runs in Python workers over Arrow batches; nothing is collected to the driver.
    The result's ``frame`` is what the apply functions take; ``events`` and ``rejected`` are
    views of it.
    """
    if source is None:
        source = _source(DEFAULT_SOURCE, dialect, types, keys, options)
    frame = decode_dataframe(raw, source.dialect, source.decoder_options(), source.name)
    return Decoded(frame)


def _source(
    name: str,
    dialect: str,
    types: Mapping[str, Mapping[str, str]] | None,
    keys: Mapping[str, Sequence[str]] | None,
    options: Mapping[str, Any] | None,
    replica_name: str | None = None,
) -> SourceConfig:
    doc = _source_doc(name, dialect, types, keys, options, replica_name)
    cfg = load_config({"sources": [doc]}, "(decode)")
    return cfg.sources[0]


def _source_doc(
    name: str,
    dialect: str,
    types: Mapping[str, Mapping[str, str]] | None,
    keys: Mapping[str, Sequence[str]] | None,
    options: Mapping[str, Any] | None,
    replica_name: str | None,
) -> dict[str, Any]:
    """A source's configuration mapping, as the YAML file would hold it."""
    doc: dict[str, Any] = {"name": name, "dialect": dialect}
    if types:
        doc["types"] = {t: dict(c) for t, c in types.items()}
    if keys:
        doc["keys"] = {t: list(k) for t, k in keys.items()}
    if options:
        doc["options"] = dict(options)
    if replica_name is not None:
        doc["replica_name"] = replica_name
    return doc


# ---------------------------------------------------------------------------- settings


def table_config(
    *,
    keys: Sequence[str] | None = None,
    sequence_by: Ordering | None = None,
    apply_as_deletes: Condition | None = None,
    apply_as_truncates: Condition | None = None,
    ignore_null_updates: bool = False,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    stored_as_scd_type: int | str = 1,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    name: str | None = None,
    deletes: str = "hard",
    table_properties: Mapping[str, str] | None = None,
) -> TableConfig:
    """A table's settings under ``apply_changes`` names.

    ``keys``: key columns (default: the keys the events carry or the replica records).
    ``sequence_by``: the column ordering a key's events (default ``sequence``, the producer's
    commit order), or several compared in turn: a list of names, or a ``Column`` of one
    column or ``struct`` of columns (any other expression is refused).
    ``apply_as_deletes``: a condition over the canonical event (``operation``,
    ``after['op']``, ``metadata['…']``…), as Spark SQL text or a ``Column``, marking row
    events applied as deletes, besides the producer's own deletes. ``apply_as_truncates``: one
    marking row events applied as a ``TRUNCATE`` of their table. ``ignore_null_updates``: a
    row event's ``NULL`` values leave the row's columns as they are. ``column_list`` /
    ``except_column_list``: the only columns written / columns not written (key columns
    always are). ``stored_as_scd_type``: 1 (current state, ``merge``) or 2 (history,
    ``scd2``). ``track_history_column_list`` / ``track_history_except_column_list``: with
    type 2, the columns whose changes open a new version. ``name``: the replica's name.
    ``deletes``: ``hard`` (rows removed) or ``soft`` (rows kept, ``_cdc.deleted`` set).
    ``table_properties``: Iceberg properties of the replica (e.g. ``{"format-version": "3"}``).
    """
    return _table(_table_doc(locals()), "(table_config)")


def _condition_text(value: Condition | None, name: str) -> str | None:
    """A condition as Spark SQL text (a ``Column`` as the SQL of its expression)."""
    if value is None or isinstance(value, str):
        return value
    if getattr(value, "_jc", None) is None:
        raise ConfigError(
            f"{name} must be Spark SQL text or a Column, got {type(value).__name__}",
            hint="e.g. \"after['op'] = 'D'\" or F.col('after')['op'] == 'D'",
        )
    from cdcflow.spark.columns import condition_sql

    return condition_sql(value, name)


def _ordering_names(value: Ordering | None) -> list[str] | None:
    """``sequence_by`` as column names (``None``: the producer's order)."""
    if value is None:
        return None
    if isinstance(value, str):
        return None if value == "sequence" else [value]
    if getattr(value, "_jc", None) is None:
        return [str(v) for v in value]  # type: ignore[union-attr]
    from cdcflow.spark.columns import column_names, column_sql

    names = column_names(value)  # type: ignore[arg-type]
    if names is None:
        raise ConfigError(
            f"sequence_by {column_sql(value)} is neither a column nor a struct of columns",  # type: ignore[arg-type]
            hint="order by columns of the row: sequence_by='version', ['epoch', 'seq'] or "
            "F.struct('epoch', 'seq')",
        )
    return names


def _table_doc(args: Mapping[str, Any]) -> dict[str, Any]:
    scd = str(args.get("stored_as_scd_type", 1))
    if scd not in ("1", "2"):
        raise ConfigError(
            f"stored_as_scd_type must be 1 (current state) or 2 (history), got "
            f"{args.get('stored_as_scd_type')!r}",
            hint="for a changelog of every event, use tables={name: {'mode': 'append'}}",
        )
    doc: dict[str, Any] = {"mode": "merge" if scd == "1" else "scd2"}
    ordering = _ordering_names(args.get("sequence_by"))
    if ordering is not None:
        doc["sequence_by"] = ordering
    for setting in ("apply_as_deletes", "apply_as_truncates"):
        condition = _condition_text(args.get(setting), setting)
        if condition is not None:
            doc[setting] = condition
    renamed = {
        "keys": "keys",
        "column_list": "columns",
        "except_column_list": "except_columns",
        "track_history_column_list": "track_history_columns",
        "track_history_except_column_list": "track_history_except_columns",
        "name": "name",
    }
    for arg, field in renamed.items():
        value = args.get(arg)
        if value is not None:
            doc[field] = list(value) if isinstance(value, list | tuple) else value
    if args.get("ignore_null_updates"):
        doc["ignore_null_updates"] = True
    if args.get("table_properties"):
        doc["table_properties"] = dict(args["table_properties"])
    if args.get("deletes", "hard") != "hard":
        doc["deletes"] = args["deletes"]
    return doc


def _table(doc: Mapping[str, Any], origin: str) -> TableConfig:
    cfg = load_config({"sources": [{"name": DEFAULT_SOURCE}], "tables": {"t": dict(doc)}}, origin)
    return cfg.tables["t"]


def pipeline_config(
    *,
    pipeline: str = "cdcflow",
    checkpoint: str = "./checkpoints/cdcflow",
    namespace: str = "cdc",
    catalog: Mapping[str, Any] | None = None,
    source: str = DEFAULT_SOURCE,
    dialect: str = "auto",
    types: Mapping[str, Mapping[str, str]] | None = None,
    options: Mapping[str, Any] | None = None,
    replica_name: str | None = None,
    keys: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
    sequence_by: Ordering | None = None,
    apply_as_deletes: Condition | None = None,
    apply_as_truncates: Condition | None = None,
    ignore_null_updates: bool = False,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    stored_as_scd_type: int | str = 1,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    deletes: str = "hard",
    table_properties: Mapping[str, str] | None = None,
    table_names: Mapping[str, str] | None = None,
    tables: Mapping[str, TableConfig | Mapping[str, Any]] | None = None,
    **settings: Any,
) -> PipelineConfig:
    """A pipeline configuration from keyword arguments: one source (``source``, ``dialect``,
    ``types``, ``options``, ``replica_name`` as in the YAML file) without a landing zone, and
    table settings under ``apply_changes`` names (see :func:`table_config`) for every table.

    ``keys`` is a list for every table, or a mapping per table name (which also names the
    key columns for producers that send key values without names). ``table_names`` renames
    replicas (``{"users": "customers"}``); ``tables`` gives whole entries per table (a
    ``TableConfig`` or the YAML form, e.g. ``{"audit": {"mode": "append"}}``). Other keyword
    arguments are top-level configuration keys (``consistency``, ``tombstone_retention``,
    ``parallel_tables``, ``outputs``, …). Unknown names and bad values raise ``ConfigError``
    naming them.
    """
    unknown = sorted(set(settings) - set(PipelineConfig.model_fields))
    if unknown:
        known = sorted({*_SETTING_NAMES, *PipelineConfig.model_fields} - {"sources"})
        raise ConfigError(
            f"invalid configuration (Python API): {unknown[0]}: unknown key"
            f"{did_you_mean(unknown[0], known) or '.'} Allowed keys: {', '.join(known)}"
        )
    per_table = dict(keys) if isinstance(keys, Mapping) else {}
    common = _table_doc(
        {
            "keys": None if isinstance(keys, Mapping) else keys,
            "sequence_by": sequence_by,
            "apply_as_deletes": apply_as_deletes,
            "apply_as_truncates": apply_as_truncates,
            "ignore_null_updates": ignore_null_updates,
            "column_list": column_list,
            "except_column_list": except_column_list,
            "stored_as_scd_type": stored_as_scd_type,
            "track_history_column_list": track_history_column_list,
            "track_history_except_column_list": track_history_except_column_list,
            "deletes": deletes,
            "table_properties": table_properties,
        }
    )
    entries: dict[str, Any] = {"default": common}
    for name in sorted(set(per_table) | set(table_names or {})):
        entry = dict(common)
        if name in per_table:
            entry["keys"] = list(per_table[name])
        if table_names and name in table_names:
            entry["name"] = table_names[name]
        entries[name] = entry
    for name, given in (tables or {}).items():
        entries[name] = (
            given.model_dump(exclude_defaults=True) if isinstance(given, TableConfig) else given
        )
    src = _source_doc(source, dialect, types, per_table, options, replica_name)
    doc: dict[str, Any] = {
        "pipeline": pipeline,
        "checkpoint": checkpoint,
        "namespace": namespace,
        "sources": [src],
        "tables": entries,
        **settings,
    }
    if catalog is not None:
        doc["catalog"] = dict(catalog)
    return load_config(doc, "(Python API)")


#: The keyword arguments of :func:`pipeline_config` beside the top-level configuration keys.
_SETTING_NAMES = tuple(n for n in inspect.signature(pipeline_config).parameters if n != "settings")


def _config(config: Config | None, settings: Mapping[str, Any]) -> PipelineConfig:
    if config is None:
        return pipeline_config(**settings)
    if settings:
        raise ConfigError(
            f"give a configuration or settings, not both (settings: {', '.join(sorted(settings))})",
            hint="put the settings in the configuration, or leave config out",
        )
    if isinstance(config, PipelineConfig):
        return config
    if isinstance(config, str | Path):
        return load_config_file(config)
    return load_config(config, "(Python API)")


# ---------------------------------------------------------------------------- applying


def session(config: Config | None = None, **settings: Any) -> SparkSession:
    """The SparkSession of a configuration (or of keyword arguments, see
    :func:`pipeline_config`), built as ``cdcflow run`` builds it — the configuration's
    catalog and ``spark`` settings, the Iceberg runtime, workers on this Python — so the
    catalog is given in one place. A session already running is reused and given the
    configuration's catalog (see :func:`pipeline`)."""
    from cdcflow.pipeline.session import open_session

    cfg = _config(config, settings)
    spark = _active()
    if spark is None:
        return open_session(cfg)
    bind_catalog(spark, cfg)
    return spark


def pipeline(
    config: Config | None = None, *, session: SparkSession | None = None, **settings: Any
) -> Pipeline:
    """The pipeline of a configuration (or of keyword arguments, see
    :func:`pipeline_config`) on ``session`` (default: the active session, else one built from
    the configuration), to start, apply from one's own ``foreachBatch``
    (:meth:`Pipeline.foreach_batch`) or read results (:meth:`Pipeline.table`,
    :meth:`Pipeline.dead_letters`, :meth:`Pipeline.history`).

    ``spark=`` is the configuration's ``spark:`` section, as in the YAML file (so
    ``pipeline(session=spark, **settings)`` takes a whole configuration mapping); a
    SparkSession given as ``spark=`` is taken as ``session``.

    The catalog is the configuration's: a session without a catalog of its name is given it;
    one whose catalog differs from the one the configuration names is refused
    (``CATALOG_MISMATCH``); a configuration without ``catalog`` uses the session's."""
    given = _session_of(session, settings)
    cfg = _config(config, settings)
    found = given or _active()
    if found is not None:
        bind_catalog(found, cfg)
    return Pipeline(cfg, found)


def _session_of(session: SparkSession | None, settings: dict[str, Any]) -> SparkSession | None:
    """``session``, or a SparkSession given as ``spark=`` (taken out of ``settings``, where
    ``spark`` is otherwise the configuration's ``spark:`` section)."""
    found = settings.get("spark")
    if found is None or isinstance(found, Mapping):
        return session
    if session is not None:
        raise ConfigError(
            "give the SparkSession once: session=",
            hint="spark= is the configuration's spark: section (master, conf, …)",
        )
    del settings["spark"]
    return found  # type: ignore[no-any-return]


def _active() -> SparkSession | None:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


class BatchApplier:
    """The ``foreachBatch`` function of one source: ``applier(df, batch_id)`` applies a
    micro-batch of raw messages, decoded rows or canonical events with the same guarantees as
    ``cdcflow run`` — a batch id already committed changes nothing, a crash mid-batch is
    completed when Spark replays the batch. It holds the pipeline's run lock until
    :meth:`close`."""

    def __init__(
        self,
        pipe: Pipeline,
        source: str | None = None,
        on_report: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.pipeline = pipe
        self.source = source
        self._runner = pipe.foreach_batch(source, on_report)

    def __call__(self, df: DataFrame | Decoded, batch_id: int) -> None:
        self._runner(df.frame if isinstance(df, Decoded) else df, batch_id)

    @property
    def checkpoint_location(self) -> str:
        """The checkpoint location for the streaming query, inside the pipeline's checkpoint
        folder (another location works too, but must stay the query's for good)."""
        return self.pipeline.checkpoint_location(self.source)

    @property
    def reports(self) -> list[BatchReport]:
        """What each batch applied so far did (counts, seconds per stage)."""
        return list(self._runner.reports)

    def close(self) -> None:
        """Give the pipeline's run lock back."""
        self.pipeline.close()

    def __enter__(self) -> BatchApplier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def foreach_batch(
    config: Config | None = None,
    *,
    source: str | None = None,
    session: SparkSession | None = None,
    on_report: Callable[[BatchReport], None] | None = None,
    **settings: Any,
) -> BatchApplier:
    """The function to give ``writeStream.foreachBatch`` (or to call with a DataFrame and a
    batch id) that applies the micro-batches of one source — the sole source unless named —
    of a configuration, or of keyword arguments (see :func:`pipeline_config`); ``session``
    as for :func:`pipeline`."""
    return BatchApplier(pipeline(config, session=session, **settings), source, on_report)


def start(
    data: DataFrame | Decoded,
    config: Config | None = None,
    *,
    source: str | None = None,
    follow: bool = False,
    on_report: Callable[[BatchReport], None] | None = None,
    **settings: Any,
) -> Pipeline:
    """Start the streaming queries of a pipeline whose source (the sole one unless named)
    reads ``data``: a streaming DataFrame of raw messages (decoded with the source's
    dialect), a :class:`Decoded` result, or canonical events. Other sources of a configuration
    read their landing zones. ``follow``: keep following (a trigger every
    ``follow_interval``); otherwise process what is available and stop. With ``metrics:
    {port: …}`` in the settings, the pipeline serves its Prometheus metrics, health endpoints
    and status page while it runs. Returns the running :class:`Pipeline`: ``.query`` (the
    ``StreamingQuery``), ``.wait()``, ``.stop()``."""
    frame = data.frame if isinstance(data, Decoded) else data
    if not frame.isStreaming:
        raise ConfigError(
            "start needs a streaming DataFrame (spark.readStream…)",
            hint="apply a batch DataFrame with foreach_batch(...)(df, batch_id)",
        )
    cfg = _config(config, settings)
    bind_catalog(frame.sparkSession, cfg)
    pipe = Pipeline(cfg, frame.sparkSession)
    name = source or (pipe.cfg.sources[0].name if len(pipe.cfg.sources) == 1 else None)
    if name is None:
        raise ConfigError(
            f"pipeline {pipe.cfg.pipeline!r} has {len(pipe.cfg.sources)} sources: name the one "
            "that reads the DataFrame",
            hint="sources: " + ", ".join(s.name for s in pipe.cfg.sources),
        )
    from cdcflow.observe.server import reporting, watch

    server = watch(pipe, pipe.cfg)
    try:
        pipe.start(follow, reporting(server, on_report), inputs={name: data})
    except BaseException:
        pipe.close()
        raise
    return pipe


def apply_changes(
    target: str,
    source: DataFrame,
    keys: Sequence[str],
    sequence_by: Ordering,
    *,
    apply_as_deletes: Condition | None = None,
    apply_as_truncates: Condition | None = None,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    stored_as_scd_type: int | str = 1,
    ignore_null_updates: bool = False,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    session: SparkSession | None = None,
    follow: bool = False,
    on_report: Callable[[BatchReport], None] | None = None,
    **settings: Any,
) -> RunResult | Pipeline:
    """Apply a DataFrame of change rows to the replica ``target``, as Databricks'
    ``apply_changes`` does: ``source`` holds one row per change, its columns the table's
    (``userId, name, city, operation, sequenceNum``), its types the replica's.

    ``keys``: the key columns; ``sequence_by``: the column (or columns, compared in turn; a
    name, names, or a ``Column`` of one column or a ``struct``) ordering each key's changes —
    integers, dates, timestamps or text. ``apply_as_deletes`` / ``apply_as_truncates``: a
    condition over the rows' columns (Spark SQL text or a ``Column``, e.g. ``"operation =
    'DELETE'"``) marking rows that delete their key / truncate the table; the others are
    upserts. ``column_list`` / ``except_column_list``: the only columns written / columns not
    written (key columns always are; the ordering and operation columns are written unless
    left out so). ``stored_as_scd_type``: 1 (current state) or 2 (history, with
    ``track_history_column_list`` / ``track_history_except_column_list``).
    ``ignore_null_updates``: a row's ``NULL`` values leave the columns as they are. Other
    keyword arguments are the pipeline's settings (:func:`pipeline_config`: ``namespace``,
    ``checkpoint``, ``pipeline``, ``catalog``, …).

    The rows become canonical events in Spark SQL and go through the batch function of
    ``cdcflow run``, with its guarantees (dedup, ordering, tombstones, the commit ledger,
    dead letters). A streaming ``source`` is applied by a streaming query through
    ``foreachBatch`` (``follow``: keep following); the started :class:`Pipeline` is returned
    (``.wait()`` gives the :class:`RunResult`). A batch ``source`` is applied as one batch
    (the next batch id of the pipeline's history) and its :class:`RunResult` returned.
    """
    from cdcflow.pipeline.changes import change_events

    if getattr(source, "isStreaming", None) is None:
        raise ConfigError(
            f"source must be a DataFrame of change rows, got {type(source).__name__}",
            hint="e.g. spark.read.table('cdc_feed') or spark.readStream.table('cdc_feed')",
        )
    given = _session_of(session, settings)
    order = _ordering_names(sequence_by)
    cfg = pipeline_config(
        keys=list(keys),
        ignore_null_updates=ignore_null_updates,
        column_list=column_list,
        except_column_list=except_column_list,
        stored_as_scd_type=stored_as_scd_type,
        track_history_column_list=track_history_column_list,
        track_history_except_column_list=track_history_except_column_list,
        **settings,
    )
    events = change_events(
        source, target, list(keys), order or [], apply_as_deletes, apply_as_truncates
    )
    spark = given or source.sparkSession
    bind_catalog(spark, cfg)
    pipe = Pipeline(cfg, spark)
    name = cfg.sources[0].name
    if events.isStreaming:
        pipe.start(follow, on_report, inputs={name: events})
        return pipe
    try:
        runner = pipe.foreach_batch(name, on_report)
        runner(events, pipe.next_batch(name))
    finally:
        pipe.close()
    return RunResult(reports=runner.reports)
