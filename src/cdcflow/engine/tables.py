"""Target tables: names, schemas, creation and safe evolution."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcflow.engine.sql import lit, q
from cdcflow.types import parse_decimal_type, spark_type, widen

#: Metadata column of merge-mode replicas.
CDC_STRUCT = (
    "struct<sequence:string, row_sequence:string, column_sequences:map<string,string>, "
    "operation:string, source_timestamp:timestamp, event_id:string, fingerprint:bigint, "
    "deleted:boolean, applied_at:timestamp>"
)
#: Metadata column of append-mode changelogs.
CHANGELOG_STRUCT = (
    "struct<operation:string, sequence:string, source_timestamp:timestamp, event_id:string, "
    "fingerprint:bigint, transaction_id:string, partial:boolean, applied_at:timestamp>"
)
KEY_PROPERTY = "cdcflow.key-columns"
TRUNCATE_PROPERTY = "cdcflow.truncated-before"

_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


def canonical_from_spark(simple: str) -> str:
    """Canonical type of an existing Spark column type (``simpleString``)."""
    if simple == "struct<x:double,y:double>":
        return "point"
    if simple.startswith("array<"):
        return f"array<{canonical_from_spark(simple[6:-1])}>"
    return simple


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
    """Decide column additions, widenings and conflicts for the types seen in a batch."""
    plan = SchemaPlan(types=dict(existing or {}))
    for col, vtypes in sorted(seen.items()):
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


def read_columns(
    spark: Any, ident: str, skip: Iterable[str] = ("_cdc",), image: str | None = None
) -> dict[str, str] | None:
    """Canonical types of a table's columns, or ``None`` if it does not exist. With ``image``
    (a changelog's ``after``), the fields of that struct column instead."""
    if not table_exists(spark, ident):
        return None
    schema = spark.table(ident).schema
    if image is not None:
        schema = schema[image].dataType
        skip = ("_empty",)
    skipped = set(skip)
    return {
        f.name: canonical_from_spark(f.dataType.simpleString())
        for f in schema.fields
        if f.name not in skipped
    }


def table_exists(spark: Any, ident: str) -> bool:
    """Whether an Iceberg table exists (three-part name)."""
    try:
        return bool(spark.catalog.tableExists(ident))
    except Exception:
        try:
            spark.table(ident).schema  # noqa: B018
            return True
        except Exception:
            return False


def read_properties(spark: Any, ident: str) -> dict[str, str]:
    """Table properties."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()
    return {r["key"]: r["value"] for r in rows}


def set_property(spark: Any, ident: str, key: str, value: str) -> None:
    """Set one table property."""
    spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ({lit(key)} = {lit(value)})")


def ensure_namespace(spark: Any, catalog: str, namespace: str) -> None:
    """Create a namespace if missing."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {q(catalog)}.{q(namespace)}")


def create_table(
    spark: Any,
    ident: str,
    columns: Mapping[str, str],
    *,
    meta_struct: str = CDC_STRUCT,
    keys: Iterable[str] = (),
    extra_props: Mapping[str, str] | None = None,
) -> None:
    """Create a table (if missing) with typed columns and the ``_cdc`` metadata struct."""
    cols = [f"{q(c)} {spark_type(t)}" for c, t in columns.items()]
    cols.append(f"_cdc {meta_struct}")
    props = dict(_TABLE_PROPERTIES)
    key_list = list(keys)
    if key_list:
        props[KEY_PROPERTY] = ",".join(key_list)
    props.update(extra_props or {})
    prop_sql = ", ".join(f"{lit(k)}={lit(v)}" for k, v in props.items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {ident} ({', '.join(cols)}) USING iceberg "
        f"TBLPROPERTIES ({prop_sql})"
    )


def evolve(spark: Any, ident: str, plan: SchemaPlan, prefix: str = "") -> None:
    """Apply a plan's additions and widenings (each an Iceberg schema update)."""
    if plan.add:
        cols = ", ".join(f"{prefix}{q(c)} {spark_type(t)}" for c, t in plan.add.items())
        spark.sql(f"ALTER TABLE {ident} ADD COLUMNS ({cols})")
    for c, t in plan.widen.items():
        spark.sql(f"ALTER TABLE {ident} ALTER COLUMN {prefix}{q(c)} TYPE {spark_type(t)}")
