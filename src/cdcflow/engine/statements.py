"""One replica's statements: the guarded ``MERGE`` (or ``INSERT`` of new tables, the
changelog's append), ``TRUNCATE``'s delete, the tombstones' append and expiry, the columns of a
new replica, and the typed source each reads from the batch's staged views. Plain text from the
table plan (no Spark)."""

from __future__ import annotations

from cdcflow.engine.plan import TablePlan
from cdcflow.spark.sql import lit, q
from cdcflow.types.canonical import spark_from_wire, spark_type


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
