"""The database as the oracle: PostgreSQL values and replica values in one comparable form
(the type mapping of ``docs/dialects/debezium.md``), the source tables now and at every
transaction boundary, replicas now and at every Iceberg snapshot, and their comparison.

Reading replicas collects their rows to the driver: for test-sized tables only.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any

from cdcflow.spark.sql import q

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

#: Debezium's days per month when it turns an interval into microseconds (365.25 / 12).
DAYS_PER_MONTH = 365.25 / 12.0


@dataclass(frozen=True)
class TypeRule:
    """How one PostgreSQL type reaches a replica (Debezium's defaults: ``decimal.handling.
    mode=precise``, ``time.precision.mode=adaptive``, ``interval.handling.mode=numeric``)."""

    postgres: str
    replica: str
    rule: str


#: The type mapping, in the order ``docs/dialects/debezium.md`` lists it.
TYPE_MAPPING: tuple[TypeRule, ...] = (
    TypeRule("smallint, integer", "int", "same number"),
    TypeRule("bigint", "bigint", "same number; an int column widened to bigint widens"),
    TypeRule("numeric(p,s), p ≤ 38", "decimal(p,s)", "same number, every digit"),
    TypeRule(
        "numeric (no precision)",
        "decimal(38,18)",
        "same number; a value with more than 18 fractional or 20 integer digits is "
        "dead-lettered (BAD_VALUE) unless the column is declared text; NaN and ±Infinity "
        "arrive as NULL (Debezium sends null)",
    ),
    TypeRule("real", "float", "same 32-bit float, NaN and ±Infinity included"),
    TypeRule("double precision", "double", "same 64-bit float, NaN and ±Infinity included"),
    TypeRule("boolean", "boolean", "same"),
    TypeRule("text, varchar", "string", "same text"),
    TypeRule("enum", "string", "the label"),
    TypeRule("uuid", "string", "lower-case text"),
    TypeRule(
        "timestamptz",
        "timestamp",
        "same instant, microseconds; infinity and -infinity become 9999-12-31 23:59:59.999999 "
        "and 0001-01-01 00:00:00 UTC, as Spark's own PostgreSQL reader gives them",
    ),
    TypeRule(
        "timestamp", "timestamp_ntz", "same wall-clock time, microseconds; infinities as above"
    ),
    TypeRule("date", "date", "same day; infinity and -infinity become 9999-12-31 and 0001-01-01"),
    TypeRule("time", "string", "HH:MM:SS[.ffffff]; 24:00:00 stays 24:00:00"),
    TypeRule(
        "interval",
        "bigint",
        "Debezium's microseconds: a month counts 30.4375 days, computed in double precision "
        "(interval.handling.mode=string gives ISO 8601 text in a string column instead)",
    ),
    TypeRule("jsonb", "string", "the JSON text PostgreSQL prints (jsonb's own key order)"),
    TypeRule("bytea", "binary", "same bytes"),
    TypeRule("text[] (one dimension)", "array<string>", "same elements, NULL elements kept"),
    TypeRule(
        "a column with a DEFAULT, set to NULL",
        "(the column's type)",
        "NULL when the JSON converter has replace.null.with.default=false; with its default "
        "(true) the converter sends the column's DEFAULT instead, and the replica holds that",
    ),
    TypeRule(
        "TOASTed text an update leaves unchanged",
        "(the column's type)",
        "kept: the update is partial and leaves the column's value as it was",
    ),
)


def kind(pg_type: str, typtype: str = "b") -> str:
    """The comparison kind of a PostgreSQL column type (``format_type`` text)."""
    if typtype == "e":
        return "enum"
    if pg_type.startswith("numeric"):
        return "decimal"
    if pg_type.startswith(("character varying", "character(", "text")) and "[]" not in pg_type:
        return "text"
    if pg_type.endswith("[]"):
        return "array"
    return {
        "smallint": "int",
        "integer": "int",
        "bigint": "int",
        "real": "float",
        "double precision": "double",
        "boolean": "bool",
        "timestamp with time zone": "timestamptz",
        "timestamp without time zone": "timestamp",
        "date": "date",
        "time without time zone": "time",
        "interval": "interval",
        "uuid": "text",
        "jsonb": "text",
        "bytea": "bytes",
    }.get(pg_type, "text")


_TS = 'YYYY-MM-DD"T"HH24:MI:SS.US'
#: PostgreSQL's infinities → the ends of a replica's range (the type mapping's rule).
_LAST, _FIRST = "9999-12-31T23:59:59.999999", "0001-01-01T00:00:00.000000"
#: Enough digits for any decimal a replica holds (the default context keeps 28).
_WIDE = Context(prec=100)


def source_expr(column: str, k: str, hashed: bool = False, prefix: str = "") -> str:
    """SQL over a PostgreSQL column (of the relation ``prefix`` names) giving what
    :func:`normal` takes."""
    c = f'{prefix}"{column}"'
    if hashed:
        return f"encode(sha256(convert_to({c}, 'UTF8')), 'hex')"
    if k in ("timestamptz", "timestamp", "date"):
        text = {
            "timestamptz": f"to_char({c} AT TIME ZONE 'UTC', '{_TS}')",
            "timestamp": f"to_char({c}, '{_TS}')",
            "date": f"{c}::text",
        }[k]
        last, first = (_LAST, _FIRST) if k != "date" else (_LAST[:10], _FIRST[:10])
        return (
            f"CASE WHEN {c} = 'infinity' THEN '{last}' WHEN {c} = '-infinity' THEN '{first}' "
            f"ELSE {text} END"
        )
    if k == "interval":
        fields = ("year", "month", "day", "hour", "minute", "microseconds")
        return "ARRAY[" + ", ".join(f"extract({f} from {c})" for f in fields) + "]"
    if k in ("text", "enum", "time"):
        return f"{c}::text"
    return c


def replica_expr(column: str, spark_type: str | None, hashed: bool = False) -> str:
    """Spark SQL over a replica column giving what :func:`normal` takes."""
    c = q(column)
    if spark_type is None:
        return f"NULL AS {c}"
    if hashed:
        return f"sha2({c}, 256) AS {c}"
    if spark_type in ("timestamp", "timestamp_ntz"):
        return f"date_format({c}, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\") AS {c}"
    if spark_type == "date":
        return f"CAST({c} AS string) AS {c}"
    return c


_TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def debezium_interval(fields: Sequence[Any]) -> int:
    """An interval's microseconds as Debezium's numeric mode computes them, from PostgreSQL's
    (year, month, day, hour, minute, microseconds) fields: the JDBC driver's seconds as a
    double, months of 30.4375 days, double arithmetic, truncated."""
    years, months, days, hours, minutes = (int(f) for f in fields[:5])
    micros = int(fields[5])
    whole = int(micros / 1_000_000) if micros >= 0 else -int(-micros / 1_000_000)
    seconds = float(whole) + float(micros - whole * 1_000_000) / 1_000_000.0
    n_days = (years * 12 + months) * DAYS_PER_MONTH + days
    n_seconds = (((n_days * 24 + hours) * 60) + minutes) * 60 + seconds
    return int(n_seconds * 1e6)


def normal(value: Any, k: str, side: str) -> Any:
    """One comparable form of a value of comparison kind ``k``, read from PostgreSQL
    (``side`` ``source``) or from a replica (``replica``)."""
    if value is None:
        return None
    if k == "decimal":
        d = Decimal(value)
        # Debezium sends NaN (and a numeric's infinities) as null
        return d.normalize(_WIDE) if d.is_finite() else None
    if k in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return "NaN"  # equal to itself, unlike the float
        return struct.unpack("f", struct.pack("f", v))[0] if k == "float" else v
    if k == "interval" and side == "source":
        return None if value[0] is None else debezium_interval(value)
    if k == "time":
        m = _TIME.match(str(value))
        if not m:
            return str(value)
        h, mi, s, frac = m.groups()
        return f"{h}:{mi}:{s}.{(frac or '').ljust(6, '0')}"
    if k == "bytes":
        return bytes(value)
    if k == "array":
        return tuple(value)
    return value


@dataclass(frozen=True)
class Column:
    """A source column: name, PostgreSQL type, comparison kind."""

    name: str
    pg_type: str
    kind: str


def columns(conn: psycopg.Connection[Any], table: str) -> list[Column]:
    """A table's columns now."""
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typtype
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum""",
        (f"public.{table}",),
    ).fetchall()
    return [Column(str(n), str(t), kind(str(t), str(tt))) for n, t, tt in rows]


Row = tuple[Any, ...]


def _rows(
    cur: Iterable[Sequence[Any]], cols: Sequence[Column], side: str, start: int = 0
) -> Iterator[Row]:
    for r in cur:
        yield tuple(normal(r[start + i], c.kind, side) for i, c in enumerate(cols))


def source_rows(
    conn: psycopg.Connection[Any], table: str, cols: Sequence[Column], hashed: frozenset[str]
) -> list[Row]:
    """``SELECT *`` of a table in comparable form (``hashed`` columns as SHA-256)."""
    exprs = ", ".join(source_expr(c.name, c.kind, c.name in hashed) for c in cols)
    cur = conn.execute(f"SELECT {exprs} FROM public.{table}")
    return list(_rows(cur, cols, "source"))


@dataclass
class Boundaries:
    """A table's states at the transaction boundaries that changed it, in commit order:
    ``seqs[i]`` is the commit's place in ``live_commits`` and ``fingerprints[i]`` the state's
    fingerprint after it (index 0: the empty table before any commit)."""

    table: str
    columns: list[Column]
    key: tuple[int, ...]
    seqs: list[int] = field(default_factory=list)
    fingerprints: list[int] = field(default_factory=list)
    final: dict[Row, Row] = field(default_factory=dict)
    changes: list[tuple[int, str, Row | None, Row | None]] = field(default_factory=list)

    def state_at(self, seq: int) -> list[Row]:
        """The table's rows after commit ``seq``."""
        state: dict[Row, Row] = {}
        for s, op, old, new in self.changes:
            if s > seq:
                break
            _apply(state, op, old, new, self.key)
        return list(state.values())


