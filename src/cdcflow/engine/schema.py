"""Schema decisions: which columns a batch adds or widens, and which values cannot be stored.

Pure functions over canonical type names (no Spark): the engine plans, the Iceberg layer runs
the DDL. Every decision depends on the set of types seen and how many events carry each, never
on the order they come in or on their names: a new column takes the narrowest type that holds
every value seen (:func:`common_type`); when none does, the type that holds the most of the
batch's events, and the rest are refused as ``TYPE_CONFLICT`` until the column is widened or
the values' type declared, when a replay applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations

from cdcflow.types.canonical import decimal_type, parse_decimal_type, storage_type, widen

#: Integer types as the decimal of the digits they hold.
_INT_DIGITS = {"int": 10, "bigint": 19}
_NUMBERS = frozenset({"int", "bigint", "float", "double"})
#: At most this many types of one column are weighed subset by subset (beyond, one by one).
_SUBSETS_UP_TO = 8


def holds(column: str, value: str) -> bool:
    """Whether a column of canonical type ``column`` stores values of type ``value`` exactly."""
    if column == value:
        return True
    if storage_type(column) == storage_type(value) == "string":
        return True
    if column == "double" and value in ("int", "bigint", "float"):
        return True
    if column == "bigint" and value == "int":
        return True
    dc, dv = parse_decimal_type(column), parse_decimal_type(value)
    if dc and value in _INT_DIGITS:
        return dc[0] - dc[1] >= _INT_DIGITS[value]
    if dc and dv:
        return dv[1] <= dc[1] and dv[0] - dv[1] <= dc[0] - dc[1]
    if column.startswith("array<") and value.startswith("array<"):
        return holds(column[6:-1], value[6:-1])
    return False


def unify(a: str, b: str) -> str | None:
    """The narrowest type that holds values of types ``a`` and ``b`` (the same whichever comes
    first), ``None`` when no type does: integers and decimals as the decimal with room for
    both, integers and floating point as ``double``, text types as ``string``."""
    if a == b:
        return a
    if storage_type(a) == storage_type(b) == "string":
        return "string"
    if a.startswith("array<") and b.startswith("array<"):
        inner = unify(a[6:-1], b[6:-1])
        return f"array<{inner}>" if inner is not None else None
    if {a, b} <= _NUMBERS:
        if {a, b} == {"int", "bigint"}:
            return "bigint"
        return "double"
    da = parse_decimal_type(a) or ((_INT_DIGITS[a], 0) if a in _INT_DIGITS else None)
    db = parse_decimal_type(b) or ((_INT_DIGITS[b], 0) if b in _INT_DIGITS else None)
    if da is None or db is None:
        return None
    scale = max(da[1], db[1])
    digits = max(da[0] - da[1], db[0] - db[1])
    if digits + scale > 38:
        return None
    return decimal_type(digits + scale, scale)


def common_type(types: Iterable[str]) -> str | None:
    """The narrowest type holding values of every type given, ``None`` when none does (or
    none is given); the order of ``types`` does not matter."""
    found: str | None = None
    for t in sorted(set(types)):
        found = t if found is None else unify(found, t)
        if found is None:
            return None
    return found


@dataclass(frozen=True)
class Seen:
    """The events of a batch that carry a column with one type: how many, and the newest
    sequence among them."""

    events: int
    newest: str = ""


def choose_type(seen: Mapping[str, Seen]) -> str:
    """A new column's type for the types seen: the common type when there is one, else the
    type holding the most events, then the one holding the newest event, then the narrower
    (holding fewer of the types seen)."""
    found = common_type(seen)
    if found is not None:
        return found
    names = sorted(seen)
    if len(names) <= _SUBSETS_UP_TO:
        groups = [g for n in range(1, len(names)) for g in combinations(names, n)]
    else:
        groups = [(n,) for n in names]
    candidates = sorted({t for g in groups if (t := common_type(g)) is not None})

    def weight(t: str) -> tuple[int, str, int]:
        held = [u for u in seen if holds(t, u)]
        return (
            sum(seen[u].events for u in held),
            max(seen[u].newest for u in held),
            -len(held),
        )

    # only types equal in all three (two events of one sequence) fall back to the name
    return max(candidates, key=weight)


@dataclass
class SchemaPlan:
    """What a batch needs from a table's schema."""

    types: dict[str, str]  # column → canonical type after the change
    add: dict[str, str] = field(default_factory=dict)
    widen: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, set[str]] = field(default_factory=dict)  # column → rejected types
    reasons: dict[str, str] = field(default_factory=dict)


_HOW = (
    "widen the column (ALTER TABLE … ALTER COLUMN … TYPE; Iceberg allows int→bigint, "
    "float→double, decimal precision up) or declare the column's type in the source's types, "
    "then replay the dead letters"
)


def plan_schema(
    existing: Mapping[str, str] | None, seen: Mapping[str, Mapping[str, Seen]]
) -> SchemaPlan:
    """Decide column additions, widenings and conflicts for the types seen in a batch
    (column → type → its events). Columns keep the order they are seen in (the producer's
    column order); new ones follow the existing ones."""
    plan = SchemaPlan(types=dict(existing or {}))
    for col, counts in seen.items():
        if not counts:
            continue
        cur = plan.types.get(col)
        if cur is None:
            chosen = choose_type(counts)
            plan.types[col] = chosen
            if existing is not None:
                plan.add[col] = chosen
            bad = {t for t in counts if not holds(chosen, t)}
            if bad:
                held = sum(n.events for t, n in counts.items() if t not in bad)
                total = sum(n.events for n in counts.values())
                plan.conflicts[col] = bad
                plan.reasons[col] = (
                    f"new column {col!r} takes type {chosen}, which holds {held} of the "
                    f"{total} events of the batch that carry it; values of type "
                    f"{', '.join(sorted(bad))} cannot be stored in it without loss: {_HOW}"
                )
            continue
        reachable = [t for t in counts if holds(cur, t) or widen(cur, t)]
        target = common_type([cur, *reachable])
        if target is not None and target != cur and widen(cur, target) == target:
            plan.types[col] = target
            if existing is not None and col in existing:
                plan.widen[col] = target
        bad = {t for t in counts if not holds(plan.types[col], t)}
        if bad:
            plan.conflicts[col] = bad
            plan.reasons[col] = (
                f"column {col!r} is {plan.types[col]}; a value of type "
                f"{', '.join(sorted(bad))} cannot be stored in it without loss: {_HOW}"
            )
    return plan
