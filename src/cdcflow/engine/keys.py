"""Key names for key values that travel by position only.

Some producers send a row's key as values without names (a CockroachDB key array next to a
delete, a Kafka key). Names come from configuration or the replica's recorded key columns
(:func:`cdcflow.engine.plan.resolve_keys`); when neither knows them, they are matched against
the row images of the same batch: the column at position ``i`` is the one whose value equals
the ``i``-th key value in every event of the table that carries both. The match is taken only
when it is unambiguous (one column per position, all different); the plan then records it on
the replica, so later batches know.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cdcflow.engine.meta import KEY_VALUES, ROW_OPERATIONS
from cdcflow.spark.sql import lit, string_array, view

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_ROW_OPS = "(" + ", ".join(lit(o) for o in ROW_OPERATIONS) + ")"


def candidates_sql(events: str, targets: Iterable[str]) -> str:
    """Per (target, position): the columns whose value equals the key value at that position
    in every event carrying both a positional key and a row image."""
    return f"""
        WITH kv AS (
          SELECT _target, p.pos AS pos, p.v AS v, img FROM (
            SELECT _target, from_json(metadata[{lit(KEY_VALUES)}], 'array<string>') AS kvs,
                   CASE WHEN operation = 'DELETE' THEN before ELSE after END AS img
            FROM {events}
            WHERE array_contains({string_array(targets)}, _target)
              AND operation IN {_ROW_OPS} AND metadata[{lit(KEY_VALUES)}] IS NOT NULL)
          LATERAL VIEW posexplode(kvs) p AS pos, v
          WHERE img IS NOT NULL AND p.v IS NOT NULL
        ),
        total AS (SELECT _target, pos, count(*) AS n FROM kv GROUP BY _target, pos),
        hit AS (
          SELECT _target, pos, col, count(*) AS n FROM kv
          LATERAL VIEW explode(map_keys(map_filter(img, (c, x) -> x = v))) m AS col
          GROUP BY _target, pos, col
        )
        SELECT h._target AS target, h.pos AS pos, h.col AS col
        FROM hit h JOIN total t ON h._target = t._target AND h.pos = t.pos AND h.n = t.n
    """


def unambiguous(found: Iterable[tuple[int, str]]) -> tuple[str, ...] | None:
    """Key names from (position, column) candidates: one column per position from 0, all
    different; else ``None``."""
    by_pos: dict[int, set[str]] = {}
    for pos, col in found:
        by_pos.setdefault(pos, set()).add(col)
    if not by_pos or sorted(by_pos) != list(range(len(by_pos))):
        return None
    if any(len(cols) != 1 for cols in by_pos.values()):
        return None
    names = tuple(next(iter(by_pos[i])) for i in range(len(by_pos)))
    return names if len(set(names)) == len(names) else None


def match_keys(
    spark: SparkSession, events: DataFrame, targets: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """Key names matched unambiguously for ``targets`` (one small query; only column names
    come back to the driver)."""
    wanted = sorted(set(targets))
    if not wanted:
        return {}
    rows = spark.sql(candidates_sql(view(events, "keymatch"), wanted)).collect()
    found: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        found.setdefault(r["target"], []).append((int(r["pos"]), r["col"]))
    out: dict[str, tuple[str, ...]] = {}
    for target, pairs in found.items():
        names = unambiguous(pairs)
        if names is not None:
            out[target] = names
    return out
