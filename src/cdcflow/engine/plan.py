"""What a batch needs from each target table: pure decisions from the batch's metadata, the
table's current state and its settings (:class:`TableSettings`, built once from the
configuration; no Spark).

For each target a :class:`TablePlan` says how it is written (merge, append or scd2), under which
keys, which columns it gains or widens, which events the engine rejects (type conflicts,
misshapen sort keys, unknown keys), whether a ``TRUNCATE`` applies, and which table properties
change. The Iceberg layer runs the DDL; :mod:`cdcflow.engine.stage` turns the plans into the
batch's SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from cdcflow.engine.meta import TableMeta
from cdcflow.engine.schema import SchemaPlan, plan_schema
from cdcflow.iceberg.layouts import (
    KEY_PROPERTY,
    KEYLESS_PROPERTY,
    SHAPE_PROPERTY,
    TRUNCATE_PROPERTY,
    VALIDITY_COLUMNS,
    canonical_from_spark,
)

if TYPE_CHECKING:
    from cdcflow.config import TableConfig

Mode = Literal["merge", "append", "scd2"]
KeySource = Literal["configured", "recorded", "batch", "source", "matched"]


def _frozen(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(value)
    if isinstance(value, Mapping):
        return MappingProxyType(dict(value))
    return value


@dataclass(frozen=True)
class TableSettings:
    """Every configured setting of one target table that the engine decides with, built once
    from its configuration (:meth:`of`). A field named like a :class:`~cdcflow.config.
    TableConfig` field is taken from it: a new setting is added to the configuration model and
    here, under the same name.

    ``keys``: the key columns (``None``: from the replica or the events; ``"none"``: the
    table has none, its replica is a multiset of rows, see :mod:`cdcflow.engine.multiset`);
    ``except_columns`` are never written, or only ``columns`` are (key columns always are);
    ``track_history_columns``/``track_history_except_columns`` choose an scd2 table's tracked
    columns; ``sequence_by`` names the columns ordering the table's events;
    ``table_properties``: the configured Iceberg properties, planned where the table's differ.
    """

    target: str
    #: the replica's name (the target's unless configured)
    name: str = ""
    mode: Mode = "merge"
    keys: tuple[str, ...] | Literal["none"] | None = None
    deletes: Literal["hard", "soft"] = "hard"
    except_columns: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    track_history_columns: tuple[str, ...] | None = None
    track_history_except_columns: tuple[str, ...] | None = None
    sequence_by: tuple[str, ...] = ()
    table_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _frozen(getattr(self, f.name)))
        if not self.name:
            object.__setattr__(self, "name", self.target)

    @classmethod
    def of(cls, target: str, cfg: TableConfig) -> TableSettings:
        """The settings of ``target`` from its configuration (YAML and API alike)."""
        given = {f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)}
        return cls(target=target, **given)

    @property
    def soft_deletes(self) -> bool:
        """Whether a delete keeps its row, marked deleted."""
        return self.deletes == "soft"

    @property
    def keyless(self) -> bool:
        """Whether the table has no key (``keys: none``)."""
        return self.keys == "none"

    @property
    def key_columns(self) -> tuple[str, ...] | None:
        """The configured key columns (``None`` for none configured, or none at all)."""
        return None if self.keys == "none" else self.keys


@dataclass(frozen=True)
class TableState:
    """What the engine needs to know of an existing table: canonical column types (for a
    changelog, the fields of its ``after`` image) and properties."""

    columns: Mapping[str, str]
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TablePlan:
    """The decisions for one target table in one batch."""

    target: str
    name: str
    mode: Mode
    meta: TableMeta
    exists: bool
    schema: SchemaPlan
    keys: tuple[str, ...] | None = None
    key_source: KeySource | None = None
    soft_deletes: bool = False
    #: events at or below this sequence are older than a ``TRUNCATE`` and dropped
    watermark: str = ""
    #: a ``TRUNCATE`` newer than the table's: rows older than it are deleted first
    truncate: str | None = None
    bad_shapes: frozenset[str] = frozenset()
    shape: str | None = None
    #: table properties to set (sequence shape, key columns, truncate watermark)
    properties: Mapping[str, str] = field(default_factory=dict)
    #: why row events cannot be applied (no keys known, keys the replica cannot take), else
    #: ``None``; ``key_code`` is their dead letters' code
    key_problem: str | None = None
    key_code: str = "KEY_UNKNOWN"
    #: a table without a key: its replica is a multiset of rows (:mod:`cdcflow.engine.multiset`)
    keyless: bool = False
    #: the source table the replica holds, and other tables whose events would land in it
    identity: SourceIdentity | None = None
    foreign: frozenset[SourceIdentity] = frozenset()
    #: scd2: the data columns whose changes open a new version (``None``: all of them)
    tracked: tuple[str, ...] | None = None
    #: columns of the row image ordering the key's events instead of ``sequence`` (compared
    #: in turn), and their types
    sequence_by: tuple[str, ...] = ()
    sequence_types: tuple[str | None, ...] = ()

    @property
    def keyed(self) -> bool:
        """Whether the table is written per key (merge or scd2) and its keys are known."""
        return self.mode != "append" and self.keys is not None

    @property
    def foreign_problem(self) -> str | None:
        """Why events of :attr:`foreign` tables are refused."""
        if not self.foreign or self.identity is None:
            return None
        others = ", ".join(sorted(describe(i) for i in self.foreign))
        return (
            f"events of {others} would land in replica {self.name!r}, which holds "
            f"{describe(self.identity)}: two tables never share a replica; keep them apart "
            "with the source's replica_name (e.g. '{source}__{table}' or "
            "'{database}_{table}') or tables.<name>.name, then replay the dead letters"
        )

    @property
    def multiset(self) -> bool:
        """Whether the table is kept without a key, as a multiset of rows, and can be."""
        return self.keyless and self.key_problem is None

    @property
    def writes_rows(self) -> bool:
        """Whether events of this table are written (else only DDL, or rejections)."""
        if self.mode == "append":
            return True
        known = self.keys is not None or self.multiset
        return known and (self.meta.row_events > 0 or self.truncate is not None)

    @property
    def creates(self) -> bool:
        """Whether the table is created by this batch."""
        return not self.exists and (self.mode == "append" or self.writes_rows)


@dataclass(frozen=True)
class BatchTables:
    """One batch's table plans, grouped by how their rows are written."""

    #: every plan, by target
    plans: Mapping[str, TablePlan]
    #: merge tables written per key
    merge: tuple[TablePlan, ...]
    #: scd2 tables written per key
    history: tuple[TablePlan, ...]
    #: the tables without a key, kept as multisets of rows
    multiset: tuple[TablePlan, ...]

    @classmethod
    def of(cls, plans: Sequence[TablePlan]) -> BatchTables:
        """The groups of ``plans``."""
        return cls(
            plans=MappingProxyType({p.target: p for p in plans}),
            merge=tuple(p for p in plans if p.mode == "merge" and p.keys and p.writes_rows),
            history=tuple(p for p in plans if p.mode == "scd2" and p.keys and p.writes_rows),
            multiset=tuple(p for p in plans if p.multiset and p.writes_rows),
        )

    @property
    def keyed(self) -> tuple[TablePlan, ...]:
        """The tables written per key (merge and scd2): key values, key rules, rows."""
        return (*self.merge, *self.history)


