"""Schema decisions: which columns a batch adds or widens, and which values cannot be stored.

Pure functions over canonical type names (no Spark): the engine plans, the Iceberg layer runs
the DDL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cdcflow.types import parse_decimal_type, spark_type, widen


def holds(column: str, value: str) -> bool:
    """Whether a column of canonical type ``column`` stores values of type ``value`` exactly."""
    if column == value:
        return True
    if spark_type(column) == spark_type(value) == "string":
        return True
    if column == "double" and value in ("int", "bigint", "float"):
        return True
    if column == "bigint" and value == "int":
        return True
    dc, dv = parse_decimal_type(column), parse_decimal_type(value)
    if dc and value in ("int", "bigint"):
        return dc[0] - dc[1] >= (10 if value == "int" else 19)
    if dc and dv:
        return dv[1] <= dc[1] and dv[0] - dv[1] <= dc[0] - dc[1]
    if column.startswith("array<") and value.startswith("array<"):
        return holds(column[6:-1], value[6:-1])
    return False


def unify(a: str, b: str) -> str | None:
    """One type for a new column seen with values of types ``a`` and ``b``."""
    if holds(a, b):
        return a
    if holds(b, a):
        return b
    w = widen(a, b)
    if w:
        return w
    if {a, b} <= {"int", "bigint", "double", "float"}:
        return "double"
    return None


@dataclass
class SchemaPlan:
    """What a batch needs from a table's schema."""

    types: dict[str, str]  # column → canonical type after the change
    add: dict[str, str] = field(default_factory=dict)
    widen: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, set[str]] = field(default_factory=dict)  # column → rejected types
    reasons: dict[str, str] = field(default_factory=dict)


def plan_schema(
    existing: Mapping[str, str] | None, seen: Mapping[str, Iterable[str]]
) -> SchemaPlan:
    """Decide column additions, widenings and conflicts for the types seen in a batch.
    Columns keep the order they are seen in (the producer's column order); new ones follow
    the existing ones."""
    plan = SchemaPlan(types=dict(existing or {}))
    for col, vtypes in seen.items():
        for vt in sorted(set(vtypes)):
            cur = plan.types.get(col)
            if cur is None:
                plan.types[col] = vt
                if existing is not None:
                    plan.add[col] = vt
                continue
            if holds(cur, vt):
                continue
            w = widen(cur, vt)
            if w and w != cur:
                plan.types[col] = w
                if existing is not None and col in existing:
                    plan.widen[col] = w
                elif col in plan.add:
                    plan.add[col] = w
                continue
            if existing is None or col not in existing:
                u = unify(cur, vt)
                if u:
                    plan.types[col] = u
                    if col in plan.add:
                        plan.add[col] = u
                    continue
            plan.conflicts.setdefault(col, set()).add(vt)
            plan.reasons[col] = (
                f"column {col!r} is {cur}; a value of type {vt} cannot be stored in it without "
                f"loss (allowed widenings: int→bigint, float→double, decimal precision up)"
            )
    return plan
