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
``MERGE``), and a ``DELETE`` when a ``TRUNCATE`` arrived (:mod:`cdcflow.engine.statements`);
the batch's counts come from one aggregate over the staged rows (:mod:`cdcflow.engine.stats`),
typed key values and ``sequence_by`` from :mod:`cdcflow.engine.encoding`.

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

from collections.abc import Collection, Sequence

from cdcflow.engine import multiset
from cdcflow.engine.encoding import (
    KEYED_OPS,
    ROW_OPS,
    event_key_value,
    has_null_sql,
    key_values_sql,
)
from cdcflow.engine.history import log_source_sql, winners_sql
from cdcflow.engine.meta import SHAPE_KEY
from cdcflow.engine.plan import BatchTables, TablePlan
from cdcflow.spark.sql import lit, lit_or_null, string_array, string_map

_NO_MAP = "CAST(NULL AS map<string,string>)"
_EMPTY_MAP = "CAST(map() AS map<string,string>)"


class StageSql:
    """The staging statements of one batch for the given table plans: plain SQL text over
    the views they are given (no Spark; :class:`cdcflow.engine.execute.BatchStage` runs them).

    In order: the events (a view of canonical rows with ``_fp`` and ``_target``, their
    ``sequence`` from :func:`sequence_sql`) are validated (:meth:`validated_sql`); the keyed
    tables' rows (:meth:`rows_sql`) give the scd2 tables' winners (:meth:`winners_sql`) and,
    collapsed per key (:meth:`collapsed_sql`) and joined to their tombstones
    (:meth:`staged_sql`), the merge tables' staged rows; the tables without a key have theirs
    (:meth:`multiset_winners_sql`, :meth:`multiset_staged_sql`); one aggregate counts them
    all (:func:`cdcflow.engine.stats.stats_sql`); per table a source view feeds its statement."""

    def __init__(self, plans: Sequence[TablePlan]) -> None:
        self.tables = BatchTables.of(plans)

    # ------------------------------------------------------------------ literal maps

    def _names(self) -> str:
        return string_map(
            {p.target: string_array(p.keys or ()) for p in self.tables.keyed}, "array<string>"
        )

    def _key_columns(self) -> dict[str, list[tuple[str, str]]]:
        return {
            p.target: [(k, p.schema.types.get(k, "string")) for k in p.keys or ()]
            for p in self.tables.keyed
        }

    def _most_keys(self) -> int:
        return max((len(p.keys or ()) for p in self.tables.keyed), default=0)

    def _replica_names(self) -> str:
        return string_map({t: lit(p.name) for t, p in self.tables.plans.items()})

    # ------------------------------------------------------------------ validation

    @property
    def has_rules(self) -> bool:
        """Whether the engine may reject events of the batch (a rule applies to a table)."""
        return bool(self._rules())

    def _rules(self) -> list[tuple[str, str, str]]:
        """The rejection rules of the batch's tables: (condition, code, message) SQL."""
        names = self._names()
        rules: list[tuple[str, str, str]] = []
        shaped = [p for p in self.tables.plans.values() if p.bad_shapes]
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
        crossed = [p for p in self.tables.plans.values() if p.foreign]
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
        conflicted = [p for p in self.tables.plans.values() if p.schema.conflicts]
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
        unknown = [p for p in self.tables.plans.values() if p.key_problem and p.meta.keyed_events]
        for code in sorted({p.key_code for p in unknown}):
            coded = [p for p in unknown if p.key_code == code]
            targets = string_array(p.target for p in coded)
            cond = f"array_contains({targets}, _target) AND operation IN {KEYED_OPS}"
            msg = string_map({p.target: lit(p.key_problem or "") for p in coded})
            rules.append((cond, code, f"element_at({msg}, _target)"))
        rules.extend(multiset.rules(self.tables.multiset))
        ordered = [p for p in self.tables.plans.values() if p.sequence_by]
        if ordered:
            targets = string_array(p.target for p in ordered)
            cond = f"array_contains({targets}, _target) AND operation IN {KEYED_OPS} "
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
        if self.tables.keyed:
            cond = (
                f"_kv IS NOT NULL AND operation IN {ROW_OPS} "
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
        keyed = string_array(p.target for p in self.tables.keyed)
        soft = string_array(p.target for p in self.tables.merge if p.soft_deletes)
        marks = string_map({p.target: lit(p.watermark) for p in self.tables.merge if p.watermark})
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
                    OR (operation IN {ROW_OPS}
                        AND sequence > coalesce(element_at({marks}, _target), ''))))
            LATERAL VIEW explode(
              CASE WHEN _reject IS NULL THEN {versions}
                   ELSE array(named_struct('k', _kv, 'op', operation, 'a', {_NO_MAP}, 'fp', _fp))
              END) e AS v
        """

    def winners_sql(self, rows: str, validated: str) -> str:
        """The scd2 tables' winning event per (table, key, sequence) (see
        :mod:`cdcflow.engine.history`)."""
        return winners_sql(rows, validated, [p.target for p in self.tables.history])

    def merge_rows_sql(self, rows: str) -> str:
        """The rows of the merge tables alone (when scd2 tables share the batch)."""
        merged = string_array(p.target for p in self.tables.merge)
        return f"SELECT * FROM {rows} WHERE array_contains({merged}, _target)"

    def collapsed_sql(self, rows: str, tombstones: bool) -> str:
        """Per (table, key): the newest event, the newest full image and sequence (the base),
        the partial images newer than the base, and the counts (``tombstones``: whether the
        staged rows look tombstones up, which then count from each key's sequences).

        Window functions pick the winners (no row image sits in an aggregation buffer). Only
        when the batch has partial events are the images of a key gathered over its window."""
        part = "PARTITION BY _target, _kj"
        delivered = "origin DESC, offset DESC, item DESC"
        partial = any(p.meta.partial for p in self.tables.merge)
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
        soft = string_array(p.target for p in self.tables.merge if p.soft_deletes)
        hard = [
            p.target
            for p in self.tables.merge
            if not p.soft_deletes and (looked_up is None or p.name in looked_up)
        ]
        if tombstones and hard:
            # tombstones (by replica name) are appended: a key's newest is its highest; only the
            # batch's keys are looked at
            names = self._replica_names()
            tables = ", ".join(lit(self.tables.plans[t].name) for t in hard)
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

    # ------------------------------------------------------------------ keyless tables

    def multiset_winners_sql(self, validated: str) -> str:
        """The keyless tables' winning copy per event (see :mod:`cdcflow.engine.multiset`)."""
        return multiset.winners_sql(validated, self.tables.multiset)

    def multiset_staged_sql(
        self, winners: str, log: str | None, pipeline: str, batch_id: int
    ) -> str:
        """The keyless tables' winners against the log (``None``: none yet)."""
        return multiset.staged_sql(winners, log, self.tables.multiset, pipeline, batch_id)

    def multiset_log_source_sql(self, staged: str) -> str:
        """The log rows of the keyless tables' events the batch logs."""
        return multiset.log_source_sql(staged, self.tables.multiset)

    # ------------------------------------------------------------------ per table

    def history_log_source_sql(self, winners: str) -> str:
        """The batch's events of the scd2 tables as history log rows."""
        return log_source_sql(winners, self._replica_names())

    def deletes_source_sql(self, staged: str) -> str:
        """The batch's live deletes of hard-delete tables (for the tombstones)."""
        return (
            f"SELECT element_at({self._replica_names()}, _target) AS target, _kj AS key, "
            f"_seq AS seq FROM {staged} WHERE _live AND NOT _exists AND NOT _soft"
        )
