"""The batch's SQL: validate, resolve keys, dedup, order and collapse every table at once, then
one statement per table. Plain text from the table plans and the names of the views it reads
(no Spark here: :mod:`cdcflow.engine.execute` runs it).

Row images are ``map<string,string>`` of wire strings for every table of every dialect, so the
work that does not depend on a table's columns runs **once for the whole batch**, whatever the
number of tables: key values (normalised to their column type, so ``1.50`` and ``1.5`` are one
key), rejections, primary-key changes, duplicates and conflicts, collapse per key with per-column
authorship of partial events, and the tombstone check. Per-table plans enter the SQL as small
literal maps keyed by the target name. What remains per table is what must be: one ``MERGE``
whose every ``SET`` is guarded by the replica's ``_cdc`` sequences (or one changelog
``MERGE``), and a ``DELETE`` when a ``TRUNCATE`` arrived.

Semantics (DESIGN §5, one item each):

1. per (table, key, sequence) the latest delivered copy wins; different contents at one
   sequence count as a conflict; per key the newest sequence decides the row;
2. the ``MERGE`` only changes a column for a newer author (``_cdc.sequence``,
   ``row_sequence``, ``column_sequences``), so stale events and replays change nothing;
3. deletes leave tombstones (table, key, sequence), appended to one internal table, so a late
   older event cannot resurrect the row; a delete at the very sequence of its tombstone is its
   own replay and still applies;
4. partial events contribute their columns over the newest full image, each column keeping its
   newest author;
5. an update whose before image names another key also deletes that key; events at or below a
   ``TRUNCATE`` are dropped and older rows deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.engine import multiset
from cdcflow.engine.history import log_source_sql, winners_sql
from cdcflow.engine.meta import KEY_VALUES, ROW_OPERATIONS, SHAPE_KEY
from cdcflow.engine.plan import TablePlan
from cdcflow.spark.sql import lit, lit_or_null, q, string_array, string_map
from cdcflow.types.canonical import spark_from_wire, spark_type, storage_type

_ROW_OPS = "(" + ", ".join(lit(o) for o in ROW_OPERATIONS) + ")"
_KEYED_OPS = "(" + ", ".join(lit(o) for o in (*ROW_OPERATIONS, "TRUNCATE")) + ")"
_NO_MAP = "CAST(NULL AS map<string,string>)"
_EMPTY_MAP = "CAST(map() AS map<string,string>)"


# --------------------------------------------------------------------------- key values


def normalise(value: str, t: str) -> str:
    """SQL turning a wire string into the canonical text of its typed value (``1.50`` in a
    ``decimal(10,1)`` column is ``1.5``), so equal keys compare equal as text; ``NULL`` for
    a value the type cannot read (an event of another type, which the engine rejects: with
    ANSI casts a failing ``CAST`` would fail the whole batch, at every rerun)."""
    st = storage_type(t)
    if t in ("string", "uuid", "json", "time"):
        return value
    if t == "binary":
        return f"base64(try_to_binary({value}, 'base64'))"
    if t == "point" or t.startswith("array<"):
        return f"to_json(from_json({value}, {lit(st)}))"
    return f"CAST(try_cast({value} AS {st}) AS string)"


def typed_text(column: str, spark_type_name: str) -> str:
    """SQL giving a typed column's value as the text :func:`normalise` gives its wire string
    (``spark_type_name`` as a Spark ``simpleString``)."""
    if spark_type_name == "binary":
        return f"base64({column})"
    if spark_type_name.startswith(("array<", "struct<")):
        return f"to_json({column})"
    return f"CAST({column} AS string)"


def key_values_sql(
    keys: Mapping[str, Sequence[tuple[str, str]]], value: Callable[[str, int], str]
) -> str:
    """``array<string>`` of an event's key values, normalised to their column types, per
    target table (``keys``: each table's key columns and types; ``NULL`` for other tables).
    ``value(column, i)`` gives the SQL of the ``i``-th key column's wire string. Tables keyed
    alike share one branch; no lambda (Spark interprets those row by row)."""
    alike: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for target, columns in keys.items():
        alike.setdefault(tuple(columns), []).append(target)
    branches = [
        f"WHEN _target IN ({', '.join(lit(t) for t in targets)}) THEN array("
        + ", ".join(normalise(value(c, i), t) for i, (c, t) in enumerate(columns))
        + ")"
        for columns, targets in alike.items()
        if columns
    ]
    return f"CASE {' '.join(branches)} END" if branches else "CAST(NULL AS array<string>)"


def event_key_value(column: str, i: int, image: str) -> str:
    """SQL of an event's wire string of its ``i``-th key column: from ``key``, else the
    positional ``metadata.key_values``, else the row image (``image``, a SQL expression)."""
    return (
        f"coalesce(key[{lit(column)}], "
        f"get(from_json(metadata[{lit(KEY_VALUES)}], 'array<string>'), {i}), "
        f"{image}[{lit(column)}])"
    )


def has_null_sql(values: str, size: int) -> str:
    """SQL: whether an array of at most ``size`` elements holds a ``NULL`` (no lambda)."""
    return (
        "("
        + " OR ".join(f"(size({values}) > {i} AND get({values}, {i}) IS NULL)" for i in range(size))
        + ")"
        if size
        else "false"
    )


# --------------------------------------------------------------------------- sequence_by


def encoded_integer(n: str) -> str:
    """SQL of :func:`cdcflow.sequence.encode` of one integer (``n``: a ``decimal(38,0)``
    expression), so a column's values order like the producers' sequences."""
    digits = f"CAST(abs({n}) AS string)"
    return (
        f"CASE WHEN {n} >= 0 THEN concat('p', lpad(CAST(length({digits}) AS string), 2, '0'), "
        f"{digits}, '!') ELSE concat('n', lpad(CAST(99 - length({digits}) AS string), 2, '0'), "
        f"translate({digits}, '0123456789', '9876543210'), '!') END"
    )


def encoded_sql(value: str, t: str | None) -> str | None:
    """SQL of the order-preserving encoding of a wire string of type ``t`` (integers, dates,
    timestamps and text), ``None`` for types without one."""
    if t in ("int", "bigint"):
        return encoded_integer(f"try_cast({value} AS decimal(38,0))")
    if t in ("timestamp", "timestamp_ntz"):
        return encoded_integer(
            f"CAST(unix_micros(try_cast({value} AS timestamp)) AS decimal(38,0))"
        )
    if t == "date":
        return encoded_integer(f"CAST(unix_date(try_cast({value} AS date)) AS decimal(38,0))")
    if t in ("string", "uuid"):
        # characters up to '"' are escaped as in cdcflow.sequence
        chars = (
            f"transform(split({value}, ''), c -> CASE WHEN ascii(c) BETWEEN 1 AND 34 "
            "THEN concat('\"', char(35 + ascii(c))) ELSE c END)"
        )
        return f"concat('s', array_join({chars}, ''), '!')"
    return None


def sequence_sql(plans: Sequence[TablePlan]) -> str | None:
    """The events' ``sequence`` taken from the columns that order a table's events
    (``sequence_by``, compared in turn: their encodings one after the other): each the
    ``after`` image's value, else the ``before`` image's (deletes); ``NULL`` (rejected as
    ``SEQUENCE_MISSING``) when the event lacks one or a column's type cannot order events.
    ``None`` when no table is ordered by its columns."""
    branches = []
    for p in plans:
        if not p.sequence_by:
            continue
        parts = [
            encoded_sql(f"coalesce(after[{lit(c)}], before[{lit(c)}])", t)
            for c, t in zip(p.sequence_by, p.sequence_types, strict=True)
        ]
        found = [e for e in parts if e is not None]
        encoded = f"concat({', '.join(found)})" if len(found) == len(parts) else None
        branches.append(f"WHEN {lit(p.target)} THEN {encoded or 'CAST(NULL AS string)'}")
    if not branches:
        return None
    return f"CASE _target {' '.join(branches)} ELSE sequence END"


def newest_truncates_sql(events: str, plans: Sequence[TablePlan]) -> str:
    """The newest ``TRUNCATE`` of each table ordered by ``sequence_by`` columns, in their
    order (``events``: the view of the events with their ``sequence`` so ordered)."""
    targets = string_array(p.target for p in plans)
    return (
        f"SELECT _target, max(sequence) AS seq FROM {events} "
        f"WHERE operation = 'TRUNCATE' AND error_code IS NULL "
        f"AND array_contains({targets}, _target) GROUP BY _target"
    )


# --------------------------------------------------------------------------- the batch


@dataclass(frozen=True)
class TableStats:
    """Counts of one table's events in the batch, from the stats aggregate."""

    events: int = 0
    conflicts: int = 0
    winners: int = 0
    buried: int = 0
    deletes: int = 0
    writes: int = 0
    live: int = 0
    rejected: Mapping[str, int] | None = None
    #: keyless tables: events replacing a different copy logged by an earlier batch
    replaced: int = 0

    @property
    def duplicates(self) -> int:
        """Exact copies of events (redeliveries)."""
        return self.events - self.winners - self.conflicts


class StageSql:
    """The staging statements of one batch for the given table plans: plain SQL text over
    the views they are given (no Spark; :class:`cdcflow.engine.execute.BatchStage` runs them).

    In order: the events (a view of canonical rows with ``_fp`` and ``_target``, their
    ``sequence`` from :func:`sequence_sql`) are validated (:meth:`validated_sql`); the keyed
    tables' rows (:meth:`rows_sql`) give the scd2 tables' winners (:meth:`winners_sql`) and,
    collapsed per key (:meth:`collapsed_sql`) and joined to their tombstones
    (:meth:`staged_sql`), the merge tables' staged rows; the tables without a key have theirs
    (:meth:`multiset_winners_sql`, :meth:`multiset_staged_sql`); one aggregate counts them
    all (:meth:`stats_sql`); per table a source view feeds its statement."""

    def __init__(self, plans: Sequence[TablePlan]) -> None:
        self.plans = {p.target: p for p in plans}
        self.merge = [p for p in plans if p.mode == "merge" and p.keys and p.writes_rows]
        self.history = [p for p in plans if p.mode == "scd2" and p.keys and p.writes_rows]
        #: the tables written per key (merge and scd2): key values, key rules, rows
        self.keyed = [*self.merge, *self.history]
        #: the tables without a key, kept as multisets of rows
        self.multiset = [p for p in plans if p.multiset and p.writes_rows]

    # ------------------------------------------------------------------ literal maps

    def _names(self) -> str:
        return string_map(
            {p.target: string_array(p.keys or ()) for p in self.keyed}, "array<string>"
        )

    def _key_columns(self) -> dict[str, list[tuple[str, str]]]:
        return {
            p.target: [(k, p.schema.types.get(k, "string")) for k in p.keys or ()]
            for p in self.keyed
        }

    def _most_keys(self) -> int:
        return max((len(p.keys or ()) for p in self.keyed), default=0)

    def _replica_names(self) -> str:
        return string_map({t: lit(p.name) for t, p in self.plans.items()})

    # ------------------------------------------------------------------ validation

    @property
    def has_rules(self) -> bool:
        """Whether the engine may reject events of the batch (a rule applies to a table)."""
        return bool(self._rules())

    def _rules(self) -> list[tuple[str, str, str]]:
        """The rejection rules of the batch's tables: (condition, code, message) SQL."""
        names = self._names()
        rules: list[tuple[str, str, str]] = []
        shaped = [p for p in self.plans.values() if p.bad_shapes]
        if shaped:
            cond = " OR ".join(
                f"(_target = {lit(p.target)} AND metadata[{lit(SHAPE_KEY)}] IN "
                f"({', '.join(lit(s) for s in sorted(p.bad_shapes))}))"
                for p in shaped
            )
            msg = (
                "CASE _target "
                + " ".join(
                    f"WHEN {lit(p.target)} THEN concat('sort fields shaped ', "
                    f"metadata[{lit(SHAPE_KEY)}], {lit(f', but table {p.name} orders by ')}, "
                    f"{lit(p.shape or '')}, ': the sequences cannot be compared')"
                    for p in shaped
                )
                + " END"
            )
            rules.append((cond, "SEQUENCE_SHAPE_MISMATCH", msg))
        crossed = [p for p in self.plans.values() if p.foreign]
        if crossed:
            parts, msgs = [], []
            for p in crossed:
                same = " OR ".join(
                    f"(database <=> {lit_or_null(i[1])} AND schema <=> {lit_or_null(i[2])} "
                    f"AND `table` <=> {lit_or_null(i[3])})"
                    for i in sorted(p.foreign, key=lambda i: tuple(x or "" for x in i))
                )
                parts.append(f"(_target = {lit(p.target)} AND ({same}))")
                msgs.append(f"WHEN {lit(p.target)} THEN {lit(p.foreign_problem or '')}")
            rules.append(
                (" OR ".join(parts), "REPLICA_NAME_CONFLICT", f"CASE _target {' '.join(msgs)} END")
            )
        conflicted = [p for p in self.plans.values() if p.schema.conflicts]
        if conflicted:
            parts = []
            msgs = []
            for p in conflicted:
                inner = " OR ".join(
                    f"types[{lit(c)}] IN ({', '.join(lit(t) for t in sorted(bad))})"
                    for c, bad in sorted(p.schema.conflicts.items())
                )
                parts.append(f"(_target = {lit(p.target)} AND ({inner}))")
                msgs.append(
                    f"WHEN {lit(p.target)} THEN {lit('; '.join(p.schema.reasons.values()))}"
                )
            rules.append(
                (" OR ".join(parts), "TYPE_CONFLICT", f"CASE _target {' '.join(msgs)} END")
            )
        unknown = [p for p in self.plans.values() if p.key_problem and p.meta.keyed_events]
        for code in sorted({p.key_code for p in unknown}):
            coded = [p for p in unknown if p.key_code == code]
            targets = string_array(p.target for p in coded)
            cond = f"array_contains({targets}, _target) AND operation IN {_KEYED_OPS}"
            msg = string_map({p.target: lit(p.key_problem or "") for p in coded})
            rules.append((cond, code, f"element_at({msg}, _target)"))
        rules.extend(multiset.rules(self.multiset))
        ordered = [p for p in self.plans.values() if p.sequence_by]
        if ordered:
            targets = string_array(p.target for p in ordered)
            cond = f"array_contains({targets}, _target) AND operation IN {_KEYED_OPS} "
            cond += "AND sequence IS NULL"
            msg = string_map(
                {
                    p.target: lit(
                        f"the event lacks a value of column(s) "
                        f"{', '.join(repr(c) for c in p.sequence_by)}, or one of a type that "
                        f"orders (integer, date, timestamp, text), which order table {p.name}'s "
                        "events (sequence_by)"
                    )
                    for p in ordered
                }
            )
            rules.append((cond, "SEQUENCE_MISSING", f"element_at({msg}, _target)"))
        if self.keyed:
            cond = (
                f"_kv IS NOT NULL AND operation IN {_ROW_OPS} "
                f"AND {has_null_sql('_kv', self._most_keys())}"
            )
            lacks = lit("row event lacks a value (of the column type) for key column(s) [")
            msg = (
                f"concat({lacks}, "
                f"array_join(element_at({names}, _target), ', '), '] of table ', "
                f"element_at({self._replica_names()}, _target))"
            )
            rules.append((cond, "KEY_MISSING", msg))
        return rules

    def validated_sql(self, source: str) -> str:
        """Every event of ``source`` with ``_kv`` (normalised key values, merge tables) and,
        for events the engine rejects, ``_reject`` (code) and ``_reason`` (message)."""
        image = "(CASE WHEN operation = 'DELETE' THEN before ELSE after END)"
        kv = key_values_sql(self._key_columns(), lambda c, i: event_key_value(c, i, image))
        rules = self._rules()
        if rules:
            code = "CASE " + " ".join(f"WHEN {c} THEN {lit(k)}" for c, k, _ in rules) + " END"
            reason = "CASE " + " ".join(f"WHEN {c} THEN {m}" for c, _, m in rules) + " END"
        else:
            code = reason = "CAST(NULL AS string)"
        return (
            f"SELECT *, {code} AS _reject, {reason} AS _reason FROM ("
            f"SELECT *, {kv} AS _kv FROM {source})"
        )

    @staticmethod
    def rejected_sql(validated: str) -> str:
        """The events the engine rejects."""
        return f"SELECT * FROM {validated} WHERE _reject IS NOT NULL"

    # ------------------------------------------------------------------ merge tables

    def rows_sql(self, validated: str) -> str:
        """One row per applicable event of the merge tables (plus a delete of the old key for
        each primary-key change, from the same scan): target, key, sequence, delivery position,
        image."""
        keyed = string_array(p.target for p in self.keyed)
        soft = string_array(p.target for p in self.merge if p.soft_deletes)
        marks = string_map({p.target: lit(p.watermark) for p in self.merge if p.watermark})
        old_kv = key_values_sql(self._key_columns(), lambda c, i: f"before[{lit(c)}]")
        image = (
            "CASE WHEN operation <> 'DELETE' THEN after "
            f"WHEN array_contains({soft}, _target) THEN before END"
        )
        pk_change = (
            "operation IN ('UPDATE', 'UPSERT') AND before IS NOT NULL "
            f"AND NOT {has_null_sql('_okv', self._most_keys())} AND _okv <> _kv"
        )
        event = f"named_struct('k', _kv, 'op', operation, 'a', {image}, 'fp', _fp)"
        versions = (
            f"CASE WHEN {pk_change} THEN array({event}, named_struct('k', _okv, 'op', 'DELETE', "
            f"'a', {_NO_MAP}, 'fp', _fp + 1)) ELSE array({event}) END"
        )
        # events the engine rejects pass too, keyed by their code: the collapse counts them
        # for the batch's figures without another scan of the batch
        return f"""
            SELECT _target, v.k AS _kv,
                   CASE WHEN _reject IS NULL THEN to_json(v.k) ELSE concat('!', _reject) END
                     AS _kj,
                   sequence AS _seq, timestamp AS _ts, id AS _id, origin, offset, item,
                   v.op AS _op, partial AND v.op <> 'DELETE' AS _partial, v.a AS _after,
                   v.fp AS _fp, _reject IS NOT NULL AS _bad
            FROM (SELECT *, {old_kv} AS _okv FROM {validated}
                  WHERE array_contains({keyed}, _target) AND (_reject IS NOT NULL
                    OR (operation IN {_ROW_OPS}
                        AND sequence > coalesce(element_at({marks}, _target), ''))))
            LATERAL VIEW explode(
              CASE WHEN _reject IS NULL THEN {versions}
                   ELSE array(named_struct('k', _kv, 'op', operation, 'a', {_NO_MAP}, 'fp', _fp))
              END) e AS v
        """

    def winners_sql(self, rows: str, validated: str) -> str:
        """The scd2 tables' winning event per (table, key, sequence) (see
        :mod:`cdcflow.engine.history`)."""
        return winners_sql(rows, validated, [p.target for p in self.history])

    def merge_rows_sql(self, rows: str) -> str:
        """The rows of the merge tables alone (when scd2 tables share the batch)."""
        merged = string_array(p.target for p in self.merge)
        return f"SELECT * FROM {rows} WHERE array_contains({merged}, _target)"

    def collapsed_sql(self, rows: str, tombstones: bool) -> str:
        """Per (table, key): the newest event, the newest full image and sequence (the base),
        the partial images newer than the base, and the counts (``tombstones``: whether the
        staged rows look tombstones up, which then count from each key's sequences).

        Window functions pick the winners (no row image sits in an aggregation buffer). Only
        when the batch has partial events are the images of a key gathered over its window."""
        part = "PARTITION BY _target, _kj"
        delivered = "origin DESC, offset DESC, item DESC"
        partial = any(p.meta.partial for p in self.merge)
        if partial:
            base = (
                f"first(CASE WHEN _rs = 1 AND NOT _partial AND _seq = _base_seq THEN _after END,"
                f" true) OVER ({part})"
            )
            parts = (
                f"collect_list(CASE WHEN _rs = 1 AND _partial AND _seq > coalesce(_base_seq, '')"
                f" THEN named_struct('s', _seq, 'a', _after) END) OVER ({part})"
            )
            gathered = f"""
                SELECT *, {base} AS _base_after, {parts} AS _parts FROM (
                  SELECT *, max(CASE WHEN NOT _partial AND _rs = 1 THEN _seq END) OVER ({part})
                              AS _base_seq
                  FROM ({{inner}}))
            """
        else:
            gathered = """
                SELECT *, _seq AS _base_seq, _after AS _base_after,
                       CAST(array() AS array<struct<s:string, a:map<string,string>>>) AS _parts
                FROM ({inner})
            """
        # with tombstones, a key's sequences: the events a tombstone buries beside a newer one
        # are counted from them (no second scan of the rows)
        seqs = (
            f"collect_set(CASE WHEN NOT _bad THEN _seq END) OVER ({part})"
            if tombstones
            else "CAST(NULL AS array<string>)"
        )
        inner = f"""
            SELECT *, {seqs} AS _seqs,
                   count(*) OVER ({part}) AS _n_in,
                   sum(CASE WHEN _rs = 1 THEN 1 ELSE 0 END) OVER ({part}) AS _n_win,
                   sum(CASE WHEN _rs = 1 THEN _nfp - 1 ELSE 0 END) OVER ({part}) AS _n_conf
            FROM (
              SELECT *,
                     row_number() OVER ({part} ORDER BY _seq DESC, {delivered}) AS _rn,
                     row_number() OVER ({part}, _seq ORDER BY {delivered}) AS _rs,
                     size(collect_set(_fp) OVER ({part}, _seq)) AS _nfp
              FROM {rows})
        """
        return f"""
            SELECT _target, _kj, _kv, _seq, _bad,
                   named_struct('_op', _op, '_ts', _ts, '_id', _id, '_fp', _fp) AS _top,
                   _base_seq, _base_after, _parts, CAST(_n_in AS bigint) AS _n_in,
                   CAST(_n_conf AS bigint) AS _n_conf, CAST(_n_win AS bigint) AS _n_win, _seqs
            FROM ({gathered.format(inner=inner)}) WHERE _rn = 1
        """

    def staged_sql(
        self, collapsed: str, tombstones: str | None, looked_up: Collection[str] | None = None
    ) -> str:
        """The collapsed rows with their tombstone, liveness and merged partial images
        (``looked_up``: the replicas whose tombstones are looked up, ``None``: every
        hard-delete one)."""
        soft = string_array(p.target for p in self.merge if p.soft_deletes)
        hard = [
            p.target
            for p in self.merge
            if not p.soft_deletes and (looked_up is None or p.name in looked_up)
        ]
        if tombstones and hard:
            # tombstones (by replica name) are appended: a key's newest is its highest; only the
            # batch's keys are looked at
            names = self._replica_names()
            tables = ", ".join(lit(self.plans[t].name) for t in hard)
            join = (
                "LEFT JOIN (SELECT t.target, t.key, max(t.seq) AS seq FROM "
                f"(SELECT target, key, seq FROM {tombstones} WHERE target IN ({tables})) t "
                f"LEFT SEMI JOIN (SELECT element_at({names}, _target) AS _name, _kj "
                f"FROM {collapsed}) k ON t.target = k._name AND t.key = k._kj "
                "GROUP BY t.target, t.key) tb "
                f"ON tb.target = element_at({names}, c._target) AND tb.key = c._kj"
            )
            tomb = "tb.seq"
        else:
            join, tomb = "", "CAST(NULL AS string)"
        newer = (
            "CASE WHEN size(_parts) = 0 THEN _parts ELSE "
            "array_sort(filter(_parts, x -> x.s > coalesce(_base_seq, '')), "
            "(l, r) -> CASE WHEN l.s < r.s THEN -1 WHEN l.s > r.s THEN 1 ELSE 0 END) END"
        )
        fold_img = (
            f"aggregate(_newer, coalesce(_base_after, {_EMPTY_MAP}), (acc, x) -> map_concat("
            "map_filter(acc, (k, v) -> NOT map_contains_key(x.a, k)), x.a))"
        )
        fold_seq = (
            f"aggregate(_newer, {_EMPTY_MAP}, (acc, x) -> map_concat("
            "map_filter(acc, (k, v) -> NOT map_contains_key(x.a, k)), "
            "transform_values(x.a, (k, v) -> x.s)))"
        )
        return f"""
            SELECT _target, _kj, _kv, _seq, _bad, _top._op AS _op, _top._ts AS _ts,
                   _top._id AS _id, _top._fp AS _fp, _top._op <> 'DELETE' AS _exists, _tomb,
                   NOT _bad AND (_tomb IS NULL OR _seq > _tomb
                                 OR (_seq = _tomb AND _top._op = 'DELETE')) AS _live,
                   array_contains({soft}, _target) AS _soft, _base_seq,
                   CASE WHEN size(_newer) = 0 THEN _base_after ELSE {fold_img} END AS _img,
                   CASE WHEN size(_newer) = 0 THEN {_EMPTY_MAP} ELSE {fold_seq} END AS _cs,
                   _n_in, _n_conf, _n_win,
                   CASE WHEN NOT _bad AND _n_win > 1 AND _tomb IS NOT NULL
                             AND (_seq > _tomb OR (_seq = _tomb AND _top._op = 'DELETE'))
                        THEN size(filter(_seqs, s -> s < _seq AND s <= _tomb)) ELSE 0 END
                     AS _n_buried
            FROM (SELECT c.*, {tomb} AS _tomb, {newer} AS _newer FROM {collapsed} c {join})
        """

    def stats_sql(
        self,
        validated: str,
        staged: str | None,
        winners: str | None,
        multiset_staged: str | None = None,
    ) -> str | None:
        """Counts of every table, from the staged rows (``staged``: the merge tables',
        ``winners``: the scd2 tables', ``multiset_staged``: the keyless tables', where staged)
        in one small aggregate: events, conflicts, winners, events buried by tombstones or a
        ``TRUNCATE``, deletes and writes, and rejections by code (read by :meth:`stats_of`).
        Rejections of tables that are not written per key (changelogs, tables whose keys are
        unknown, keyless tables) are counted over the batch, for those without keys only when
        a rule other than ``KEY_UNKNOWN`` applies to them. ``None`` when there is nothing to
        count."""
        parts = []
        if staged is not None:
            # buried: every event of a key whose newest lost to its tombstone, a delete that
            # is its tombstone's own replay
            parts.append(
                "SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, "
                "sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, "
                "sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) "
                "+ count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, "
                "count_if(_live AND NOT _exists) AS deletes, "
                "count_if(_live AND (_exists OR _soft)) AS writes, "
                f"count_if(_live) AS live, 0L AS replaced FROM {staged} GROUP BY 1, 2"
            )
        marked = [p for p in [*self.merge, *self.multiset] if p.watermark]
        if marked:
            # events at or below a TRUNCATE the table already reflects
            marks = string_map({p.target: lit(p.watermark) for p in marked})
            parts.append(
                "SELECT _target, CAST(NULL AS string) AS code, 0L AS n, 0L AS conflicts, "
                "0L AS winners, count(*) AS buried, 0L AS deletes, 0L AS writes, 0L AS live, "
                f"0L AS replaced FROM {validated} WHERE _reject IS NULL AND operation IN "
                f"{_ROW_OPS} AND array_contains({string_array(p.target for p in marked)}, "
                f"_target) AND NOT coalesce(sequence > element_at({marks}, _target), false) "
                "GROUP BY 1"
            )
        if winners is not None:
            # scd2: no event is stale (late ones become history); deletes and writes are the
            # winning events of each kind
            parts.append(
                "SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, "
                "sum(_n_in) AS n, sum(_nfp - 1) AS conflicts, count(*) AS winners, 0L AS buried, "
                "count_if(_op IN ('DELETE', 'TRUNCATE')) AS deletes, "
                "count_if(_op NOT IN ('DELETE', 'TRUNCATE')) AS writes, count(*) AS live, "
                f"0L AS replaced FROM {winners} GROUP BY 1, 2"
            )
        if multiset_staged is not None:
            parts.append(multiset.stats_sql(multiset_staged))
        merged = {p.target for p in self.keyed}
        others = [p for t, p in self.plans.items() if t not in merged]
        if any(p.bad_shapes or p.schema.conflicts or p.foreign or p.multiset for p in others):
            parts.append(
                "SELECT _target, _reject AS code, count(*) AS n, 0L AS conflicts, 0L AS winners, "
                "0L AS buried, 0L AS deletes, 0L AS writes, 0L AS live, 0L AS replaced "
                f"FROM {validated} WHERE _reject IS NOT NULL AND NOT array_contains("
                f"{string_array(sorted(merged))}, _target) GROUP BY 1, 2"
            )
        return " UNION ALL ".join(parts) if parts else None

    def stats_of(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, TableStats]:
        """The counts of every table from the rows of :meth:`stats_sql`."""
        merged = {p.target for p in self.keyed}
        others = [p for t, p in self.plans.items() if t not in merged]
        out: dict[str, TableStats] = {}
        rejected: dict[str, dict[str, int]] = {}
        counted = set()
        for r in rows:
            if r["code"] is not None:
                rejected.setdefault(r["_target"], {})[r["code"]] = int(r["n"])
                counted.add(r["_target"])
                continue
            base = out.get(r["_target"], TableStats())
            out[r["_target"]] = TableStats(
                events=base.events + int(r["n"]),
                conflicts=base.conflicts + int(r["conflicts"]),
                winners=base.winners + int(r["winners"]),
                buried=base.buried + int(r["buried"]),
                deletes=base.deletes + int(r["deletes"]),
                writes=base.writes + int(r["writes"]),
                live=base.live + int(r["live"]),
                replaced=base.replaced + int(r["replaced"]),
            )
        for p in others:
            if p.key_problem and p.meta.keyed_events and p.target not in counted:
                rejected.setdefault(p.target, {})[p.key_code] = p.meta.keyed_events
        for target, codes in rejected.items():
            out[target] = dataclasses.replace(out.get(target, TableStats()), rejected=codes)
        return out

    # ------------------------------------------------------------------ keyless tables

    def multiset_winners_sql(self, validated: str) -> str:
        """The keyless tables' winning copy per event (see :mod:`cdcflow.engine.multiset`)."""
        return multiset.winners_sql(validated, self.multiset)

    def multiset_staged_sql(
        self, winners: str, log: str | None, pipeline: str, batch_id: int
    ) -> str:
        """The keyless tables' winners against the log (``None``: none yet)."""
        return multiset.staged_sql(winners, log, self.multiset, pipeline, batch_id)

    def multiset_log_source_sql(self, staged: str) -> str:
        """The log rows of the keyless tables' events the batch logs."""
        return multiset.log_source_sql(staged, self.multiset)

    # ------------------------------------------------------------------ per table

    @staticmethod
    def merge_source_sql(staged: str, plan: TablePlan) -> str:
        """The typed ``MERGE`` source of one table, from the staged rows."""
        assert plan.keys is not None
        types = plan.schema.types
        data = data_columns(plan)
        keys = [
            f"{spark_from_wire(f'_kv[{i}]', types.get(k, 'string'))} AS {key_alias(i)}"
            for i, k in enumerate(plan.keys)
        ]
        cols, seqs = [], []
        for i, c in enumerate(data):
            cseq = f"coalesce(_cs[{lit(c)}], _base_seq)"
            value = spark_from_wire(f"_img[{lit(c)}]", types[c])
            cols.append(
                f"CASE WHEN _tomb IS NOT NULL AND {cseq} <= _tomb THEN NULL ELSE {value} END "
                f"AS {col_alias(i)}"
            )
            seqs.append(
                f"CASE WHEN _tomb IS NOT NULL AND coalesce({cseq}, '') <= _tomb THEN _tomb "
                f"ELSE {cseq} END AS {colseq_alias(i)}"
            )
        base = (
            "CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb "
            "ELSE _base_seq END"
        )
        inner = ", ".join([*keys, *cols, *seqs])
        colseqs = "CAST(NULL AS map<string,string>)"
        if data:
            names = ", ".join(lit(c) for c in data)
            values = ", ".join(colseq_alias(i) for i in range(len(data)))
            m = (
                f"map_filter(map_from_arrays(array({names}), array({values})), "
                "(k, v) -> v > coalesce(_base_seq, ''))"
            )
            colseqs = f"CASE WHEN size({m}) = 0 THEN NULL ELSE {m} END"
        return (
            f"SELECT *, {colseqs} AS _colseqs FROM ("
            f"SELECT {inner}, _seq, _op, _ts, _id, _fp, _exists, {base} AS _base_seq "
            f"FROM {staged} WHERE _target = {lit(plan.target)} AND _live)"
        )

    @staticmethod
    def changelog_source_sql(validated: str, plan: TablePlan) -> str:
        """The changelog rows of one append table."""
        types = plan.schema.types

        def image(name: str) -> str:
            if not types:
                return "CAST(NULL AS struct<_empty:string>)"
            fields = ", ".join(
                f"{lit(c)}, {spark_from_wire(f'{name}[{lit(c)}]', t)}" for c, t in types.items()
            )
            return f"CASE WHEN {name} IS NULL THEN NULL ELSE named_struct({fields}) END"

        return f"""
                SELECT named_struct('operation', operation, 'sequence', sequence,
                                    'source_timestamp', timestamp, 'event_id', id,
                                    'fingerprint', _fp, 'transaction_id', transaction_id,
                                    'partial', partial, 'applied_at', current_timestamp()) AS _cdc,
                       {image("before")} AS before, {image("after")} AS after
                FROM (SELECT *, row_number() OVER (PARTITION BY id, _fp
                                                   ORDER BY origin, offset, item) AS _rn
                      FROM {validated}
                      WHERE _target = {lit(plan.target)} AND _reject IS NULL
                        AND operation IN ('INSERT','UPDATE','UPSERT','SNAPSHOT','DELETE',
                                          'TRUNCATE'))
                WHERE _rn = 1
                """

    def history_log_source_sql(self, winners: str) -> str:
        """The batch's events of the scd2 tables as history log rows."""
        return log_source_sql(winners, self._replica_names())

    def deletes_source_sql(self, staged: str) -> str:
        """The batch's live deletes of hard-delete tables (for the tombstones)."""
        return (
            f"SELECT element_at({self._replica_names()}, _target) AS target, _kj AS key, "
            f"_seq AS seq FROM {staged} WHERE _live AND NOT _exists AND NOT _soft"
        )


# --------------------------------------------------------------------------- statements


def key_alias(i: int) -> str:
    """Name of the i-th key column inside the staging views (keys and columns go by position:
    a source column may be named like a working column, MongoDB's ``_id``...)."""
    return f"`_k{i}`"


def col_alias(i: int) -> str:
    """Name of the i-th data column inside the staging views."""
    return f"`_c{i}`"


def colseq_alias(i: int) -> str:
    """Name of the i-th data column's authoring sequence inside the staging views."""
    return f"`_cs{i}`"


def data_columns(plan: TablePlan) -> list[str]:
    """A merge table's non-key columns, in plan order."""
    keys = set(plan.keys or ())
    return [c for c in plan.schema.types if c not in keys]


def merge_sql(ident: str, plan: TablePlan, source: str, truncate: str | None = None) -> str:
    """The guarded ``MERGE`` of one replica: a matched row is rewritten only when the source
    changes something (a newer event, a conflict at the same sequence, or a column whose
    author is newer), so redelivered input rewrites nothing.

    ``truncate``: the sequence of a ``TRUNCATE`` in the batch, applied in the same commit (a
    snapshot never shows the table emptied without the changes after the ``TRUNCATE``): rows
    older than it go unless the batch writes their key again, as a new row (the source holds
    only events after it)."""
    assert plan.keys is not None
    keys = plan.keys
    data = data_columns(plan)
    soft = plan.soft_deletes
    on = " AND ".join(f"t.{q(k)} = s.{key_alias(i)}" for i, k in enumerate(keys))
    conflict = "(s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)"
    sets, names, seqs, column_newer = [], [], [], []
    for i, c in enumerate(data):
        tcs = f"coalesce(t._cdc.column_sequences[{lit(c)}], t._cdc.row_sequence)"
        scs = f"s.{colseq_alias(i)}"
        column_newer.append(f"{scs} > {tcs}")
        guard = "s._exists AND " if soft else ""
        sets.append(
            f"{q(c)} = CASE WHEN {guard}({scs} > {tcs} OR ({scs} = {tcs} AND {conflict})) "
            f"THEN s.{col_alias(i)} ELSE t.{q(c)} END"
        )
        names.append(lit(c))
        seqs.append(f"greatest({scs}, {tcs})")
    newer = f"(s._seq > t._cdc.sequence OR {conflict})"
    row_seq = (
        "CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL "
        "THEN s._base_seq ELSE t._cdc.row_sequence END"
    )
    if names:
        colmap = (
            f"map_filter(map_from_arrays(array({', '.join(names)}), array({', '.join(seqs)})), "
            f"(k, v) -> v > coalesce({row_seq}, ''))"
        )
        colseqs = f"CASE WHEN size({colmap}) = 0 THEN NULL ELSE {colmap} END"
    else:
        colseqs = "CAST(NULL AS map<string,string>)"

    def pick(field: str, src: str) -> str:
        return f"CASE WHEN {newer} THEN {src} ELSE t._cdc.{field} END"

    deleted = "NOT s._exists" if soft else "false"
    cdc_update = (
        "named_struct("
        f"'sequence', greatest(s._seq, t._cdc.sequence), "
        f"'row_sequence', {row_seq}, "
        f"'column_sequences', {colseqs}, "
        f"'operation', {pick('operation', 's._op')}, "
        f"'source_timestamp', {pick('source_timestamp', 's._ts')}, "
        f"'event_id', {pick('event_id', 's._id')}, "
        f"'fingerprint', {pick('fingerprint', 's._fp')}, "
        f"'deleted', CASE WHEN {newer} THEN {deleted} ELSE t._cdc.deleted END, "
        "'applied_at', current_timestamp())"
    )
    cdc_insert, insert_cols, insert_vals = _inserted(plan)
    update_sets = ", ".join([*sets, f"_cdc = {cdc_update}"])
    if soft:
        delete_clause = ""
        not_matched = "WHEN NOT MATCHED THEN INSERT"
    else:
        delete_clause = "WHEN MATCHED AND NOT s._exists AND s._seq > t._cdc.sequence THEN DELETE"
        not_matched = "WHEN NOT MATCHED AND s._exists THEN INSERT"
    changes = " OR ".join(["s._seq > t._cdc.sequence", conflict, *column_newer])
    truncated = older = ""
    if truncate is not None:
        older = f"t._cdc.sequence < {lit(truncate)}"
        renew = ", ".join(
            [f"{q(c)} = s.{col_alias(i)}" for i, c in enumerate(data)] + [f"_cdc = {cdc_insert}"]
        )
        gone = "" if soft else f"WHEN MATCHED AND {older} AND NOT s._exists THEN DELETE"
        truncated = f"{gone}\n        WHEN MATCHED AND {older} THEN UPDATE SET {renew}"
        older = f"WHEN NOT MATCHED BY SOURCE AND {older} THEN DELETE"
    return f"""
        MERGE INTO {ident} t USING {source} s ON {on}
        {truncated}
        {delete_clause}
        WHEN MATCHED AND ({changes}) THEN UPDATE SET {update_sets}
        {not_matched} ({insert_cols}) VALUES ({insert_vals})
        {older}
    """


def _inserted(plan: TablePlan) -> tuple[str, str, str]:
    """A new replica row from a merge source row ``s``: its ``_cdc``, the replica's columns
    and their values."""
    assert plan.keys is not None
    data = data_columns(plan)
    deleted = "NOT s._exists" if plan.soft_deletes else "false"
    cdc = (
        "named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), "
        "'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, "
        f"'event_id', s._id, 'fingerprint', s._fp, 'deleted', {deleted}, "
        "'applied_at', current_timestamp())"
    )
    cols = ", ".join(q(c) for c in [*plan.keys, *data]) + ", _cdc"
    values = ", ".join(
        [f"s.{key_alias(i)}" for i in range(len(plan.keys))]
        + [f"s.{col_alias(i)}" for i in range(len(data))]
        + [cdc]
    )
    return cdc, cols, values


def insert_sql(ident: str, plan: TablePlan, source: str) -> str:
    """What :func:`merge_sql` writes into a replica that holds no row: its ``WHEN NOT
    MATCHED`` rows, appended (no join with the table). Only for a replica created by the
    batch's own DDL: every source row is then unmatched, no row is older than a ``TRUNCATE``,
    and the merge source holds one row per key, so the rows are the ``MERGE``'s."""
    _, cols, values = _inserted(plan)
    where = "" if plan.soft_deletes else " WHERE s._exists"
    return f"INSERT INTO {ident} ({cols}) SELECT {values} FROM {source} s{where}"


def changelog_sql(ident: str, source: str) -> str:
    """Changelog rows inserted once per (event id, fingerprint), whatever the checkpoint says."""
    return f"""
        MERGE INTO {ident} t USING {source} s
        ON t._cdc.event_id = s._cdc.event_id AND t._cdc.fingerprint = s._cdc.fingerprint
        WHEN NOT MATCHED THEN INSERT *
    """


def truncate_sql(ident: str, sequence: str) -> str:
    """Rows older than a ``TRUNCATE`` go (idempotent: a replay deletes nothing more)."""
    return f"DELETE FROM {ident} WHERE _cdc.sequence < {lit(sequence)}"


def tombstones_sql(ident: str, source: str) -> str:
    """Record deleted keys: tombstones are appended (a key's highest one counts), which costs
    a small file per batch instead of a join with every tombstone kept."""
    return (
        f"INSERT INTO {ident} (target, key, seq, deleted_at) "
        f"SELECT target, key, seq, current_timestamp() FROM {source}"
    )


def expire_tombstones_sql(ident: str, retention_seconds: int) -> str:
    """Drop tombstones older than the retention (a late event older than a dropped tombstone
    can then resurrect its row: choose a retention beyond the producers' redelivery horizon)."""
    return (
        f"DELETE FROM {ident} WHERE deleted_at < "
        f"current_timestamp() - make_interval(0, 0, 0, 0, 0, 0, {int(retention_seconds)})"
    )


def create_replica_columns(plan: TablePlan, cdc_struct: str) -> str:
    """Column list of a new replica: the columns in the producer's order (key columns it did
    not send first), then ``_cdc``."""
    assert plan.keys is not None
    types = plan.schema.types
    ordered = [*[k for k in plan.keys if k not in types], *types]
    cols = [f"{q(c)} {spark_type(types.get(c, 'string'))}" for c in ordered]
    return ", ".join([*cols, f"_cdc {cdc_struct}"])


def create_changelog_columns(plan: TablePlan, changelog_struct: str) -> str:
    """Column list of a new changelog: ``_cdc`` and the typed ``before``/``after`` images."""
    types = plan.schema.types
    if types:
        st = "struct<" + ", ".join(f"{q(c)}:{spark_type(t)}" for c, t in types.items()) + ">"
    else:
        st = "struct<_empty:string>"
    return f"_cdc {changelog_struct}, before {st}, after {st}"
