"""What a batch holds, per target table: one aggregate over the decoded batch.

The only thing a batch collects to the driver before planning is this aggregate: per target
table and operation the count, whether any event is partial, the distinct ``types`` maps, the
distinct key-name sets, sequence shapes, the highest ``TRUNCATE`` and whether keys travel by
position only; plus the number of rejected messages, of segments and of messages skipped on
purpose (Kafka tombstones, by reason). The aggregate is also the
first action on the batch, so it is where decoding happens. It also gives what observing a
pipeline needs without a job of its own: each table's newest source commit time and the
rejected messages by error code.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from cdcflow import event
from cdcflow.decode.columns import SEGMENT, SKIPPED, SKIPPED_WHY
from cdcflow.engine.schema import Seen
from cdcflow.spark.sql import lit, view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

#: ``metadata`` entry in which a dialect states the shape of the fields its ``sequence`` came
#: from (e.g. ``n,s,n``), when that shape may differ between events of one table.
SHAPE_KEY = "sequence_shape"
#: ``metadata`` entry holding key values whose column names the message does not give, as a
#: JSON array of wire strings in primary-key order.
KEY_VALUES = "key_values"
#: The operation vocabularies of :mod:`cdcflow.event`, in a fixed order (for SQL text).
ROW_OPERATIONS: tuple[str, ...] = tuple(sorted(event.ROW_OPERATIONS))
MARKERS: tuple[str, ...] = tuple(sorted(event.MARKER_OPERATIONS))


#: (database, schema, table) of an event, as its producer names them.
Identity = tuple[str | None, str | None, str | None]
_PLACEHOLDER = re.compile(r"\{(source|database|schema|table)\}")


def _pieces(template: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        out.append((template[pos : m.start()], m.group(1)))
        pos = m.end()
    out.append((template[pos:], None))
    return out


def target_expr(template: str = "{table}", source: str = "") -> str:
    """SQL of an event's replica name: ``template`` filled from the event (``{source}`` is the
    configured source's name), lower case, characters other than letters, digits and ``_``
    turned into ``_``; empty for events without a table (markers)."""
    parts: list[str] = []
    for literal, name in _pieces(template):
        if literal:
            parts.append(lit(literal))
        if name == "source":
            parts.append(lit(source))
        elif name is not None:
            parts.append(f"coalesce(`{name}`, '')")
    name = f"regexp_replace(lower(concat({', '.join(parts)})), '[^a-z0-9_]', '_')"
    return f"CASE WHEN coalesce(`table`, '') = '' THEN '' ELSE {name} END"


def target_name(
    table: str,
    template: str = "{table}",
    source: str = "",
    database: str | None = None,
    schema: str | None = None,
) -> str:
    """:func:`target_expr` in Python."""
    if not table:
        return ""
    values = {"source": source, "database": database or "", "schema": schema or "", "table": table}
    text = "".join(lit_ + (values[f] if f else "") for lit_, f in _pieces(template))
    return "".join(
        ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in text.lower()
    )


def with_batch_columns(df: DataFrame, source: str = "", template: str = "{table}") -> DataFrame:
    """Decoded rows plus the batch's working columns: ``_fp`` (event fingerprint, for exact
    duplicates), ``_source`` (the configured source) and ``_target`` (replica name)."""
    return df.selectExpr(
        "*",
        "xxhash64(coalesce(`table`, ''), coalesce(operation, ''), coalesce(sequence, ''), "
        "to_json(key), to_json(before), to_json(after), partial) AS _fp",
        f"{lit(source)} AS _source",
        f"{target_expr(template, source)} AS _target",
    )


@dataclass
class TableMeta:
    """One target table's figures in a batch."""

    ops: dict[str, int] = field(default_factory=dict)
    partial: bool = False
    #: column → type → the events carrying it
    seen: dict[str, dict[str, Seen]] = field(default_factory=dict)
    key_sets: set[tuple[str, ...]] = field(default_factory=set)
    shapes: dict[str, int] = field(default_factory=dict)
    truncate: str | None = None
    positional_keys: bool = False
    #: the newest source commit time (``timestamp``) among the table's events
    newest: dt.datetime | None = None
    #: the same figures per identity (database, schema, table) seen under this name
    identities: dict[Identity, TableMeta] = field(default_factory=dict)

    def see(self, column: str, type_name: str, found: Seen) -> None:
        """Count events carrying ``column`` with ``type_name``."""
        types = self.seen.setdefault(column, {})
        known = types.get(type_name)
        if known is not None:
            found = Seen(known.events + found.events, max(known.newest, found.newest))
        types[type_name] = found

    def fold(self, r: Row) -> None:
        """Add one row of :func:`aggregate`."""
        n = int(r["n"])
        op = r["operation"]
        self.ops[op] = self.ops.get(op, 0) + n
        self.partial = self.partial or bool(r["has_partial"])
        for found in r["type_sets"]:
            if found["types"] is None:
                continue
            for col, typ in orjson.loads(found["types"]).items():
                self.see(col, typ, Seen(int(found["n"]), found["newest"] or ""))
        for names in r["key_sets"]:
            self.key_sets.add(tuple(names))
        if r["shape"] is not None:
            self.shapes[r["shape"]] = self.shapes.get(r["shape"], 0) + n
        if op == "TRUNCATE" and r["max_seq"] is not None:
            self.truncate = max(self.truncate or "", r["max_seq"])
        self.positional_keys = self.positional_keys or bool(r["positional_keys"])
        self.newest = _later(self.newest, r["newest_ts"])

    def merged(self, identities: set[Identity]) -> TableMeta:
        """The figures of some of this table's identities only."""
        out = TableMeta()
        for ident, sub in self.identities.items():
            if ident not in identities:
                continue
            for op, n in sub.ops.items():
                out.ops[op] = out.ops.get(op, 0) + n
            out.partial = out.partial or sub.partial
            for col, types in sub.seen.items():
                for typ, found in types.items():
                    out.see(col, typ, found)
            out.key_sets |= sub.key_sets
            for shape, n in sub.shapes.items():
                out.shapes[shape] = out.shapes.get(shape, 0) + n
            if sub.truncate:
                out.truncate = max(out.truncate or "", sub.truncate)
            out.positional_keys = out.positional_keys or sub.positional_keys
            out.newest = _later(out.newest, sub.newest)
            out.identities[ident] = sub
        return out

    @property
    def events(self) -> int:
        """Events of the table in the batch."""
        return sum(self.ops.values())

    @property
    def row_events(self) -> int:
        """Row events (inserts, updates, deletes, upserts, snapshot reads)."""
        return sum(n for op, n in self.ops.items() if op in ROW_OPERATIONS)

    @property
    def keyed_events(self) -> int:
        """Events that need the table's keys: row events and ``TRUNCATE`` (a truncate of a
        table whose keys are unknown waits with its rows, so a replay applies both in order)."""
        return self.row_events + self.ops.get("TRUNCATE", 0)


