"""``scd2`` tables: one row per version of a key, recomputed exactly from every event of it.

A history cannot be kept exact by patching versions with each batch's events alone: a late
event may split an interval, a late partial event changes what the next versions carry, a
late delete closes a version early. So every applied event of an ``scd2`` table is kept in
one internal log (``history_log``: replica name, key, sequence, operation, image), and the
versions of the keys a batch touches are recomputed from their events in sequence order (all
of them, or those after the key's last delete before the batch's earliest event of it: see
:func:`versions_sql`):

1. per (table, key, sequence) the latest delivered copy wins (the log keeps one event per
   sequence; a different copy delivered later replaces it, counted as a conflict);
2. a ``DELETE`` closes the version before it and opens nothing; a ``TRUNCATE`` is a delete of
   every key at its sequence (events at the very sequence of a ``TRUNCATE`` are before it and
   lose to it);
3. a row event opens a version when a tracked column differs from the version before it (all
   columns are tracked unless the table says otherwise); otherwise it updates that version in
   place; the first event after a delete, or of a key, always opens one;
4. partial events carry the columns they lack from the event before them (since the last
   delete);
5. a version starts at its event's sequence (``__START_AT``) and ends at the next version's
   or the closing delete's (``__END_AT``, open for the current version), with the source
   commit timestamps of both ends and a ``__CURRENT`` flag.

The history table of a key is then made equal to its recomputed versions by one ``MERGE``
(insert the new, rewrite the changed, delete the gone), so replays and reruns after a crash
change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdcflow.engine.plan import TablePlan
from cdcflow.iceberg.layouts import VALIDITY
from cdcflow.spark.sql import lit, q
from cdcflow.types.canonical import spark_from_wire, spark_type, storage_type

_CLOSES = "('DELETE', 'TRUNCATE')"
#: Key of the log rows of a ``TRUNCATE`` (keys are JSON arrays: ``[`` never starts this).
TRUNCATE_KEY = "*"


def data_columns(plan: TablePlan) -> list[str]:
    """A history table's non-key columns, in plan order."""
    keys = set(plan.keys or ())
    return [c for c in plan.schema.types if c not in keys]


def winners_sql(rows: str, validated: str, targets: Sequence[str]) -> str:
    """Per (table, key, sequence) of the ``scd2`` tables the latest delivered copy, with the
    number of copies (``_n_in``) and of different contents (``_nfp``); plus one row per
    ``TRUNCATE`` (key ``*``). Rejected events pass, keyed by their code, to be counted."""
    arr = "array(" + ", ".join(lit(t) for t in targets) + ")"
    part = "PARTITION BY _target, _kj, _seq"
    return f"""
        SELECT _target, _kj, _kv, _seq, _ts, _id, _op, _partial, _after, _fp, _bad,
               CAST(_n_in AS bigint) AS _n_in, CAST(_nfp AS bigint) AS _nfp
        FROM (
          SELECT *, row_number() OVER ({part} ORDER BY origin DESC, offset DESC, item DESC)
                      AS _rs,
                 count(*) OVER ({part}) AS _n_in,
                 size(collect_set(_fp) OVER ({part})) AS _nfp
          FROM (
            SELECT _target, _kj, _kv, _seq, _ts, _id, origin, offset, item, _op, _partial,
                   _after, _fp, _bad
            FROM {rows} WHERE array_contains({arr}, _target)
            UNION ALL
            SELECT _target, {lit(TRUNCATE_KEY)}, CAST(NULL AS array<string>), sequence,
                   timestamp, id, origin, offset, item, 'TRUNCATE', false,
                   CAST(NULL AS map<string,string>), _fp, false
            FROM {validated}
            WHERE array_contains({arr}, _target) AND operation = 'TRUNCATE'
              AND _reject IS NULL))
        WHERE _rs = 1
    """


def log_source_sql(winners: str, names: str) -> str:
    """The log rows of the batch (``names``: SQL map of target → replica name)."""
    return (
        f"SELECT element_at({names}, _target) AS target, _kj AS key, _seq AS seq, _op AS op, "
        "_partial AS partial, _after AS image, _ts AS ts, _id AS id, _fp AS fp "
        f"FROM {winners} WHERE NOT _bad"
    )


