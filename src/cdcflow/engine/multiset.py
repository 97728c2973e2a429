"""Tables without a primary key (``keys: none``): the replica is a multiset of rows.

A table without a key is replicated exactly as a multiset — each distinct row with its
multiplicity: an insert (or a snapshot read) adds one copy of its ``after`` image, a delete
removes one copy of its ``before`` image, an update does both. These commute, so the replica
depends neither on the order events arrive in nor on their sequences, only on which events
apply, each once:

1. per (table, event id) the latest delivered copy wins (exact copies are duplicates, other
   contents conflicts), as per (key, sequence) in a merge table;
2. every applied event of a keyless table is kept in one internal log (``multiset_log``:
   replica name, event id, fingerprint, sequence, the hashes of its before and after images,
   its after image), one row per event, so an event logged by an earlier batch or run is a
   duplicate; a different copy delivered later replaces the logged one, which keeps the
   replaced images' hashes (``prev_bh``, ``prev_ah``) so that their counts are redone even
   when the batch runs again after its log was committed;
3. a row image is known by a hash of its columns' canonical text (each value normalised to
   its column's type, ``NULL`` columns left out, so a column added later changes nothing);
4. an image's multiplicity is the number of logged after images with its hash less the number
   of logged before images, counting only events after the table's ``TRUNCATE``; the replica
   holds an image that many times, when positive, as rows numbered ``1..n`` (``_cdc.copy``),
   and one ``MERGE`` per table adds the copies missing and deletes those past the count, for
   the images the batch touched (all of them after a ``TRUNCATE``).

Events whose images cannot name the rows they remove are refused (``IMAGE_INCOMPLETE``):
updates, deletes and upserts without a before image, inserts whose image is partial. A
partial update with its before image is whole: the before image gives the columns it lacks.

The SQL is plain text from the table plans (no Spark), run by
:class:`cdcflow.engine.execute.BatchStage` and :mod:`cdcflow.pipeline.writes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cdcflow.engine.meta import ROW_OPERATIONS
from cdcflow.engine.plan import TablePlan
from cdcflow.event import DERIVED_ID_PREFIX
from cdcflow.spark.sql import lit, q, string_array, string_map
from cdcflow.types.canonical import spark_from_wire, spark_type, storage_type

#: The code of events whose images cannot name the rows they add or remove.
IMAGE_INCOMPLETE = "IMAGE_INCOMPLETE"
#: ``_status`` of a staged winner: its event is logged by this batch (``new``, ``replace``:
#: a different copy of a logged event), was logged by this very batch before it ran again
#: (``own``), or by an earlier one (``dup``).
NEW, REPLACE, OWN, DUP = "new", "replace", "own", "dup"

_ROW_OPS = "(" + ", ".join(lit(o) for o in ROW_OPERATIONS) + ")"
_NO_MAP = "CAST(NULL AS map<string,string>)"
_LOG_COLUMNS = (
    "target, id, fp, seq, op, bh, ah, image, ts, prev_bh, prev_ah, pipeline, batch_id, logged_at"
)


def hash_text(value: str, t: str) -> str:
    """SQL of the canonical text of a wire string in a column of type ``t``, as an image's
    hash reads it: the typed value as text (``1.50`` and ``1.5`` alike), floats as doubles (a
    column widened from float reads its old rows alike), the wire string itself where the
    type cannot read it."""
    st = storage_type(t)
    if t in ("string", "uuid", "json", "time", "binary"):
        return value
    if t == "point" or t.startswith("array<"):
        typed = f"to_json(from_json({value}, {lit(st)}))"
    else:
        typed = f"CAST(try_cast({value} AS {'double' if st == 'float' else st}) AS string)"
    return f"coalesce({typed}, concat('?', {value}))"


def image_hash_sql(image: str, types: Mapping[str, str]) -> str:
    """SQL of the hash of a row image (``map<string,string>`` of wire strings) over the
    table's columns ``types``: each non-null column as ``<name length>:<name><value
    length>:<value>`` in name order, so no two images share a text."""
    pieces = []
    for c in sorted(types):
        v = f"{image}[{lit(c)}]"
        text = hash_text(v, types[c])
        pieces.append(
            f"CASE WHEN {v} IS NULL THEN NULL ELSE "
            f"concat({lit(f'{len(c)}:{c}')}, CAST(length({text}) AS string), ':', {text}) END"
        )
    return f"sha2(concat_ws('', {', '.join(pieces)}), 256)" if pieces else "sha2('', 256)"


def _by_target(plans: Sequence[TablePlan], sql: Callable[[TablePlan], str]) -> str:
    branches = " ".join(f"WHEN {lit(p.target)} THEN {sql(p)}" for p in plans)
    return f"CASE _target {branches} END"


def _names(plans: Sequence[TablePlan]) -> str:
    return string_map({p.target: lit(p.name) for p in plans})


def _names_in(plans: Sequence[TablePlan]) -> str:
    return ", ".join(lit(n) for n in sorted({p.name for p in plans}))


def rules(plans: Sequence[TablePlan]) -> list[tuple[str, str, str]]:
    """The rejection rule of keyless tables: (condition, code, message) SQL."""
    if not plans:
        return []
    targets = string_array(p.target for p in plans)
    missing = "operation IN ('UPDATE', 'UPSERT', 'DELETE') AND before IS NULL"
    cond = (
        f"array_contains({targets}, _target) AND "
        f"(({missing}) OR (partial AND operation IN ('INSERT', 'SNAPSHOT')))"
    )
    table = f"concat('table ', element_at({_names(plans)}, _target), ' has no key (keys: none): ')"
    msg = (
        f"concat({table}, CASE WHEN {missing} THEN concat('a', CASE WHEN operation = 'UPDATE' "
        "THEN 'n' ELSE '' END, ' ', operation, ' removes the one row equal to its before "
        "image, and this event has none: the producer must send whole before images "
        "(PostgreSQL: ALTER TABLE ... REPLICA IDENTITY FULL)') ELSE concat('an ', operation, "
        "' with a partial row image (columns the producer left out) names no row') END)"
    )
    return [(cond, IMAGE_INCOMPLETE, msg)]


def winners_sql(validated: str, plans: Sequence[TablePlan]) -> str:
    """Per (table, event id) of the keyless tables the latest delivered copy, with the
    number of copies (``_n_in``) and of different contents (``_nfp``), the hashes of its
    before (updates, upserts, deletes) and after images (``_bh``, ``_ah``) and its whole
    after image (a partial update's completed from its before image). Events at or below a
    ``TRUNCATE`` the table has seen are left out (they are stale)."""
    targets = string_array(p.target for p in plans)
    marks = string_map({p.target: lit(p.watermark) for p in plans if p.watermark})
    whole = "after"
    if any(p.meta.partial for p in plans):
        whole = (
            "CASE WHEN partial AND before IS NOT NULL THEN map_concat(map_filter(before, "
            "(k, v) -> NOT map_contains_key(after, k)), after) ELSE after END"
        )
    before = _by_target(plans, lambda p: image_hash_sql("before", p.schema.types))
    after = _by_target(plans, lambda p: image_hash_sql("_whole", p.schema.types))
    part = "PARTITION BY _target, _eid"
    # an id of the event's own, else (a hash of table, key, sequence, operation: no key here)
    # with its fingerprint, or every row of one snapshot position would be one event
    derived = lit(DERIVED_ID_PREFIX + "%")
    eid = f"CASE WHEN id LIKE {derived} THEN concat(id, ':', CAST(_fp AS string)) ELSE id END"
    return f"""
        SELECT _target, _eid AS _id, sequence AS _seq, operation AS _op, timestamp AS _ts, _fp,
               CASE WHEN operation IN ('UPDATE', 'UPSERT', 'DELETE') THEN {before} END AS _bh,
               CASE WHEN operation <> 'DELETE' THEN {after} END AS _ah,
               CASE WHEN operation <> 'DELETE' THEN _whole END AS _after,
               CAST(_n_in AS bigint) AS _n_in, CAST(_nfp AS bigint) AS _nfp
        FROM (
          SELECT *, row_number() OVER ({part} ORDER BY origin DESC, offset DESC, item DESC)
                      AS _rs,
                 count(*) OVER ({part}) AS _n_in, size(collect_set(_fp) OVER ({part})) AS _nfp
          FROM (SELECT *, {whole} AS _whole, {eid} AS _eid FROM {validated}
                WHERE array_contains({targets}, _target) AND _reject IS NULL
                  AND operation IN {_ROW_OPS}
                  AND sequence > coalesce(element_at({marks}, _target), '')))
        WHERE _rs = 1
    """


def staged_sql(
    winners: str, log: str | None, plans: Sequence[TablePlan], pipeline: str, batch_id: int
) -> str:
    """The winners with their ``_status`` against the log (``None``: no log yet) and, for
    those the log holds, its hashes (``_lbh``, ``_lah``) and replaced ones (``_lpbh``,
    ``_lpah``). Only the log rows of the batch's events are looked at."""
    if log is None:
        nulls = ", ".join(
            f"CAST(NULL AS string) AS {c}" for c in ("_lbh", "_lah", "_lpbh", "_lpah")
        )
        return f"SELECT w.*, {lit(NEW)} AS _status, {nulls} FROM {winners} w"
    names = _names(plans)
    status = (
        f"CASE WHEN l.id IS NULL THEN {lit(NEW)} "
        f"WHEN l.pipeline = {lit(pipeline)} AND l.batch_id = {int(batch_id)} THEN {lit(OWN)} "
        f"WHEN l.fp = w._fp THEN {lit(DUP)} ELSE {lit(REPLACE)} END"
    )
    return f"""
        SELECT w.*, {status} AS _status, l.bh AS _lbh, l.ah AS _lah, l.prev_bh AS _lpbh,
               l.prev_ah AS _lpah
        FROM {winners} w LEFT JOIN (
          SELECT l.target, l.id, l.fp, l.bh, l.ah, l.prev_bh, l.prev_ah, l.pipeline, l.batch_id
          FROM (SELECT * FROM {log} WHERE target IN ({_names_in(plans)})) l
          LEFT SEMI JOIN (SELECT element_at({names}, _target) AS _name, _id FROM {winners}) k
            ON l.target = k._name AND l.id = k._id) l
        ON l.target = element_at({names}, w._target) AND l.id = w._id
    """


def stats_sql(staged: str) -> str:
    """The keyless tables' counts (columns of :func:`cdcflow.engine.stats.stats_sql`):
    ``n`` events, ``conflicts`` beyond each event's winner, ``winners`` and ``writes`` the
    events applied (logged now or by this batch before), ``live`` those the log step writes,
    ``replaced`` those replacing a logged copy."""
    applied = f"_status <> {lit(DUP)}"
    logged = f"_status IN ({lit(NEW)}, {lit(REPLACE)})"
    return (
        "SELECT _target, CAST(NULL AS string) AS code, sum(_n_in) AS n, "
        f"sum(_nfp - 1) AS conflicts, count_if({applied}) AS winners, 0L AS buried, "
        f"count_if({applied} AND _op = 'DELETE') AS deletes, count_if({applied}) AS writes, "
        f"count_if({logged}) AS live, count_if(_status = {lit(REPLACE)}) AS replaced "
        f"FROM {staged} GROUP BY 1"
    )


def log_source_sql(staged: str, plans: Sequence[TablePlan]) -> str:
    """The log rows of the batch: its events logged now (new, or replacing a logged copy)."""
    return (
        f"SELECT element_at({_names(plans)}, _target) AS target, _id AS id, _fp AS fp, "
        "_seq AS seq, _op AS op, _bh AS bh, _ah AS ah, _after AS image, _ts AS ts "
        f"FROM {staged} WHERE _status IN ({lit(NEW)}, {lit(REPLACE)})"
    )


def log_write_sql(
    ident: str,
    source: str,
    plans: Sequence[TablePlan],
    pipeline: str,
    batch_id: int,
    replaces: bool,
) -> str:
    """Record the batch's events in the log: appended, or (``replaces``: some replace a
    logged copy) merged, a replaced row keeping the hashes it had."""
    book = f"{lit(pipeline)}, {int(batch_id)}, current_timestamp()"
    if not replaces:
        return (
            f"INSERT INTO {ident} ({_LOG_COLUMNS}) SELECT target, id, fp, seq, op, bh, ah, "
            f"image, ts, CAST(NULL AS string), CAST(NULL AS string), {book} FROM {source}"
        )
    sets = ", ".join(f"{c} = s.{c}" for c in ("fp", "seq", "op", "bh", "ah", "image", "ts"))
    return f"""
        MERGE INTO {ident} t USING {source} s
        ON t.target IN ({_names_in(plans)}) AND t.target = s.target AND t.id = s.id
        WHEN MATCHED THEN UPDATE SET {sets}, prev_bh = t.bh, prev_ah = t.ah,
          pipeline = {lit(pipeline)}, batch_id = {int(batch_id)}, logged_at = current_timestamp()
        WHEN NOT MATCHED THEN INSERT ({_LOG_COLUMNS})
          VALUES (s.target, s.id, s.fp, s.seq, s.op, s.bh, s.ah, s.image, s.ts,
                  CAST(NULL AS string), CAST(NULL AS string), {book})
    """


def touched_sql(staged: str, log: str, plan: TablePlan) -> str:
    """The image hashes whose counts the batch changes in one table: those of its events
    logged now or by this batch before, and those they replaced; after a ``TRUNCATE``, every
    hash the log holds after it."""
    if plan.truncate is not None:
        return (
            f"SELECT DISTINCT h FROM {log} LATERAL VIEW explode(array(bh, ah)) e AS h "
            f"WHERE target = {lit(plan.name)} AND seq > {lit(plan.watermark)} AND h IS NOT NULL"
        )
    hashes = (
        f"_bh, _ah, CASE WHEN _status = {lit(REPLACE)} THEN _lbh END, "
        f"CASE WHEN _status = {lit(REPLACE)} THEN _lah END, "
        f"CASE WHEN _status = {lit(OWN)} THEN _lpbh END, "
        f"CASE WHEN _status = {lit(OWN)} THEN _lpah END"
    )
    return (
        f"SELECT DISTINCT h FROM {staged} LATERAL VIEW explode(array({hashes})) e AS h "
        f"WHERE _target = {lit(plan.target)} AND _status <> {lit(DUP)} AND h IS NOT NULL"
    )


def source_sql(touched: str, log: str, plan: TablePlan) -> str:
    """The rows one replica must hold for the touched hashes: per hash its count from the
    log, and its copies ``1..n`` (typed columns by position) beside one trim row
    (``_trim``, ``_copy`` = the count, never below 0): the copies above it go."""
    name, mark = lit(plan.name), lit(plan.watermark)
    typed = [
        f"{spark_from_wire(f'c.img[{lit(c)}]', t)} AS {col_alias(i)}"
        for i, (c, t) in enumerate(plan.schema.types.items())
    ]
    count = "greatest(coalesce(c.n, 0L), 0L)"
    # after a TRUNCATE every hash is touched: nothing to narrow the log's rows down to
    narrowed = "" if plan.truncate is not None else f"LEFT SEMI JOIN {touched} t ON x.h = t.h"
    return f"""
        SELECT k.h AS _h, CASE WHEN e.i = 0 THEN {count} ELSE e.i END AS _copy,
               e.i = 0 AS _trim{"".join(", " + t for t in typed)}
        FROM {touched} k LEFT JOIN (
          SELECT x.h, sum(x.d) AS n,
                 max_by(x.a, CASE WHEN x.a IS NOT NULL THEN x.s END) AS img
          FROM (SELECT ah AS h, 1L AS d, image AS a, seq AS s FROM {log}
                WHERE target = {name} AND ah IS NOT NULL AND seq > {mark}
                UNION ALL
                SELECT bh, -1L, {_NO_MAP}, seq FROM {log}
                WHERE target = {name} AND bh IS NOT NULL AND seq > {mark}) x
          {narrowed}
          GROUP BY x.h) c ON k.h = c.h
        LATERAL VIEW explode(sequence(0L, {count})) e AS i
    """


def col_alias(i: int) -> str:
    """Name of the i-th column inside a keyless table's source (by position: a source column
    may be named like a working column)."""
    return f"`_c{i}`"


def write_sql(ident: str, plan: TablePlan, source: str) -> str:
    """Make one replica hold its touched images as many times as their counts say: a copy
    missing is inserted, a copy past the count deleted (after a ``TRUNCATE``, every row whose
    image no longer counts too). Into a replica the batch created (no row yet), the copies
    are appended (a replay of that batch finds the table existing and merges)."""
    cols = list(plan.schema.types)
    names = ", ".join([*(q(c) for c in cols), "_cdc"])
    cdc = "named_struct('image', s._h, 'copy', s._copy, 'applied_at', current_timestamp())"
    values = ", ".join([*(f"s.{col_alias(i)}" for i in range(len(cols))), cdc])
    if not plan.exists:
        return f"INSERT INTO {ident} ({names}) SELECT {values} FROM {source} s WHERE NOT s._trim"
    gone = "WHEN NOT MATCHED BY SOURCE THEN DELETE" if plan.truncate is not None else ""
    return f"""
        MERGE INTO {ident} t USING {source} s
        ON t._cdc.image = s._h
           AND CASE WHEN s._trim THEN t._cdc.copy > s._copy ELSE t._cdc.copy = s._copy END
        WHEN MATCHED AND s._trim THEN DELETE
        WHEN NOT MATCHED AND NOT s._trim THEN INSERT ({names}) VALUES ({values})
        {gone}
    """


def create_columns(plan: TablePlan, cdc_struct: str) -> str:
    """Column list of a new keyless replica: the columns in the producer's order, then
    ``_cdc`` (the image's hash and the copy's number)."""
    cols = [f"{q(c)} {spark_type(t)}" for c, t in plan.schema.types.items()]
    return ", ".join([*cols, f"_cdc {cdc_struct}"])