@dataclass
class BatchMeta:
    """Per-table figures of a batch, from the metadata aggregate(s)."""

    tables: dict[str, TableMeta] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    segments: int = 0
    rejected: int = 0
    #: the files (``origin``) the batch's rows came from
    origins: set[str] = field(default_factory=set)
    #: rejected messages by error code
    rejected_codes: dict[str, int] = field(default_factory=dict)
    #: messages without a change, skipped on purpose (Kafka tombstones…), by reason
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, rows: list[Row]) -> None:
        """Fold in rows of :func:`aggregate`."""
        for r in rows:
            self.origins.update(o for o in r["origins"] if o is not None)
            n = int(r["n"])
            if r["_rejected"]:
                self.rejected += n
                code = r["error_code"]
                self.rejected_codes[code] = self.rejected_codes.get(code, 0) + n
                continue
            target, op = r["_target"], r["operation"]
            if op == SEGMENT:
                self.segments += n
                continue
            if op == SKIPPED:
                why = r["skipped_why"] or ""
                self.skipped[why] = self.skipped.get(why, 0) + n
                continue
            self.ops[op] += n
            if not target:
                continue
            t = self.tables.setdefault(target, TableMeta())
            t.fold(r)
            ident: Identity = (r["database"], r["schema"], r["table"])
            t.identities.setdefault(ident, TableMeta()).fold(r)

    @property
    def events(self) -> int:
        """Events of the batch (markers included, rejections and segments not)."""
        return sum(self.ops.values())


def aggregate(spark: SparkSession, frame: DataFrame) -> list[Row]:
    """The metadata aggregate of a decoded frame (with :func:`with_batch_columns`): one query
    of one grouping, a row per table, operation, identity, error code and distinct ``types``
    map, each with its events, newest sequence and newest source commit time
    (:meth:`BatchMeta.add` folds the rows, so a table whose events carry several ``types`` maps
    comes in several rows); messages skipped on purpose by reason."""
    return spark.sql(
        "SELECT _target, operation, error_code IS NOT NULL AS _rejected, error_code, "
        f"metadata[{lit(SHAPE_KEY)}] AS shape, database, schema, `table`, count(*) AS n, "
        "max(partial) AS has_partial, "
        "array(named_struct('types', to_json(types), 'n', count(*), 'newest', max(sequence))) "
        "AS type_sets, collect_set(array_sort(map_keys(key))) AS key_sets, "
        "max(sequence) AS max_seq, max(`timestamp`) AS newest_ts, "
        f"max(key IS NULL AND metadata[{lit(KEY_VALUES)}] IS NOT NULL) AS positional_keys, "
        f"collect_set(origin) AS origins, CASE WHEN operation = {lit(SKIPPED)} "
        f"THEN metadata[{lit(SKIPPED_WHY)}] END AS skipped_why FROM {view(frame, 'meta')} "
        "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, to_json(types), skipped_why"
    ).collect()


def _later(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    return b if a is None else a if b is None else max(a, b)


def batch_meta(spark: SparkSession, frame: DataFrame) -> BatchMeta:
    """:class:`BatchMeta` of a decoded frame."""
    meta = BatchMeta()
    meta.add(aggregate(spark, frame))
    return meta
