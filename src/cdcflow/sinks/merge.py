"""The Iceberg ``merge`` sink: exact current-state replicas (DESIGN §5 items 1–8).

Per micro-batch and table, Spark SQL only, one ``MERGE INTO`` (never one per event):

1. key values from ``key`` (else the row image); updates whose ``before`` key differs from the
   new key also delete the old key (item 5);
2. drop events at or below the table's ``TRUNCATE`` watermark; apply a new truncate;
3. exact duplicates collapse; different events at one sequence: the later delivered wins and is
   counted as a conflict (item 1);
4. collapse per key: the newest full image or delete is the base; partial events newer than
   the base contribute their columns (item 4);
5. tombstones of deleted keys drop older events (item 3);
6. ``MERGE``: every column changes only when the source's author for it is newer than the
   replica's (``_cdc.sequence``, ``_cdc.row_sequence``, ``_cdc.column_sequences``), so stale
   events in any later batch or run never overwrite newer rows (item 2) and replays are no-ops
   (item 7);
7. deletes update the tombstone table (hard deletes) or flag the row (soft deletes).

A replica row's ``_cdc`` column holds the authoring sequence, operation, source timestamp,
event id, fingerprint, soft-delete flag and applied-at time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.engine.commit import commit_properties, committed_steps, ledger_props
from cdcflow.engine.sql import lit, q, view_name
from cdcflow.engine.tables import (
    KEY_PROPERTY,
    TRUNCATE_PROPERTY,
    create_table,
    read_properties,
    set_property,
    table_exists,
)
from cdcflow.types import spark_from_wire


@dataclass(frozen=True)
class MergeTarget:
    """Where and how one table is written."""

    ident: str  # catalog.namespace.table
    tombstones: str  # catalog.internal_namespace.tombstones__table
    keys: tuple[str, ...]
    types: Mapping[str, str]  # data column → canonical type (after schema evolution)
    soft_deletes: bool
    pipeline: str
    batch_id: int
    check_ledger: bool


@dataclass(frozen=True)
class MergeResult:
    """What one table's merge did."""

    events: int
    duplicates: int
    conflicts: int
    stale: int
    skipped: bool


def key_alias(i: int) -> str:
    """Name of the i-th key column inside the staging views."""
    return f"`_k{i}`"


def col_alias(i: int) -> str:
    """Name of the i-th data column inside the staging views."""
    return f"`_c{i}`"


def colseq_alias(i: int) -> str:
    """Name of the i-th data column's authoring sequence inside the staging views."""
    return f"`_cs{i}`"


def _key_expr(k: str, t: str) -> str:
    wire = (
        f"coalesce(key[{lit(k)}], CASE WHEN operation = 'DELETE' THEN before[{lit(k)}] "
        f"ELSE after[{lit(k)}] END)"
    )
    return spark_from_wire(wire, t)


