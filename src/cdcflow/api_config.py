"""The Python API's settings as the configuration ``cdcflow run`` reads: keyword arguments,
with the names Spark users know from ``apply_changes`` where the concept is the same, turned
into the :class:`~cdcflow.config.PipelineConfig` the YAML file validates into (conditions and
orderings given as ``Column`` turned into their SQL and names first)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from cdcflow.config import PipelineConfig, SourceConfig, TableConfig, load_config, load_config_file
from cdcflow.errors import ConfigError, did_you_mean
from cdcflow.spark.kind import refuse_connect_column

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Source name given by :func:`pipeline_config` when none is.
DEFAULT_SOURCE = "main"

#: A configuration: given as it is, as a mapping, or as a YAML file.
Config = PipelineConfig | Mapping[str, Any] | str | Path
#: A condition over canonical events: Spark SQL text or a ``pyspark.sql.Column``.
Condition: TypeAlias = "str | Column"
#: The columns ordering a key's events: a name, names, or a ``Column`` (column or struct).
Ordering: TypeAlias = "str | Sequence[str] | Column"


def source_of(
    name: str,
    dialect: str,
    types: Mapping[str, Mapping[str, str]] | None,
    keys: Mapping[str, Sequence[str]] | None,
    options: Mapping[str, Any] | None,
    replica_name: str | None = None,
) -> SourceConfig:
    """A source of the API's settings (what :func:`cdcflow.api.decode` decodes with)."""
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
    refuse_connect_column(value, name)
    if getattr(value, "_jc", None) is None:
        raise ConfigError(
            f"{name} must be Spark SQL text or a Column, got {type(value).__name__}",
            hint="e.g. \"after['op'] = 'D'\" or F.col('after')['op'] == 'D'",
        )
    from cdcflow.spark.columns import condition_sql

    return condition_sql(value, name)


def ordering_names(value: Ordering | None) -> list[str] | None:
    """``sequence_by`` as column names (``None``: the producer's order)."""
    if value is None:
        return None
    if isinstance(value, str):
        return None if value == "sequence" else [value]
    refuse_connect_column(value, "sequence_by")
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
    ordering = ordering_names(args.get("sequence_by"))
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


def config_of(config: Config | None, settings: Mapping[str, Any]) -> PipelineConfig:
    """The configuration given (a ``PipelineConfig``, a mapping or a YAML file), or the one
    ``settings`` make; not both."""
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