def fingerprint(rows: Iterable[Row]) -> int:
    """An order-independent fingerprint of a set of rows."""
    return sum(hash(r) for r in rows) % (1 << 64)


def _apply(state: dict[Row, Row], op: str, old: Row | None, new: Row | None, key: tuple[int, ...]):
    if op == "T":
        state.clear()
        return
    if old is not None:
        state.pop(old, None)
    if new is not None:
        state[tuple(new[i] for i in key)] = new


def boundaries(
    conn: psycopg.Connection[Any],
    table: str,
    key: Sequence[str],
    cols: Sequence[Column],
    hashed: frozenset[str],
) -> Boundaries:
    """The states of ``table`` after every commit that changed it, rebuilt from the recorded
    row changes in commit order (each row made a row of the table again by
    ``jsonb_populate_record``, so its values go through the same reading as ``SELECT *``)."""
    names = [c.name for c in cols]
    key_index = tuple(names.index(k) for k in key)
    key_cols = [cols[i] for i in key_index]
    new_exprs = ", ".join(source_expr(c.name, c.kind, c.name in hashed, "r.") for c in cols)
    old_exprs = ", ".join(source_expr(c.name, c.kind, prefix="o.") for c in key_cols)
    n = len(cols)
    cur = conn.execute(
        f"""SELECT c.seq, ch.op, ch.new IS NULL, {new_exprs}, {old_exprs}
            FROM live_changes ch JOIN live_commits c ON c.xid = ch.xid
            LEFT JOIN LATERAL jsonb_populate_record(NULL::public.{table}, ch.new) r ON true
            LEFT JOIN LATERAL jsonb_populate_record(NULL::public.{table}, ch.old_key) o ON true
            WHERE ch.tbl = %s ORDER BY c.seq, ch.id""",
        (table,),
    )
    b = Boundaries(table, list(cols), key_index, [0], [0])
    state: dict[Row, Row] = {}
    fp = 0
    for r in cur:
        seq, op, no_new = int(r[0]), str(r[1]), bool(r[2])
        new = None if no_new else next(_rows([r], cols, "source", 3))
        old = None
        if op in ("U", "D"):
            old = tuple(normal(r[3 + n + i], c.kind, "source") for i, c in enumerate(key_cols))
        if op == "T":
            state.clear()
            fp = 0
        else:
            if old is not None and old in state:
                fp = (fp - hash(state.pop(old))) % (1 << 64)
            if new is not None:
                k = tuple(new[i] for i in key_index)
                if k in state:
                    fp = (fp - hash(state[k])) % (1 << 64)
                state[k] = new
                fp = (fp + hash(new)) % (1 << 64)
        b.changes.append((seq, op, old, new))
        if b.seqs[-1] == seq:
            b.fingerprints[-1] = fp
        else:
            b.seqs.append(seq)
            b.fingerprints.append(fp)
    b.final = state
    return b