def existing_columns(state: TableState | None, mode: Mode) -> dict[str, str] | None:
    """Canonical types of a table's data columns (``None`` when it does not exist)."""
    if state is None:
        return None
    skip = {"merge": {"_cdc"}, "append": {"_empty"}, "scd2": {"_cdc", *VALIDITY_COLUMNS}}[mode]
    return {c: canonical_from_spark(t) for c, t in state.columns.items() if c not in skip}


def shapes_fit(a: str, b: str) -> bool:
    """Whether two sequence shapes (comma-separated kinds, ``*`` for unknown) can compare."""
    xs, ys = a.split(","), b.split(",")
    return len(xs) == len(ys) and all(x == y or "*" in (x, y) for x, y in zip(xs, ys, strict=True))


def merge_shapes(a: str, b: str) -> str:
    """``a`` with its unknown kinds filled from ``b`` (shapes that fit)."""
    return ",".join(y if x == "*" else x for x, y in zip(a.split(","), b.split(","), strict=True))


def decide_shape(
    recorded: str | None, shapes: Mapping[str, int]
) -> tuple[frozenset[str], str | None]:
    """(shapes to reject, the table's shape after the batch). The table's shape is recorded on
    first sight (the most common one of that batch) and refined where it had unknown kinds;
    events whose sort fields do not fit it cannot be ordered with the rest."""
    if not shapes:
        return frozenset(), recorded
    reference = recorded
    if reference is None:
        reference = max(shapes.items(), key=lambda kv: (kv[1], kv[0]))[0]
    bad = frozenset(s for s in shapes if not shapes_fit(s, reference))
    merged = reference
    for s in sorted(shapes):
        if s not in bad:
            merged = merge_shapes(merged, s)
    return bad, merged


#: Table property: the identity of a replica's source table (JSON: source, database, schema,
#: table), so two tables of the producers never share a replica silently.
IDENTITY_PROPERTY = "cdcflow.identity"

#: A source table's identity: (source, database, schema, table); ``None`` where the producer
#: does not say.
SourceIdentity = tuple[str, str | None, str | None, str | None]