def log_merge_sql(ident: str, source: str, names: Sequence[str]) -> str:
    """Record the batch's events: one per (table, key, sequence); a different copy replaces
    the one kept (the later delivered wins), an identical one changes nothing."""
    cols = ("op", "partial", "image", "ts", "id", "fp")
    sets = ", ".join(f"{c} = s.{c}" for c in cols)
    names_in = ", ".join(lit(n) for n in sorted(set(names)))
    return f"""
        MERGE INTO {ident} t USING {source} s
        ON t.target IN ({names_in}) AND t.target = s.target AND t.key = s.key
           AND t.seq = s.seq
        WHEN MATCHED AND t.fp <> s.fp THEN UPDATE SET {sets}, logged_at = current_timestamp()
        WHEN NOT MATCHED THEN INSERT (target, key, seq, op, partial, image, ts, id, fp,
                                      logged_at)
          VALUES (s.target, s.key, s.seq, s.op, s.partial, s.image, s.ts, s.id, s.fp,
                  current_timestamp())
    """


def touched_sql(winners: str, log: str, plan: TablePlan, truncated: bool) -> str:
    """The keys (as key JSON) whose versions the batch changes, each with the earliest
    sequence the batch brings for it (``m``): its keys, or every key of the table with no
    ``m`` (recomputed whole) when a ``TRUNCATE`` arrived."""
    if truncated:
        return (
            f"SELECT DISTINCT key, CAST(NULL AS string) AS m FROM {log} "
            f"WHERE target = {lit(plan.name)} AND key <> {lit(TRUNCATE_KEY)}"
        )
    return (
        f"SELECT _kj AS key, min(_seq) AS m FROM {winners} WHERE _target = {lit(plan.target)} "
        f"AND NOT _bad AND _kj <> {lit(TRUNCATE_KEY)} GROUP BY _kj"
    )


def _key_columns(plan: TablePlan, key_json: str) -> list[str]:
    assert plan.keys is not None
    types = plan.schema.types
    parsed = f"from_json({key_json}, 'array<string>')"
    return [
        f"{spark_from_wire(f'get({parsed}, {i})', types.get(k, 'string'))} AS {q(k)}"
        for i, k in enumerate(plan.keys)
    ]