def apply_merge(
    spark: Any,
    events: Any,
    target: MergeTarget,
    has_partial: bool,
    operations: Mapping[str, int] | None = None,
) -> MergeResult:
    """Apply one batch's events of one table (a DataFrame of canonical events plus ``_fp``
    fingerprint and transport columns) to its replica.

    ``operations`` (operation → count in this batch, when the caller knows it) lets the sink
    skip work the batch does not need (no ``TRUNCATE``: no watermark query).
    """
    keys = target.keys
    types = target.types
    data_cols = [c for c in types if c not in keys]
    # inside the staging views keys and columns go by position (_kN, _cN): a source column may
    # be named like a working column (MongoDB's `_id`, a key called `offset`...)
    qk = [key_alias(i) for i in range(len(keys))]

    done: set[str] = set()
    if target.check_ledger:
        # a replayed batch: skip the commits it already made (each is idempotent anyway)
        done = committed_steps(spark, target.ident, target.pipeline, target.batch_id)
        if "merge" in done:
            done |= committed_steps(spark, target.tombstones, target.pipeline, target.batch_id)
        if {"merge", "tombstones"} <= done:
            return MergeResult(0, 0, 0, 0, skipped=True)

    props = read_properties(spark, target.ident)
    watermark = props.get(TRUNCATE_PROPERTY, "")
    src = view_name("events")
    events.createOrReplaceTempView(src)

    # -- TRUNCATE (item 5): a watermark on the table; rows and events older than it go.
    trunc = None
    if operations is None or operations.get("TRUNCATE"):
        trunc = spark.sql(
            f"SELECT max(sequence) AS s FROM {src} WHERE operation = 'TRUNCATE'"
        ).collect()[0]["s"]
    if trunc and trunc > watermark:
        set_property(spark, target.ident, TRUNCATE_PROPERTY, trunc)
        with commit_properties(spark, ledger_props(target.pipeline, target.batch_id, "truncate")):
            spark.sql(f"DELETE FROM {target.ident} WHERE _cdc.sequence < {lit(trunc)}")
        watermark = trunc

    key_select = ", ".join(
        f"{_key_expr(k, types[k])} AS {key_alias(i)}" for i, k in enumerate(keys)
    )
    # an update whose before image names another key deletes that key (PK change)
    old_key_select = ", ".join(
        f"{spark_from_wire(f'before[{lit(k)}]', types[k])} AS {key_alias(i)}"
        for i, k in enumerate(keys)
    )
    pk_changed = " OR ".join(
        f"NOT (before[{lit(k)}] <=> coalesce(key[{lit(k)}], after[{lit(k)}]))" for k in keys
    )
    pk_old_present = " AND ".join(f"before[{lit(k)}] IS NOT NULL" for k in keys)
    common = "sequence AS _seq, timestamp AS _ts, id AS _id, origin, offset, item"
    # soft deletes keep the row as it was deleted (its before image) in the replica
    deleted_image = "before" if target.soft_deletes else "CAST(NULL AS map<string,string>)"
    rows_view = view_name("rows")
    spark.sql(
        f"""
        SELECT {key_select}, {common}, operation AS _op, partial AS _partial,
               CASE WHEN operation = 'DELETE' THEN {deleted_image} ELSE after END AS _after, _fp
        FROM {src}
        WHERE operation IN ('INSERT','UPDATE','UPSERT','SNAPSHOT','DELETE')
          AND sequence > {lit(watermark)}
        UNION ALL
        SELECT {old_key_select}, {common}, 'DELETE' AS _op, false AS _partial,
               CAST(NULL AS map<string,string>) AS _after, _fp + 1 AS _fp
        FROM {src}
        WHERE operation IN ('UPDATE','UPSERT') AND before IS NOT NULL AND ({pk_old_present})
          AND ({pk_changed}) AND sequence > {lit(watermark)}
        """
    ).createOrReplaceTempView(rows_view)

    # -- duplicates and conflicts (item 1)
    part = ", ".join(qk)
    ranked = view_name("ranked")
    collapsed = view_name("collapsed")
    counts: Any = None
    if not has_partial:
        # No partial events: a key's newest event (latest delivered at its sequence) carries
        # the whole row. One window picks it; the counts come from a narrow aggregate.
        spark.sql(
            f"""
            SELECT *, row_number() OVER (PARTITION BY {part}
                                         ORDER BY _seq DESC, origin DESC, offset DESC,
                                                  item DESC) AS _rn
            FROM {rows_view}
            """
        ).createOrReplaceTempView(ranked)
        spark.sql(
            f"""
            SELECT {part}, _seq, _op, _ts, _id, _fp, _seq AS _base_seq, _after AS _base_after,
                   0L AS _n_in, 0L AS _n_conf, 0L AS _n_win
            FROM {ranked} WHERE _rn = 1
            """
        ).createOrReplaceTempView(collapsed)
        counts = spark.sql(
            f"""
            SELECT coalesce(sum(c), 0) AS n, count(*) AS winners,
                   coalesce(sum(nfp - 1), 0) AS conflicts
            FROM (SELECT count(*) AS c, size(collect_set(_fp)) AS nfp FROM {rows_view}
                  GROUP BY {part}, _seq)
            """
        ).collect()[0]
    else:
        # one row per (key, sequence): the latest delivered copy, with how many copies and how
        # many different contents there were. Distributing by key first lets this aggregation
        # and the collapse below share one shuffle.
        spark.sql(
            f"""
            SELECT {part}, _seq, _w._ts AS _ts, _w._id AS _id, _w._op AS _op,
                   _w._partial AS _partial, _w._after AS _after, _w._fp AS _fp, _nfp, _nseq
            FROM (
              SELECT {part}, _seq,
                     max_by(struct(_ts, _id, _op, _partial, _after, _fp),
                            struct(origin, offset, item)) AS _w,
                     size(collect_set(_fp)) AS _nfp, count(*) AS _nseq
              FROM (SELECT * FROM {rows_view} DISTRIBUTE BY {part})
              GROUP BY {part}, _seq
            )
            """
        ).createOrReplaceTempView(ranked)
        # collapse per key (items 1, 4): the newest full image or delete is the base; partial
        # events newer than it contribute their columns
        parts = []
        for i, c in enumerate(data_cols):
            cond = f"CASE WHEN _partial AND map_contains_key(_after, {lit(c)}) THEN _seq END"
            parts.append(f"max({cond}) AS _ps{i}, max_by(_after[{lit(c)}], {cond}) AS _pv{i}")
        partial_aggs = ", " + ", ".join(parts) if parts else ""
        spark.sql(
            f"""
            SELECT {part}, max(_seq) AS _seq, max_by(_op, _seq) AS _op, max_by(_ts, _seq) AS _ts,
                   max_by(_id, _seq) AS _id, max_by(_fp, _seq) AS _fp,
                   max(CASE WHEN NOT _partial THEN _seq END) AS _base_seq,
                   max_by(_after, CASE WHEN NOT _partial THEN _seq END) AS _base_after,
                   sum(_nseq) AS _n_in, sum(_nfp - 1) AS _n_conf, count(*) AS _n_win
                   {partial_aggs}
            FROM {ranked}
            GROUP BY {part}
            """
        ).createOrReplaceTempView(collapsed)

    # -- tombstones (item 3)
    tomb_exists = (not target.soft_deletes) and table_exists(spark, target.tombstones)
    if tomb_exists:
        on = " AND ".join(f"c.{key_alias(i)} = tb.{q(k)}" for i, k in enumerate(keys))
        tomb_join = f"LEFT JOIN {target.tombstones} tb ON {on}"
        tomb_seq = "tb._seq"
    else:
        tomb_join = ""
        tomb_seq = "CAST(NULL AS string)"

    col_exprs = []
    seq_exprs = []
    for i, c in enumerate(data_cols):
        if has_partial:
            newer = f"(_ps{i} IS NOT NULL AND _ps{i} > coalesce(_base_seq, ''))"
            wire = f"CASE WHEN {newer} THEN _pv{i} ELSE _base_after[{lit(c)}] END"
            cseq = f"CASE WHEN {newer} THEN _ps{i} ELSE _base_seq END"
        else:
            wire = f"_base_after[{lit(c)}]"
            cseq = "_base_seq"
        # authors at or below a tombstone were deleted by it
        col_exprs.append(
            f"CASE WHEN _tomb IS NOT NULL AND ({cseq}) <= _tomb THEN NULL "
            f"ELSE {spark_from_wire(wire, types[c])} END AS {col_alias(i)}"
        )
        seq_exprs.append(
            f"CASE WHEN _tomb IS NOT NULL AND coalesce({cseq}, '') <= _tomb THEN _tomb "
            f"ELSE {cseq} END AS {colseq_alias(i)}"
        )
    names_arr = ", ".join(lit(c) for c in data_cols)
    seqs_arr = ", ".join(colseq_alias(i) for i in range(len(data_cols)))
    inner_cols = ", ".join(col_exprs + seq_exprs)
    base_fixed = (
        "CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb "
        "ELSE _base_seq END"
    )
    staged_df = spark.sql(
        f"""
        SELECT *, {_colseq_map(names_arr, seqs_arr, "coalesce(_base_seq, '')", bool(data_cols))}
               AS _colseqs
        FROM (
          SELECT {", ".join(qk)}, _seq, _op, _ts, _id, _fp, _op <> 'DELETE' AS _exists,
                 _tomb IS NULL OR _seq > _tomb AS _live, _n_in, _n_conf, _n_win,
                 {base_fixed} AS _base_seq{", " + inner_cols if inner_cols else ""}
          FROM (SELECT c.*, {tomb_seq} AS _tomb FROM {collapsed} c {tomb_join})
        )
        """
    ).persist()
    try:
        staged = view_name("staged")
        staged_df.createOrReplaceTempView(staged)
        # one pass over the staged rows gives every count the batch reports
        soft = str(target.soft_deletes).lower()
        stats = spark.sql(
            f"""
            SELECT coalesce(sum(_n_in), 0) AS n, coalesce(sum(_n_conf), 0) AS conflicts,
                   coalesce(sum(_n_win), 0) AS winners,
                   count_if(NOT _live) AS buried,
                   count_if(_live AND NOT _exists) AS deletes,
                   count_if(_live AND (_exists OR {soft})) AS writes
            FROM {staged}
            """
        ).collect()[0]
        source = view_name("source")
        spark.sql(f"SELECT * FROM {staged} WHERE _live").createOrReplaceTempView(source)
        written: int | None = None
        if "merge" not in done:
            _merge(spark, target, source, data_cols)
            written = _records_added(spark, target)
        if not target.soft_deletes and "tombstones" not in done and stats["deletes"]:
            _record_tombstones(spark, target, source)
        for v in (src, rows_view, ranked, collapsed, staged, source):
            spark.catalog.dropTempView(v)
    finally:
        staged_df.unpersist()
    totals = counts if counts is not None else stats
    n = int(totals["n"])
    conflicts = int(totals["conflicts"])
    winners = int(totals["winners"])
    # stale: a key's newest events that lost to its tombstone, or to a newer replica row (the
    # guarded MERGE wrote no record for them)
    stale = int(stats["buried"])
    if written is not None:
        stale += max(0, int(stats["writes"]) - written)
    return MergeResult(
        events=n,
        duplicates=n - winners - conflicts,
        conflicts=conflicts,
        stale=stale,
        skipped=False,
    )