def replica_columns(spark: SparkSession, ident: str, version: int | None = None) -> dict[str, str]:
    """A replica's columns (at a snapshot) with their Spark types, metadata columns left out."""
    sql = f"SELECT * FROM {ident}" + (f" VERSION AS OF {version}" if version else "")
    return {
        f.name: f.dataType.simpleString()
        for f in spark.sql(sql).schema.fields
        if not f.name.startswith("_cdc")
    }


def replica_rows(
    spark: SparkSession, ident: str, cols: Sequence[Column], hashed: frozenset[str]
) -> list[Row]:
    """A replica's rows now, in comparable form."""
    return replica_snapshots(spark, ident, cols, hashed, [None])[None]


def replica_snapshots(
    spark: SparkSession,
    ident: str,
    cols: Sequence[Column],
    hashed: frozenset[str],
    versions: Sequence[int | None],
) -> dict[int | None, list[Row]]:
    """A replica's rows at each of ``versions`` (snapshot ids; ``None``: now), read by time
    travel (``VERSION AS OF``), snapshots with the same columns in one query."""
    groups: dict[tuple[tuple[str, str], ...], list[int | None]] = {}
    for v in versions:
        groups.setdefault(tuple(replica_columns(spark, ident, v).items()), []).append(v)
    out: dict[int | None, list[Row]] = {v: [] for v in versions}
    for shape, members in groups.items():
        types = dict(shape)
        select = ", ".join(replica_expr(c.name, types.get(c.name), c.name in hashed) for c in cols)
        parts = [
            f"SELECT {-1 if v is None else v} AS `__snapshot`, {select} FROM {ident}"
            + ("" if v is None else f" VERSION AS OF {v}")
            for v in members
        ]
        for r in spark.sql(" UNION ALL ".join(parts)).collect():
            v = int(r[0])
            out[None if v == -1 else v].append(
                tuple(normal(r[1 + i], c.kind, "replica") for i, c in enumerate(cols))
            )
    return out