def versions_sql(log: str, touched: str, plan: TablePlan) -> str:
    """The versions of the touched keys from the close each is recomputed from, typed as the
    history table's columns (keys, data columns, validity columns, ``_cdc``).

    A key's versions are recomputed from its last ``DELETE`` or ``TRUNCATE`` before the
    earliest sequence the batch brings for it (``m`` of :func:`touched_sql`), or from its
    first event when there is none: a close ends a life, and nothing after it depends on
    the events before it (a version starts only at a row event; the first row event of a
    life always opens one and carries nothing from before). The versions before that close
    end at it and cannot change, so the work per key follows its events since its last
    delete rather than its whole history. Each version carries that close (``_since``,
    ``NULL``: recomputed whole) for :func:`history_merge_sql`."""
    assert plan.keys is not None
    name = lit(plan.name)
    data = data_columns(plan)
    types = plan.schema.types
    tracked = data if plan.tracked is None else [c for c in data if c in set(plan.tracked)]
    life = "PARTITION BY key, _life ORDER BY seq"
    carried = [
        f"last(CASE WHEN _row AND (NOT partial OR map_contains_key(image, {lit(c)})) "
        f"THEN named_struct('v', image[{lit(c)}]) END, true) OVER ({life} "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW).v AS `_w{i}`"
        for i, c in enumerate(data)
    ]
    if tracked:
        index = {c: i for i, c in enumerate(data)}
        t = "named_struct(" + ", ".join(f"'t{index[c]}', `_w{index[c]}`" for c in tracked) + ")"
        opens = f"_row AND (lag(seq) OVER ({life}) IS NULL OR NOT ({t} <=> lag({t}) OVER ({life})))"
    else:
        opens = f"_row AND lag(seq) OVER ({life}) IS NULL"
    vals = (
        "max_by(named_struct(" + ", ".join(f"'c{i}', `_w{i}`" for i in range(len(data))) + "), seq)"
        if data
        else "CAST(NULL AS struct<c:string>)"
    )
    typed = [f"{spark_from_wire(f'_vals.c{i}', types[c])} AS {q(c)}" for i, c in enumerate(data)]
    keys = _key_columns(plan, "key")
    return f"""
        SELECT {", ".join([*keys, *typed])},
               _start AS __START_AT, _end AS __END_AT, _start_ts AS __START_TIMESTAMP,
               _end_ts AS __END_TIMESTAMP, _end IS NULL AS __CURRENT,
               named_struct('sequence', _last, 'operation', _op, 'event_id', _id,
                            'fingerprint', _fp, 'applied_at', current_timestamp()) AS _cdc,
               _since
        FROM (
          SELECT *, lead(_start) OVER (PARTITION BY key ORDER BY _start) AS _end,
                 lead(_start_ts) OVER (PARTITION BY key ORDER BY _start) AS _end_ts
          FROM (
            SELECT key, _vid, min(seq) AS _start, min_by(ts, seq) AS _start_ts,
                   min_by(_row, seq) AS _version, {vals} AS _vals, max(seq) AS _last,
                   max_by(op, seq) AS _op, max_by(id, seq) AS _id, max_by(fp, seq) AS _fp,
                   max(_since) AS _since
            FROM (
              SELECT *, sum(CASE WHEN _opens OR NOT _row THEN 1 ELSE 0 END)
                          OVER (PARTITION BY key ORDER BY seq
                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _vid
              FROM (
                SELECT *, {opens} AS _opens
                FROM (
                  SELECT *{"".join(", " + c for c in carried)}
                  FROM (
                    SELECT *, coalesce(sum(CASE WHEN op IN {_CLOSES} THEN 1 ELSE 0 END)
                                OVER (PARTITION BY key ORDER BY seq ROWS BETWEEN
                                      UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS _life,
                           op NOT IN {_CLOSES} AS _row
                    FROM (
                      SELECT * FROM (
                        SELECT *, max(CASE WHEN op IN {_CLOSES} AND seq < _m THEN seq END)
                                    OVER (PARTITION BY key) AS _since
                        FROM (
                          SELECT e.* FROM (
                            SELECT l.key, l.seq, l.op, l.partial, l.image, l.ts, l.id, l.fp,
                                   k.m AS _m
                            FROM {log} l JOIN ({touched}) k ON l.key = k.key
                            WHERE l.target = {name}) e
                          LEFT ANTI JOIN (SELECT seq FROM {log} WHERE target = {name}
                                          AND key = {lit(TRUNCATE_KEY)}) x ON e.seq = x.seq
                          UNION ALL
                          SELECT k.key, x.seq, 'TRUNCATE', false,
                                 CAST(NULL AS map<string,string>), x.ts, x.id, x.fp, k.m
                          FROM ({touched}) k CROSS JOIN (
                            SELECT seq, ts, id, fp FROM {log}
                            WHERE target = {name} AND key = {lit(TRUNCATE_KEY)}) x))
                      WHERE _since IS NULL OR seq > _since)))))
            GROUP BY key, _vid))
        WHERE _version
    """