def _records_added(spark: Any, target: MergeTarget) -> int:
    """Records the batch's MERGE wrote (merge-on-read: inserted and updated rows only), from
    its snapshot summary (0 when the MERGE changed nothing and made no snapshot)."""
    rows = spark.sql(
        f"SELECT summary['added-records'] AS n FROM {target.ident}.snapshots "
        f"WHERE summary['cdcflow.pipeline'] = {lit(target.pipeline)} "
        f"AND summary['cdcflow.batch'] = {lit(str(target.batch_id))} "
        "AND summary['cdcflow.step'] = 'merge'"
    ).collect()
    return sum(int(r["n"] or 0) for r in rows)


def _colseq_map(names_arr: str, seqs_arr: str, base: str, any_cols: bool) -> str:
    if not any_cols:
        return "CAST(NULL AS map<string,string>)"
    m = f"map_filter(map_from_arrays(array({names_arr}), array({seqs_arr})), (k, v) -> v > {base})"
    return f"CASE WHEN size({m}) = 0 THEN NULL ELSE {m} END"


def _merge(spark: Any, target: MergeTarget, source: str, data_cols: Sequence[str]) -> None:
    keys = target.keys
    on = " AND ".join(f"t.{q(k)} = s.{key_alias(i)}" for i, k in enumerate(keys))
    conflict = "(s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)"
    sets = []
    names = []
    seqs = []
    column_newer = []
    for i, c in enumerate(data_cols):
        tcs = f"coalesce(t._cdc.column_sequences[{lit(c)}], t._cdc.row_sequence)"
        scs = f"s.{colseq_alias(i)}"
        column_newer.append(f"{scs} > {tcs}")
        # soft deletes keep the deleted row's last values
        guard = "s._exists AND " if target.soft_deletes else ""
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

    deleted = "NOT s._exists" if target.soft_deletes else "false"
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
    cdc_insert = (
        "named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), "
        "'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, "
        f"'event_id', s._id, 'fingerprint', s._fp, 'deleted', {deleted}, "
        "'applied_at', current_timestamp())"
    )
    all_cols = [*keys, *data_cols]
    insert_cols = ", ".join(q(c) for c in all_cols) + ", _cdc"
    insert_vals = (
        ", ".join(
            [*(f"s.{key_alias(i)}" for i in range(len(keys)))]
            + [f"s.{col_alias(i)}" for i in range(len(data_cols))]
        )
        + f", {cdc_insert}"
    )
    update_sets = ", ".join([*sets, f"_cdc = {cdc_update}"])
    if target.soft_deletes:
        delete_clause = ""
        not_matched = "WHEN NOT MATCHED THEN INSERT"
    else:
        delete_clause = "WHEN MATCHED AND NOT s._exists AND s._seq > t._cdc.sequence THEN DELETE"
        not_matched = "WHEN NOT MATCHED AND s._exists THEN INSERT"
    # a matched row is rewritten only when the source changes something: a newer event, a
    # conflict at the same sequence, or a column whose author is newer (late partial events).
    # Redelivered input therefore rewrites nothing, not even `_cdc.applied_at`.
    changes = " OR ".join(["s._seq > t._cdc.sequence", conflict, *column_newer])
    sql = f"""
        MERGE INTO {target.ident} t USING {source} s ON {on}
        {delete_clause}
        WHEN MATCHED AND ({changes}) THEN UPDATE SET {update_sets}
        {not_matched} ({insert_cols}) VALUES ({insert_vals})
    """
    with commit_properties(spark, ledger_props(target.pipeline, target.batch_id, "merge")):
        spark.sql(sql)