def _fits(a: SourceIdentity, b: SourceIdentity) -> bool:
    pairs = zip(a[1:], b[1:], strict=True)
    return a[0] == b[0] and all(x is None or y is None or x == y for x, y in pairs)


def _refine(a: SourceIdentity, b: SourceIdentity) -> SourceIdentity:
    return (
        a[0],
        a[1] if a[1] is not None else b[1],
        a[2] if a[2] is not None else b[2],
        a[3] if a[3] is not None else b[3],
    )


def decide_identity(
    recorded: SourceIdentity | None, seen: Mapping[SourceIdentity, int]
) -> tuple[SourceIdentity | None, frozenset[SourceIdentity]]:
    """(the replica's identity after the batch, identities whose events must not be written
    to it). A replica holds the rows of one source table: the one it recorded, else the most
    frequent of the batch. A field the producer leaves out fits any value (and is filled in
    from the events that give it); a different value is another table."""
    if not seen:
        return recorded, frozenset()
    reference = recorded
    if reference is None:
        reference = max(seen.items(), key=lambda kv: (kv[1], tuple(x or "" for x in kv[0])))[0]
    accepted = reference
    rejected = set()
    for ident in sorted(seen, key=lambda i: tuple(x or "" for x in i)):
        if _fits(accepted, ident):
            accepted = _refine(accepted, ident)
        else:
            rejected.add(ident)
    return accepted, frozenset(rejected)


def describe(ident: SourceIdentity) -> str:
    """``source:database.schema.table`` (absent parts left out)."""
    return f"{ident[0]}:" + ".".join(p for p in ident[1:] if p)


def resolve_keys(
    configured: Sequence[str] | None,
    recorded: str | None,
    batch_sets: set[tuple[str, ...]],
    source_keys: Sequence[str] | None,
    matched: Sequence[str] | None,
) -> tuple[tuple[str, ...] | None, KeySource | None]:
    """A merge table's key columns, first found: the table's configuration, the replica's
    recorded key columns, the key names events carry (the widest set when producers disagree),
    a source's configured keys, names matched from positional key values."""
    if configured:
        return tuple(configured), "configured"
    if recorded:
        return tuple(recorded.split(",")), "recorded"
    if batch_sets:
        return max(batch_sets, key=lambda s: (len(s), s)), "batch"
    if source_keys:
        return tuple(source_keys), "source"
    if matched:
        return tuple(matched), "matched"
    return None, None


def recorded_identity(properties: Mapping[str, str]) -> SourceIdentity | None:
    """The identity a replica recorded, ``None`` when it has none (or it is unreadable)."""
    text = properties.get(IDENTITY_PROPERTY)
    if not text:
        return None
    try:
        doc = json.loads(text)
        return (str(doc["source"]), doc.get("database"), doc.get("schema"), doc.get("table"))
    except (ValueError, KeyError, TypeError):
        return None


def identity_json(ident: SourceIdentity) -> str:
    """The table property form of an identity."""
    return json.dumps(
        {"source": ident[0], "database": ident[1], "schema": ident[2], "table": ident[3]},
        sort_keys=True,
    )


def ordered_truncate(plan: TablePlan, newest: str) -> TablePlan:
    """The plan of a table ordered by ``sequence_by`` columns, given the batch's newest
    ``TRUNCATE`` in their order (:func:`decide` cannot know it: it takes a query over the
    typed columns): the ``TRUNCATE`` applies when it is past the replica's watermark. An scd2
    table keeps what came before a ``TRUNCATE`` (it closes versions), an append table takes
    it as a row: theirs are unchanged."""
    if plan.mode != "merge" or newest <= plan.watermark:
        return plan
    properties = {**plan.properties, TRUNCATE_PROPERTY: newest}
    return replace(plan, truncate=newest, watermark=newest, properties=properties)


