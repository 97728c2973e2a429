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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcflow.api_config import (
    DEFAULT_SOURCE,
    Condition,
    Config,
    Ordering,
    config_of,
    ordering_names,
    pipeline_config,
    source_of,
    table_config,
)
from cdcflow.config import PipelineConfig, SourceConfig, TableConfig
from cdcflow.decode.spark import KAFKA_SCHEMA, Decoded, decode_dataframe
from cdcflow.errors import ConfigError
from cdcflow.iceberg.ledger import require_ledger
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.report import BatchReport, RunResult
from cdcflow.pipeline.session import bind_catalog
from cdcflow.spark.kind import require_classic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
        source = source_of(DEFAULT_SOURCE, dialect, types, keys, options)
    frame = decode_dataframe(raw, source.dialect, source.decoder_options(), source.name)
    return Decoded(frame)


# ---------------------------------------------------------------------------- applying


def session(config: Config | None = None, **settings: Any) -> SparkSession:
    """The SparkSession of a configuration (or of keyword arguments, see
    :func:`pipeline_config`), built as ``cdcflow run`` builds it — the configuration's
    catalog and ``spark`` settings, the Iceberg runtime, workers on this Python — so the
    catalog is given in one place. A session already running is reused and given the
    configuration's catalog (see :func:`pipeline`)."""
    from cdcflow.pipeline.session import open_session

    cfg = config_of(config, settings)
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
    cfg = config_of(config, settings)
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
    pipe = pipeline(config, session=session, **settings)
    # a Connect server runs the function in a process of its own, whose batches do not say
    # which streaming query runs them: cdcflow could not tell a query that numbers its
    # batches anew (a checkpoint of its own) from the one that applies the source
    require_classic(pipe.spark, "cdcflow.api.foreach_batch (one's own foreachBatch)")
    return BatchApplier(pipe, source, on_report)


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
    cfg = config_of(config, settings)
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
    spark = given or source.sparkSession
    require_ledger(spark)
    order = ordering_names(sequence_by)
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