def _record_tombstones(spark: Any, target: MergeTarget, source: str) -> None:
    deletes = spark.sql(f"SELECT * FROM {source} WHERE NOT _exists")
    key_types = {k: target.types[k] for k in target.keys}
    if not table_exists(spark, target.tombstones):
        from cdcflow.types import spark_type

        cols = ", ".join(f"{q(k)} {spark_type(t)}" for k, t in key_types.items())
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {target.tombstones} ({cols}, _seq string, "
            "_deleted_at timestamp) USING iceberg TBLPROPERTIES ('format-version'='2', "
            f"'write.merge.mode'='merge-on-read', {lit(KEY_PROPERTY)}="
            f"{lit(','.join(target.keys))})"
        )
    on = " AND ".join(f"t.{q(k)} = s.{key_alias(i)}" for i, k in enumerate(target.keys))
    view = view_name("deletes")
    deletes.createOrReplaceTempView(view)
    cols = ", ".join(q(k) for k in target.keys)
    vals = ", ".join(f"s.{key_alias(i)}" for i in range(len(target.keys)))
    with commit_properties(spark, ledger_props(target.pipeline, target.batch_id, "tombstones")):
        spark.sql(
            f"""
            MERGE INTO {target.tombstones} t USING {view} s ON {on}
            WHEN MATCHED AND s._seq > t._seq THEN UPDATE SET _seq = s._seq,
                 _deleted_at = current_timestamp()
            WHEN NOT MATCHED THEN INSERT ({cols}, _seq, _deleted_at)
                 VALUES ({vals}, s._seq, current_timestamp())
            """
        )
    spark.catalog.dropTempView(view)


def ensure_merge_table(
    spark: Any, ident: str, keys: Sequence[str], types: Mapping[str, str]
) -> None:
    """Create the replica table on first sight (keys first)."""
    ordered = {k: types[k] for k in keys}
    ordered.update({c: t for c, t in types.items() if c not in ordered})
    create_table(spark, ident, ordered, keys=keys)


def expire_tombstones(spark: Any, tombstones: str, retention_seconds: int) -> None:
    """Drop tombstones older than the retention (a late event older than a dropped tombstone
    can then resurrect its row: choose a retention beyond the producers' redelivery horizon)."""
    if table_exists(spark, tombstones):
        spark.sql(
            f"DELETE FROM {tombstones} WHERE _deleted_at < "
            f"current_timestamp() - make_interval(0, 0, 0, 0, 0, 0, {retention_seconds})"
        )


def key_columns_from_table(spark: Any, ident: str) -> tuple[str, ...] | None:
    """Key columns recorded on an existing replica."""
    if not table_exists(spark, ident):
        return None
    v = read_properties(spark, ident).get(KEY_PROPERTY)
    return tuple(v.split(",")) if v else None
