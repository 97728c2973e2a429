"""What a batch holds, per target table: one aggregate over the decoded batch.

The only thing a batch collects to the driver before planning is this aggregate: per target
table and operation the count, whether any event is partial, the distinct ``types`` maps, the
distinct key-name sets, sequence shapes, the highest ``TRUNCATE`` and whether keys travel by
position only; plus the number of rejected messages and of segments. The aggregate is also the
first action on the batch, so it is where decoding happens.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from cdcflow.spark.sql import lit, view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

#: ``operation`` of rows that are segments of a split message, not events.
SEGMENT = "SEGMENT"
#: ``metadata`` entry in which a dialect states the shape of the fields its ``sequence`` came
#: from (e.g. ``n,s,n``), when that shape may differ between events of one table.
SHAPE_KEY = "sequence_shape"
#: ``metadata`` entry holding key values whose column names the message does not give, as a
#: JSON array of wire strings in primary-key order.
KEY_VALUES = "key_values"
ROW_OPERATIONS = ("INSERT", "UPDATE", "DELETE", "UPSERT", "SNAPSHOT")
MARKERS = ("BEGIN", "COMMIT", "RESOLVED")


def target_expr() -> str:
    """Default replica name of an event's table: lower case, other characters → ``_``."""
    return "regexp_replace(lower(coalesce(`table`, '')), '[^a-z0-9_]', '_')"


def target_name(table: str) -> str:
    """:func:`target_expr` in Python."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in table.lower())
    return out or "_"


def with_batch_columns(df: DataFrame) -> DataFrame:
    """Decoded rows plus the batch's working columns: ``_fp`` (event fingerprint, for exact
    duplicates) and ``_target`` (replica name)."""
    return df.selectExpr(
        "*",
        "xxhash64(coalesce(`table`, ''), coalesce(operation, ''), coalesce(sequence, ''), "
        "to_json(key), to_json(before), to_json(after), partial) AS _fp",
        f"{target_expr()} AS _target",
    )


@dataclass
class TableMeta:
    """One target table's figures in a batch."""

    ops: dict[str, int] = field(default_factory=dict)
    partial: bool = False
    seen: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    key_sets: set[tuple[str, ...]] = field(default_factory=set)
    shapes: dict[str, int] = field(default_factory=dict)
    truncate: str | None = None
    positional_keys: bool = False

    @property
    def events(self) -> int:
        """Events of the table in the batch."""
        return sum(self.ops.values())

    @property
    def row_events(self) -> int:
        """Row events (inserts, updates, deletes, upserts, snapshot reads)."""
        return sum(n for op, n in self.ops.items() if op in ROW_OPERATIONS)


@dataclass
class BatchMeta:
    """Per-table figures of a batch, from the metadata aggregate(s)."""

    tables: dict[str, TableMeta] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    segments: int = 0
    rejected: int = 0

    def add(self, rows: list[Row]) -> None:
        """Fold in rows of :func:`aggregate`."""
        for r in rows:
            n = int(r["n"])
            if r["_rejected"]:
                self.rejected += n
                continue
            target, op = r["_target"], r["operation"]
            if op == SEGMENT:
                self.segments += n
                continue
            self.ops[op] += n
            if not target:
                continue
            t = self.tables.setdefault(target, TableMeta())
            t.ops[op] = t.ops.get(op, 0) + n
            t.partial = t.partial or bool(r["has_partial"])
            for text in r["type_sets"]:
                for col, typ in orjson.loads(text).items():
                    t.seen[col].add(typ)
            for names in r["key_sets"]:
                t.key_sets.add(tuple(names))
            if r["shape"] is not None:
                t.shapes[r["shape"]] = t.shapes.get(r["shape"], 0) + n
            if op == "TRUNCATE" and r["max_seq"] is not None:
                t.truncate = max(t.truncate or "", r["max_seq"])
            t.positional_keys = t.positional_keys or bool(r["positional_keys"])

    @property
    def events(self) -> int:
        """Events of the batch (markers included, rejections and segments not)."""
        return sum(self.ops.values())


def aggregate(spark: SparkSession, frame: DataFrame) -> list[Row]:
    """The metadata aggregate of a decoded frame (with :func:`with_batch_columns`)."""
    return spark.sql(
        "SELECT _target, operation, error_code IS NOT NULL AS _rejected, "
        f"metadata[{lit(SHAPE_KEY)}] AS shape, count(*) AS n, max(partial) AS has_partial, "
        "collect_set(to_json(types)) AS type_sets, "
        "collect_set(array_sort(map_keys(key))) AS key_sets, max(sequence) AS max_seq, "
        f"max(key IS NULL AND metadata[{lit(KEY_VALUES)}] IS NOT NULL) AS positional_keys "
        f"FROM {view(frame, 'meta')} GROUP BY 1, 2, 3, 4"
    ).collect()


def batch_meta(spark: SparkSession, frame: DataFrame) -> BatchMeta:
    """:class:`BatchMeta` of a decoded frame."""
    meta = BatchMeta()
    meta.add(aggregate(spark, frame))
    return meta
