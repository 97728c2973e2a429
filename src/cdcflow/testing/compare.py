"""Comparing Iceberg replicas with the oracle's expected rows (tests, ``cdcflow demo``).

Reading a replica back collects its rows to the driver: meant for test-sized tables only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdcflow.spark.sql import q

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
    """Differences between a replica and the oracle's rows."""

    table: str
    expected: int
    actual: int
    missing: list[tuple]
    unexpected: list[tuple]

    @property
    def equal(self) -> bool:
        """Whether the replica equals the oracle."""
        return not self.missing and not self.unexpected


def diff_table(
    table: str,
    expected: Iterable[Mapping[str, Any]],
    actual: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
) -> TableDiff:
    """Compare expected and actual rows over ``columns``."""
    e = normalize_rows(expected, columns)
    a = normalize_rows(actual, columns)
    from collections import Counter

    ce, ca = Counter(e), Counter(a)
    missing = list((ce - ca).elements())
    unexpected = list((ca - ce).elements())
    return TableDiff(table, len(e), len(a), missing[:20], unexpected[:20])


def history_shape(rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a history table (with ``__START_AT``/``__END_AT``) in the oracle's form
    (:func:`cdcflow.testing.oracle.history`): each version's ordinal among its key's
    versions, and whether the next version, a delete or nothing ends it."""
    from cdcflow.testing.oracle import ENDS, VERSION

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
                    VERSION: i,
                    ENDS: ends,
                }
            )
    return out
