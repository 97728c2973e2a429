"""Comparing Iceberg replicas with the oracle's expected rows (tests, ``cdcflow demo``).

:func:`compare_replicas` reads every replica of a workload, compares it with the oracle
(current rows, or versions for an ``scd2`` history) and says the first difference. Reading a
replica back collects its rows to the driver: meant for test-sized tables only.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from cdcflow.simulation import oracle
from cdcflow.spark.sql import q

if TYPE_CHECKING:
    from cdcflow.simulation.workload import Workload

_TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"


def _norm(value: Any) -> Any:
    """One comparable form for a typed value, from the oracle or from Spark."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, Decimal):
        return value.normalize()
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_norm(v) for v in value)
    return value


def normalize_rows(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[tuple]:
    """Rows as sorted tuples over ``columns`` (missing columns are ``None``)."""
    out = [tuple(_norm(r.get(c)) for c in columns) for r in rows]
    return sorted(out, key=repr)


def read_replica(
    spark: Any, ident: str, columns: Sequence[str], where: str = ""
) -> list[dict[str, Any]]:
    """Rows of a replica over ``columns``; timestamps read as UTC text so the Python time zone
    does not matter."""
    schema = {f.name: f.dataType.simpleString() for f in spark.table(ident).schema.fields}
    exprs = []
    for c in columns:
        t = schema.get(c)
        if t is None:
            exprs.append(f"NULL AS {q(c)}")
        elif t in ("timestamp", "timestamp_ntz"):
            exprs.append(f'date_format({q(c)}, "{_TS_FORMAT}") AS {q(c)}')
        else:
            exprs.append(q(c))
    sql = f"SELECT {', '.join(exprs)} FROM {ident}"
    if where:
        sql += f" WHERE {where}"
    return [r.asDict(recursive=True) for r in spark.sql(sql).collect()]


@dataclass(frozen=True)
class TableDiff:
    """Differences between a replica and the oracle's rows (at most 20 of each side, as
    tuples over ``columns``)."""

    table: str
    expected: int
    actual: int
    missing: list[tuple]
    unexpected: list[tuple]
    columns: tuple[str, ...] = ()
    key: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        """Whether the replica equals the oracle."""
        return not self.missing and not self.unexpected

    def first_difference(self) -> str:
        """The first differing row, said column by column ("" when equal): a missing row and
        an unexpected one with the same key are one row with other values."""
        if self.equal:
            return ""
        head = f"{self.table}: {self.expected} rows expected, {self.actual} in the replica"
        at = [self.columns.index(k) for k in self.key if k in self.columns]
        by_key = {tuple(u[i] for i in at): u for u in self.unexpected}
        for m in self.missing if at else ():
            u = by_key.get(tuple(m[i] for i in at))
            if u is not None:
                said = "; ".join(
                    f"{c} expected {a!r}, replica {b!r}"
                    for c, a, b in zip(self.columns, m, u, strict=True)
                    if a != b
                )
                return f"{head}; key {self._key(m, at)}: {said}"
        if self.missing:
            return f"{head}; missing: {self._row(self.missing[0])}"
        return f"{head}; unexpected: {self._row(self.unexpected[0])}"

    def _key(self, row: tuple, at: Sequence[int]) -> str:
        return ", ".join(f"{self.columns[i]}={row[i]!r}" for i in at)

    def _row(self, row: tuple) -> str:
        if len(self.columns) != len(row):
            return repr(row)
        return ", ".join(f"{c}={v!r}" for c, v in zip(self.columns, row, strict=True))


def diff_table(
    table: str,
    expected: Iterable[Mapping[str, Any]],
    actual: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    key: Sequence[str] = (),
) -> TableDiff:
    """Compare expected and actual rows over ``columns`` (``key``: the columns that name a
    row, for saying which row differs)."""
    ce, ca = Counter(normalize_rows(expected, columns)), Counter(normalize_rows(actual, columns))
    missing, unexpected = list((ce - ca).elements()), list((ca - ce).elements())
    return TableDiff(
        table, ce.total(), ca.total(), missing[:20], unexpected[:20], tuple(columns), tuple(key)
    )


@dataclass(frozen=True)
class ReplicaComparison:
    """Every replica of a workload against the oracle, table by table (sorted by name)."""

    tables: tuple[TableDiff, ...]

    @property
    def equal(self) -> bool:
        """Whether every replica equals the oracle."""
        return all(d.equal for d in self.tables)

    def first_difference(self) -> str:
        """The first differing row of the first replica that differs ("" when all equal),
        and the names of the other replicas that differ."""
        bad = [d for d in self.tables if not d.equal]
        if not bad:
            return ""
        said = bad[0].first_difference()
        if len(bad) > 1:
            said += f" (also differing: {', '.join(d.table for d in bad[1:])})"
        return said

    def assert_equal(self) -> None:
        """Raise ``AssertionError`` saying the first difference unless every replica equals
        the oracle (a test's check)."""
        if not self.equal:
            raise AssertionError(self.first_difference())


def compare_replicas(
    spark: Any,
    workload: Workload,
    namespace: str,
    *,
    catalog: str = "cdc",
    prefix: str = "",
    histories: Collection[str] = (),
    empty_may_be_absent: bool = False,
    unordered_json: bool = False,
) -> ReplicaComparison:
    """Read each table of ``workload`` from ``catalog.namespace.<prefix><table>`` and compare it
    with the oracle: its current rows, or, for the tables named in ``histories`` (kept as
    ``scd2``), its versions. ``empty_may_be_absent``: a table the oracle leaves empty need not
    exist; ``unordered_json``: a ``json`` column's objects compare without their keys' order
    (what passed through a map, such as a protobuf ``Struct``)."""
    current = oracle.apply(workload)
    versions = oracle.history(workload) if histories else {}
    out = []
    for name, table in sorted(workload.tables.items()):
        ident = f"{catalog}.{namespace}.{prefix}{name}"
        cols = [*table.key, *(c for c in table.columns if c not in table.key)]
        history = name in histories
        expected = versions[name] if history else list(current[name].values())
        if empty_may_be_absent and not expected and not spark.catalog.tableExists(ident):
            continue
        if history:
            rows = read_replica(spark, ident, [*cols, "__START_AT", "__END_AT"])
            actual = history_shape(rows, table.key)
            cols, key = [*cols, oracle.VERSION, oracle.ENDS], [*table.key, oracle.VERSION]
        else:
            actual, key = read_replica(spark, ident, cols), list(table.key)
        if unordered_json:
            objects = [c for c, t in table.columns.items() if t == "json"]
            expected, actual = _sorted_keys(expected, objects), _sorted_keys(actual, objects)
        out.append(diff_table(f"{prefix}{name}", expected, actual, cols, key))
    return ReplicaComparison(tuple(out))


def _sorted_keys(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[dict]:
    """Rows whose JSON ``columns`` are re-serialized with sorted object keys."""
    return [
        {
            **r,
            **{
                c: orjson.dumps(orjson.loads(r[c]), option=orjson.OPT_SORT_KEYS)
                for c in columns
                if r.get(c) is not None
            },
        }
        for r in rows
    ]


def history_shape(rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a history table (with ``__START_AT``/``__END_AT``) in the oracle's form
    (:func:`cdcflow.simulation.oracle.history`): each version's ordinal among its key's
    versions, and whether the next version, a delete or nothing ends it."""
    by_key: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(tuple(_norm(r[k]) for k in key), []).append(r)
    out = []
    for versions in by_key.values():
        versions.sort(key=lambda r: r["__START_AT"])
        for i, r in enumerate(versions):
            following = versions[i + 1]["__START_AT"] if i + 1 < len(versions) else None
            end = r["__END_AT"]
            ends = None if end is None else "next" if end == following else "delete"
            out.append(
                {
                    **{c: v for c, v in r.items() if not c.startswith("__")},
                    oracle.VERSION: i,
                    oracle.ENDS: ends,
                }
            )
    return out