def decide(
    settings: TableSettings,
    meta: TableMeta,
    state: TableState | None,
    *,
    source: str | None = None,
    source_keys: Sequence[str] | None = None,
    matched_keys: Sequence[str] | None = None,
) -> TablePlan:
    """The plan of one target table for a batch, from its settings (``source``: the configured
    source whose events these are; the replica's identity is checked when given;
    ``source_keys``: that source's keys of the table; ``matched_keys``: key names matched from
    positional key values). A table ordered by ``sequence_by`` columns gets its ``TRUNCATE``
    from :func:`ordered_truncate` (the producer's sequences do not compare with theirs)."""
    target, name, mode = settings.target, settings.name, settings.mode
    configured_keys = settings.key_columns
    table_properties = settings.table_properties
    props = dict(state.properties) if state is not None else {}
    new_props: dict[str, str] = {
        k: v for k, v in (table_properties or {}).items() if props.get(k) != v
    }
    identity: SourceIdentity | None = None
    foreign: frozenset[SourceIdentity] = frozenset()
    if source is not None and meta.identities:
        seen = {(source, *ident): sub.events for ident, sub in meta.identities.items()}
        recorded = recorded_identity(props)
        identity, foreign = decide_identity(recorded, seen)
        if identity is not None and identity != recorded:
            new_props[IDENTITY_PROPERTY] = identity_json(identity)
        if foreign:
            meta = meta.merged({i[1:] for i in seen if i not in foreign})  # type: ignore[misc]
    bad, shape = decide_shape(props.get(SHAPE_PROPERTY), meta.shapes)
    order = settings.sequence_by
    if order:
        # the columns order the events: the producer's sort fields do not matter
        bad, shape = frozenset(), props.get(SHAPE_PROPERTY)
    keys, key_source = (
        resolve_keys(
            configured_keys, props.get(KEY_PROPERTY), meta.key_sets, source_keys, matched_keys
        )
        if mode != "append" and not settings.keyless
        else (None, None)
    )
    dropped = set(settings.except_columns)
    if settings.columns is not None:
        dropped |= set(meta.seen) - set(settings.columns)
    dropped -= set(configured_keys or ()) | set(keys or ())
    written = {c: t for c, t in meta.seen.items() if c not in dropped}
    schema = plan_schema(existing_columns(state, mode), written)
    # an ordering column that is not written still has a type
    ordering = plan_schema(None, {c: meta.seen.get(c, {}) for c in order if c in dropped})
    sequence_types = tuple(schema.types.get(c) or ordering.types.get(c) for c in order)
    if shape is not None and shape != props.get(SHAPE_PROPERTY):
        new_props[SHAPE_PROPERTY] = shape
    common = {
        "target": target,
        "name": name,
        "meta": meta,
        "exists": state is not None,
        "schema": schema,
        "bad_shapes": bad,
        "shape": shape,
        "identity": identity,
        "foreign": foreign,
        "sequence_by": order,
        "sequence_types": sequence_types,
    }
    if mode == "append":
        return TablePlan(mode="append", properties=new_props, **common)  # type: ignore[arg-type]

    watermark = props.get(TRUNCATE_PROPERTY, "")
    truncate = None
    if mode == "scd2":
        # history keeps what came before a TRUNCATE: the truncate closes versions instead
        watermark = ""
    else:
        newest = None if order else meta.truncate
        if newest and newest > watermark:
            truncate = watermark = newest
            new_props[TRUNCATE_PROPERTY] = truncate
    problem, code = None, "KEY_UNKNOWN"
    recorded_keys = props.get(KEY_PROPERTY)
    if settings.keyless:
        if state is not None and props.get(KEYLESS_PROPERTY) != "true":
            problem, code = (
                (
                    f"replica {name!r} holds one row per key ({recorded_keys or 'keys'}): a table "
                    f"without a key (tables.{name}.keys: none) needs a replica of its own; set "
                    f"tables.{name}.name, or drop the replica to rebuild it"
                ),
                "KEYS_CHANGED",
            )
        elif state is None:
            new_props[KEYLESS_PROPERTY] = "true"
    elif props.get(KEYLESS_PROPERTY) == "true":
        problem, code = (
            (
                f"replica {name!r} holds table {name!r} without a key (keys: none), as a multiset "
                f"of rows: it cannot take keys ({', '.join(keys or ()) or 'none known'}); set "
                f"tables.{name}.keys: none again, or tables.{name}.name to start a keyed replica"
            ),
            "KEYS_CHANGED",
        )
        keys = key_source = None
    elif keys is None:
        problem = (
            f"no key columns known for table {name!r}: the producer sends none; set "
            f"tables.{name}.keys (none for a table without a primary key whose producer sends "
            "whole before images) or the source's keys in the configuration"
        )
    else:
        for k in keys:
            schema.types.setdefault(k, "string")
        if state is not None and props.get(KEY_PROPERTY) != ",".join(keys):
            new_props[KEY_PROPERTY] = ",".join(keys)
    tracked = None
    if mode == "scd2":
        data = [c for c in schema.types if c not in set(keys or ())]
        if settings.track_history_columns is not None:
            tracked = tuple(c for c in data if c in set(settings.track_history_columns))
        elif settings.track_history_except_columns is not None:
            tracked = tuple(c for c in data if c not in set(settings.track_history_except_columns))
    return TablePlan(
        mode=mode,
        tracked=tracked,
        keys=keys,
        key_source=key_source,
        soft_deletes=settings.soft_deletes,
        watermark=watermark,
        truncate=truncate,
        properties=new_props,
        key_problem=problem,
        key_code=code,
        keyless=settings.keyless,
        **common,  # type: ignore[arg-type]
    )