def history_merge_sql(ident: str, plan: TablePlan, versions: str, touched: str) -> str:
    """Make the history of the touched keys equal to their recomputed versions: insert new
    versions, rewrite changed ones, delete the ones that no longer exist — of a key, those
    after the close its versions were recomputed from (every one when there was none), or,
    when none of its versions were recomputed, those starting at or after the batch's
    earliest sequence for it (a key has no version after its close then: a row event after
    a close opens one, so only a copy the batch replaced can have left one)."""
    assert plan.keys is not None
    keys = list(plan.keys)
    data = data_columns(plan)
    validity = [n for n, _ in VALIDITY]
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys) + " AND t.__START_AT = s.__START_AT"
    same = " AND ".join(
        [
            *(f"t.{q(c)} <=> s.{q(c)}" for c in [*data, *validity[1:]]),
            "t._cdc.sequence <=> s._cdc.sequence",
            "t._cdc.fingerprint <=> s._cdc.fingerprint",
        ]
    )
    cols = [*keys, *data, *validity, "_cdc"]
    sets = ", ".join(f"{q(c)} = s.{q(c)}" for c in [*data, *validity[1:], "_cdc"])
    gone_cols = ", ".join(
        [
            *(f"h.{q(k)}" for k in keys),
            *(f"CAST(NULL AS {storage_type(plan.schema.types[c])}) AS {q(c)}" for c in data),
            "h.__START_AT",
            *(f"CAST(NULL AS {t}) AS {n}" for n, t in VALIDITY[1:]),
            "h._cdc",
            "CAST(NULL AS string) AS _since",
        ]
    )
    key_on = " AND ".join(f"h.{q(k)} = k.{q(k)}" for k in keys)
    version_on = " AND ".join(f"h.{q(k)} = v.{q(k)}" for k in keys)
    bound_on = " AND ".join(f"h.{q(k)} = b.{q(k)}" for k in keys)
    typed_touched = f"SELECT {', '.join(_key_columns(plan, 'key'))}, m FROM ({touched})"
    return f"""
        MERGE INTO {ident} t USING (
          SELECT *, false AS _drop FROM {versions}
          UNION ALL
          SELECT {gone_cols}, true AS _drop
          FROM (
            SELECT h.* FROM {ident} h JOIN ({typed_touched}) k ON {key_on}
            LEFT JOIN (SELECT {", ".join(q(k) for k in keys)}, max(_since) AS _since,
                              true AS _has
                       FROM {versions} GROUP BY {", ".join(q(k) for k in keys)}) b
              ON {bound_on}
            WHERE k.m IS NULL OR h.__START_AT >= k.m
               OR (b._has AND (b._since IS NULL OR h.__START_AT > b._since))) h
          LEFT ANTI JOIN {versions} v ON {version_on} AND h.__START_AT = v.__START_AT
        ) s
        ON {on}
        WHEN MATCHED AND s._drop THEN DELETE
        WHEN MATCHED AND NOT s._drop AND NOT ({same}) THEN UPDATE SET {sets}
        WHEN NOT MATCHED AND NOT s._drop THEN INSERT ({", ".join(q(c) for c in cols)})
          VALUES ({", ".join(f"s.{q(c)}" for c in cols)})
    """


def history_insert_sql(ident: str, plan: TablePlan, versions: str) -> str:
    """What :func:`history_merge_sql` writes into a history table that holds no row — one the
    batch's own DDL created: every recomputed version, appended (nothing to match, nothing
    gone)."""
    assert plan.keys is not None
    cols = ", ".join(q(c) for c in [*plan.keys, *data_columns(plan), *(n for n, _ in VALIDITY)])
    return f"INSERT INTO {ident} ({cols}, _cdc) SELECT {cols}, _cdc FROM {versions}"


def history_write_sql(ident: str, plan: TablePlan, versions: str, touched: str) -> str:
    """The statement that makes a history table hold the touched keys' recomputed versions:
    the ``MERGE``, or the append into a table the batch created (a replay of that batch finds
    the table existing and merges)."""
    if plan.exists:
        return history_merge_sql(ident, plan, versions, touched)
    return history_insert_sql(ident, plan, versions)


def create_history_columns(plan: TablePlan, cdc_struct: str) -> str:
    """Column list of a new history table: the columns in the producer's order (key columns
    it did not send first), the validity columns, then ``_cdc``."""
    assert plan.keys is not None
    types = plan.schema.types
    ordered = [*[k for k in plan.keys if k not in types], *types]
    cols = [f"{q(c)} {spark_type(types.get(c, 'string'))}" for c in ordered]
    return ", ".join([*cols, *(f"{n} {t}" for n, t in VALIDITY), f"_cdc {cdc_struct}"])