@dataclass(frozen=True)
class Difference:
    """How a replica differs from its source: rows only in the source, rows only in the
    replica (at most a few of each), and their counts."""

    missing: list[Row]
    unexpected: list[Row]
    source_rows: int
    replica_rows: int

    @property
    def equal(self) -> bool:
        """Whether the two hold the same rows."""
        return not self.missing and not self.unexpected


def compare(source: Sequence[Row], replica: Sequence[Row], limit: int = 5) -> Difference:
    """The multiset difference of two row lists."""
    from collections import Counter

    s, r = Counter(source), Counter(replica)
    missing = sorted((s - r).elements(), key=repr)
    unexpected = sorted((r - s).elements(), key=repr)
    return Difference(missing[:limit], unexpected[:limit], len(source), len(replica))


def first_difference(cols: Sequence[Column], d: Difference, key: tuple[int, ...]) -> str:
    """The first differing row, said column by column."""
    names = [c.name for c in cols]
    if d.missing and d.unexpected:
        by_key = {tuple(u[i] for i in key): u for u in d.unexpected}
        for m in d.missing:
            u = by_key.get(tuple(m[i] for i in key))
            if u is not None:
                diffs = [
                    f"{n}: source {_short(a)} replica {_short(b)}"
                    for n, a, b in zip(names, m, u, strict=True)
                    if a != b
                ]
                return f"key {_key_text(names, m, key)}: " + "; ".join(diffs)
    if d.missing:
        return f"missing in the replica: key {_key_text(names, d.missing[0], key)}"
    if d.unexpected:
        return f"not in the source: key {_key_text(names, d.unexpected[0], key)}"
    return ""


def _key_text(names: Sequence[str], row: Row, key: tuple[int, ...]) -> str:
    return ", ".join(f"{names[i]}={row[i]!r}" for i in key)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class SnapshotMatch:
    """A replica snapshot and the transaction boundary it equals (``seq`` ``None``: none)."""

    snapshot: int
    committed_at: dt.datetime
    seq: int | None
    detail: str = ""


def match_snapshots(
    b: Boundaries,
    snapshots: Sequence[tuple[int, dt.datetime]],
    rows: Mapping[int | None, list[Row]],
) -> list[SnapshotMatch]:
    """Each snapshot's transaction boundary: the first boundary, at or after the previous
    snapshot's, whose state has the snapshot's fingerprint (states confirmed row by row)."""
    out: list[SnapshotMatch] = []
    low = 0
    for snapshot, at in snapshots:
        got = rows.get(snapshot, [])
        fp = fingerprint(got)
        found = None
        for i in range(low, len(b.seqs)):
            if b.fingerprints[i] == fp and compare(b.state_at(b.seqs[i]), got).equal:
                found = i
                break
        if found is None:
            out.append(SnapshotMatch(snapshot, at, None, _nearest(b, got, low)))
            continue
        low = found
        out.append(SnapshotMatch(snapshot, at, b.seqs[found]))
    return out


def _nearest(b: Boundaries, got: Sequence[Row], low: int) -> str:
    best: tuple[int, int, Difference] | None = None
    for i in range(low, len(b.seqs)):
        d = compare(b.state_at(b.seqs[i]), got, limit=3)
        size = len(d.missing) + len(d.unexpected)
        if best is None or size < best[0]:
            best = (size, b.seqs[i], d)
    if best is None:
        return "no boundary left"
    _, seq, d = best
    return f"nearest boundary: commit {seq}, " + (first_difference(b.columns, d, b.key) or "equal")
