"""One micro-batch: validate → dead-letter → dedup → order → collapse → sinks.

The batch function runs inside ``foreachBatch``. It only ever collects *metadata* to the
driver (tables, operations and column types seen, counts), never event data.
"""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcflow.config import PipelineConfig
from cdcflow.decode.columns import SEGMENT
from cdcflow.engine.commit import commit_properties, committed_steps, ledger_props
from cdcflow.engine.hold import HoldResult, HoldStage
from cdcflow.engine.segments import SegmentResult, SegmentStage
from cdcflow.engine.sql import lit, q
from cdcflow.engine.tables import (
    ensure_namespace,
    evolve,
    plan_schema,
    read_columns,
    read_properties,
    set_property,
)
from cdcflow.engine.watermarks import record_watermarks
from cdcflow.sinks.append import apply_append, ensure_changelog
from cdcflow.sinks.deadletter import event_rows, rejected_rows, write_dead_letters
from cdcflow.sinks.merge import (
    MergeTarget,
    apply_merge,
    ensure_merge_table,
    key_columns_from_table,
)

HISTORY_COLUMNS = (
    "pipeline string, batch_id bigint, started_at timestamp, finished_at timestamp, "
    "events bigint, operations map<string,bigint>, duplicates bigint, conflicts bigint, "
    "stale bigint, dead_lettered bigint, tables map<string,bigint>, seconds double"
)

_ROW_OPS = "('INSERT','UPDATE','DELETE','UPSERT','SNAPSHOT')"
#: ``metadata`` entry in which a dialect states the shape of the fields its ``sequence`` came
#: from (e.g. ``n,s,n``), when that shape may differ between events of one table.
SHAPE_KEY = "sequence_shape"
#: Table property holding a table's sequence shape.
SHAPE_PROPERTY = "cdcflow.sequence-shape"
_ROW_OP_SET = frozenset({"INSERT", "UPDATE", "DELETE", "UPSERT", "SNAPSHOT"})


@dataclass(frozen=True)
class TableOutcome:
    """What happened to one target table in a batch."""

    table: str
    mode: str
    events: int
    duplicates: int = 0
    conflicts: int = 0
    stale: int = 0
    dead_lettered: int = 0
    skipped: bool = False


@dataclass(frozen=True)
class BatchReport:
    """Progress figures of one micro-batch."""

    batch_id: int
    events: int
    operations: dict[str, int]
    duplicates: int
    conflicts: int
    stale: int
    dead_lettered: int
    tables: dict[str, int]
    seconds: float
    outcomes: tuple[TableOutcome, ...] = field(default_factory=tuple)
    #: segments of split messages received, and messages reassembled from segments
    segments: int = 0
    reassembled: int = 0
    #: consistency mode: events held back at the end of the batch, and released from earlier
    held: int = 0
    released: int = 0

    @property
    def rate(self) -> float:
        """Events per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


def target_name(table: str) -> str:
    """Default replica name of a source table: lower case, non-identifier characters → ``_``."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in table.lower())
    return out or "_"


class BatchProcessor:
    """The ``foreachBatch`` function of a pipeline."""

    def __init__(
        self, spark: Any, cfg: PipelineConfig, pipeline_id: str, on_report: Any = None
    ) -> None:
        self.spark = spark
        self.cfg = cfg
        self.pipeline_id = pipeline_id
        self.on_report = on_report
        self.catalog = cfg.catalog.name
        self.namespace = f"{q(self.catalog)}.{q(cfg.namespace)}"
        self.internal = f"{q(self.catalog)}.{q(cfg.namespace + '__cdcflow')}"
        self.first_batch = True
        self.reports: list[BatchReport] = []
        from cdcflow.config import parse_duration
        from cdcflow.engine.pipeline import source_options

        self.hold_stage = (
            HoldStage(f"{self.internal}.held", pipeline_id, cfg.consistency, self.watermark_table)
            if cfg.consistency != "none"
            else None
        )
        self.segment_stage = SegmentStage(
            f"{self.internal}.segments",
            pipeline_id,
            parse_duration(cfg.segment_wait),
            {src.name: source_options(src) for src in cfg.sources},
        )

    def ident(self, table: str) -> str:
        """Replica identifier for a target name."""
        return f"{self.namespace}.{q(table)}"

    @property
    def dead_letter_table(self) -> str:
        """Identifier of the dead-letter table."""
        return f"{self.internal}.dead_letters"

    @property
    def watermark_table(self) -> str:
        """Identifier of the resolved-watermarks table."""
        return f"{self.internal}.watermarks"

    @property
    def history_table(self) -> str:
        """Identifier of the batch-history table."""
        return f"{self.internal}.batches"

    def tombstone_table(self, table: str) -> str:
        """Identifier of a replica's tombstone table."""
        return f"{self.internal}.{q('tombstones__' + table)}"

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.time()
        # the batch frame belongs to the query's own session: temp views must live there
        self.spark = spark = df.sparkSession
        check = self.first_batch
        ensure_namespace(spark, self.catalog, self.cfg.namespace)
        ensure_namespace(spark, self.catalog, self.cfg.namespace + "__cdcflow")
        if check and "history" in committed_steps(
            spark, self.history_table, self.pipeline_id, batch_id
        ):
            self.first_batch = False
            return
        decoded = _with_batch_columns(df).persist()
        try:
            report = self._process(decoded, batch_id, check, started)
        finally:
            decoded.unpersist()
        self.first_batch = False
        self.reports.append(report)
        if self.on_report:
            self.on_report(report)

    # ------------------------------------------------------------------ steps

    def _process(self, decoded: Any, batch_id: int, check: bool, started: float) -> BatchReport:
        spark = self.spark
        valid = decoded.where("error_code IS NULL")
        meta = _Meta()
        # one pass over the cached batch: operations, column types and key-name sets per table
        meta.add(_meta_rows(spark, valid))
        events = valid.where(f"NOT (operation <=> '{SEGMENT}')")
        dead = [rejected_rows(decoded.where("error_code IS NOT NULL"), self.pipeline_id, batch_id)]
        seg: SegmentResult | None = None
        if meta.segments or self.segment_stage.has_pending(spark):
            seg = self.segment_stage.run(
                spark, valid.where(f"operation = '{SEGMENT}'"), batch_id, check
            )
            assembled = _with_batch_columns(seg.assembled)
            whole = assembled.where("error_code IS NULL")
            if seg.complete:
                meta.add(_meta_rows(spark, whole))
            events = events.unionByName(whole)
            dead.append(
                rejected_rows(assembled.where("error_code IS NOT NULL"), self.pipeline_id, batch_id)
            )
            dead.append(seg.dead)
        hold: HoldResult | None = None
        if self.hold_stage is not None:
            if meta.ops.get("RESOLVED"):
                record_watermarks(
                    spark, self.watermark_table, events.where("operation = 'RESOLVED'"), batch_id
                )
            hold = self.hold_stage.run(spark, events, batch_id)
            events = hold.events
            segments = meta.segments
            meta = _Meta()
            meta.add(_meta_rows(spark, events))
            meta.segments = segments
        try:
            return self._apply(events, meta, dead, seg, batch_id, check, started, hold)
        finally:
            if seg is not None:
                seg.release()

    def _apply(
        self,
        events: Any,
        meta: _Meta,
        dead: list[Any],
        seg: SegmentResult | None,
        batch_id: int,
        check: bool,
        started: float,
        hold: HoldResult | None = None,
    ) -> BatchReport:
        spark = self.spark
        per_table_ops, partial_tables, operations = meta.per_table_ops, meta.partial, meta.ops
        seen, key_names, shapes = meta.seen, meta.key_names, meta.shapes
        jobs = []
        outcomes: list[TableOutcome] = []
        for target, ops in sorted(per_table_ops.items()):
            if not (set(ops) - {"BEGIN", "COMMIT", "RESOLVED"}):
                continue
            jobs.append((target, ops))

        def run(job: tuple[str, dict[str, int]]) -> tuple[TableOutcome, list[Any]]:
            target, ops = job
            return self._table(
                events,
                target,
                ops,
                seen.get(target, {}),
                key_names.get(target, set()),
                target in partial_tables,
                batch_id,
                check,
                shapes.get(target, set()),
            )

        with ThreadPoolExecutor(max_workers=max(1, self.cfg.parallel_tables)) as pool:
            for outcome, rejects in pool.map(run, jobs):
                outcomes.append(outcome)
                dead.extend(rejects)

        if operations.get("RESOLVED") and hold is None:
            record_watermarks(
                spark, self.watermark_table, events.where("operation = 'RESOLVED'"), batch_id
            )
        if self.cfg.outputs:
            from cdcflow.sinks.outputs import emit

            dead.extend(emit(events, list(self.cfg.outputs), self.pipeline_id, batch_id))
        dlq = dead[0]
        for d in dead[1:]:
            dlq = dlq.unionByName(d)
        dead_n = write_dead_letters(
            spark, self.dead_letter_table, dlq, self.pipeline_id, batch_id, check
        )
        total = sum(operations.values())
        report = BatchReport(
            batch_id=batch_id,
            events=total,
            operations=dict(operations),
            duplicates=sum(o.duplicates for o in outcomes),
            conflicts=sum(o.conflicts for o in outcomes),
            stale=sum(o.stale for o in outcomes),
            dead_lettered=dead_n,
            tables={o.table: o.events for o in outcomes},
            seconds=time.time() - started,
            outcomes=tuple(outcomes),
            segments=meta.segments,
            reassembled=seg.complete if seg is not None else 0,
            held=hold.held if hold is not None else 0,
            released=hold.released if hold is not None else 0,
        )
        self._history(report, started)
        return report

    def _table(
        self,
        events: Any,
        target: str,
        ops: dict[str, int],
        seen: dict[str, set[str]],
        key_sets: set[tuple[str, ...]],
        has_partial: bool,
        batch_id: int,
        check: bool,
        shapes: set[str] | None = None,
    ) -> tuple[TableOutcome, list[Any]]:
        spark = self.spark
        tcfg = self.cfg.table(target)
        name = tcfg.name or target
        ident = self.ident(name)
        mine = events.where(f"_target = {lit(target)}")
        rejects: list[Any] = []
        existing = read_columns(spark, ident, image="after" if tcfg.mode == "append" else None)
        record_shape: str | None = None
        if shapes:
            mine, record_shape, rejected = self._check_shapes(
                mine, ident, existing is not None, shapes, name, batch_id
            )
            rejects.extend(rejected)
        plan = plan_schema(existing, seen)
        if plan.conflicts:
            cond = " OR ".join(
                f"types[{lit(c)}] IN ({', '.join(lit(t) for t in sorted(bad))})"
                for c, bad in plan.conflicts.items()
            )
            reason = "; ".join(plan.reasons.values())
            rejects.append(
                event_rows(
                    mine.where(cond), self.pipeline_id, batch_id, "TYPE_CONFLICT", lit(reason)
                )
            )
            mine = mine.where(f"NOT ({cond})")
        n_events = sum(ops.values())

        if tcfg.mode == "append":
            ensure_changelog(spark, ident, plan)
            if record_shape:
                set_property(spark, ident, SHAPE_PROPERTY, record_shape)
            apply_append(spark, mine, ident, plan.types, self.pipeline_id, batch_id, check)
            return TableOutcome(name, "append", n_events), rejects

        keys = self._keys(spark, ident, tcfg.keys, key_sets, name)
        row_events = sum(n for op, n in ops.items() if op in _ROW_OP_SET)
        if keys is None and not row_events:
            # schema-only events (DDL) for a table not created yet: rows will carry the columns
            if existing is not None:
                evolve(spark, ident, plan)
            return TableOutcome(name, "merge", n_events), rejects
        if keys is None:
            rejects.append(
                event_rows(
                    mine.where(f"operation IN {_ROW_OPS}"),
                    self.pipeline_id,
                    batch_id,
                    "KEY_UNKNOWN",
                    lit(
                        f"no key columns known for table {name!r}: the producer sends none; set "
                        f"tables.{name}.keys or the source's keys in the configuration"
                    ),
                )
            )
            return TableOutcome(name, "merge", n_events), rejects
        for k in keys:
            plan.types.setdefault(k, "string")
        missing_key = " OR ".join(
            f"coalesce(key[{lit(k)}], CASE WHEN operation = 'DELETE' THEN before[{lit(k)}] "
            f"ELSE after[{lit(k)}] END) IS NULL"
            for k in keys
        )
        bad_keys = f"operation IN {_ROW_OPS} AND ({missing_key})"
        rejects.append(
            event_rows(
                mine.where(bad_keys),
                self.pipeline_id,
                batch_id,
                "KEY_MISSING",
                lit(f"row event lacks a value for key column(s) {list(keys)} of table {name!r}"),
            )
        )
        mine = mine.where(f"NOT ({bad_keys})")
        if existing is None:
            ensure_merge_table(spark, ident, keys, plan.types)
        else:
            evolve(spark, ident, plan)
        if record_shape:
            set_property(spark, ident, SHAPE_PROPERTY, record_shape)
        result = apply_merge(
            spark,
            mine,
            MergeTarget(
                ident=ident,
                tombstones=self.tombstone_table(name),
                keys=keys,
                types=plan.types,
                soft_deletes=tcfg.deletes == "soft",
                pipeline=self.pipeline_id,
                batch_id=batch_id,
                check_ledger=check,
            ),
            has_partial,
            ops,
        )
        return TableOutcome(
            name,
            "merge",
            n_events,
            result.duplicates,
            result.conflicts,
            result.stale,
            skipped=result.skipped,
        ), rejects

    def _check_shapes(
        self, mine: Any, ident: str, exists: bool, shapes: set[str], name: str, batch_id: int
    ) -> tuple[Any, str | None, list[Any]]:
        """Events whose ``metadata.sequence_shape`` (the kinds of the producer's sort fields,
        ``*`` for a null) does not fit the table's are dead-lettered: their sequences would not
        compare with the others'. The table's shape is recorded on first sight (the most common
        one of that batch) and refined where it had nulls."""
        recorded = read_properties(self.spark, ident).get(SHAPE_PROPERTY) if exists else None
        reference = recorded
        if reference is None:
            if len(shapes) == 1:
                reference = next(iter(shapes))
            else:
                rows = self.spark.sql(
                    f"SELECT metadata[{lit(SHAPE_KEY)}] AS shape, count(*) AS n "
                    f"FROM {_view(mine, 'shape')} WHERE metadata[{lit(SHAPE_KEY)}] IS NOT NULL "
                    "GROUP BY 1"
                ).collect()
                reference = max(rows, key=lambda r: (r["n"], r["shape"]))["shape"]
        bad = sorted(s for s in shapes if not shapes_fit(s, reference))
        merged = reference
        for s in shapes:
            if s not in bad:
                merged = merge_shapes(merged, s)
        rejected: list[Any] = []
        if bad:
            cond = f"metadata[{lit(SHAPE_KEY)}] IN ({', '.join(lit(b) for b in bad)})"
            rejected.append(
                event_rows(
                    mine.where(cond),
                    self.pipeline_id,
                    batch_id,
                    "SEQUENCE_SHAPE_MISMATCH",
                    f"concat('sort fields shaped ', metadata[{lit(SHAPE_KEY)}], ', but table "
                    f"{_sql_text(name)} orders by ', {lit(merged)}, ': the sequences cannot be "
                    "compared')",
                )
            )
            mine = mine.where(f"NOT ({cond}) OR metadata[{lit(SHAPE_KEY)}] IS NULL")
        return mine, (merged if merged != recorded else None), rejected

    def _keys(
        self,
        spark: Any,
        ident: str,
        configured: list[str] | None,
        key_sets: set[tuple[str, ...]],
        name: str,
    ) -> tuple[str, ...] | None:
        if configured:
            return tuple(configured)
        recorded = key_columns_from_table(spark, ident)
        if recorded:
            return recorded
        if len(key_sets) == 1:
            return next(iter(key_sets))
        if len(key_sets) > 1:
            # producers disagree: the widest set names the whole key
            return max(key_sets, key=len)
        for src in self.cfg.sources:
            if name in src.keys:
                return tuple(src.keys[name])
        return None

    def _history(self, report: BatchReport, started: float) -> None:
        spark = self.spark
        ident = self.history_table
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {ident} ({HISTORY_COLUMNS}) USING iceberg "
            "TBLPROPERTIES ('format-version'='2')"
        )
        ops = ", ".join(f"{lit(k)}, CAST({v} AS bigint)" for k, v in report.operations.items())
        tables = ", ".join(f"{lit(k)}, CAST({v} AS bigint)" for k, v in report.tables.items())
        with commit_properties(spark, ledger_props(self.pipeline_id, report.batch_id, "history")):
            spark.sql(
                f"""
                INSERT INTO {ident} SELECT {lit(self.pipeline_id)}, {report.batch_id},
                  timestamp_millis({int(started * 1000)}), current_timestamp(), {report.events},
                  {f"map({ops})" if ops else "CAST(map() AS map<string,bigint>)"},
                  {report.duplicates}, {report.conflicts}, {report.stale},
                  {report.dead_lettered},
                  {f"map({tables})" if tables else "CAST(map() AS map<string,bigint>)"},
                  {report.seconds:.3f}D
                """
            )


class _Meta:
    """Per-table figures of a batch, from the metadata aggregate(s)."""

    def __init__(self) -> None:
        self.per_table_ops: dict[str, dict[str, int]] = defaultdict(dict)
        self.partial: set[str] = set()
        self.ops: dict[str, int] = defaultdict(int)
        self.seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.key_names: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        self.shapes: dict[str, set[str]] = defaultdict(set)
        self.segments = 0

    def add(self, rows: list[Any]) -> None:
        """Fold in rows of :func:`_meta_rows`."""
        for r in rows:
            n = int(r["n"])
            target, op = r["_target"], r["operation"]
            if op == SEGMENT:
                self.segments += n
                continue
            self.ops[op] += n
            if not target:
                continue
            ops = self.per_table_ops[target]
            ops[op] = ops.get(op, 0) + n
            if r["has_partial"]:
                self.partial.add(target)
            for text in r["type_sets"]:
                for col, typ in orjson.loads(text).items():
                    self.seen[target][col].add(typ)
            for names in r["key_sets"]:
                self.key_names[target].add(tuple(names))
            self.shapes[target].update(r["shapes"] or ())


def _meta_rows(spark: Any, events: Any) -> list[Any]:
    return spark.sql(
        "SELECT _target, operation, count(*) AS n, max(partial) AS has_partial, "
        "collect_set(to_json(types)) AS type_sets, "
        "collect_set(array_sort(map_keys(key))) AS key_sets, "
        f"collect_set(metadata[{lit(SHAPE_KEY)}]) AS shapes "
        f"FROM {_view(events, 'meta')} GROUP BY _target, operation"
    ).collect()


def _with_batch_columns(df: Any) -> Any:
    """Decoded rows plus the batch's working columns: ``_fp`` (event fingerprint, for exact
    duplicates) and ``_target`` (replica name)."""
    return df.selectExpr(
        "*",
        "xxhash64(coalesce(`table`, ''), coalesce(operation, ''), coalesce(sequence, ''), "
        "to_json(key), to_json(before), to_json(after), partial) AS _fp",
        "regexp_replace(lower(coalesce(`table`, '')), '[^a-z0-9_]', '_') AS _target",
    )


def shapes_fit(a: str, b: str) -> bool:
    """Whether two sequence shapes (comma-separated kinds, ``*`` for unknown) can compare."""
    xs, ys = a.split(","), b.split(",")
    return len(xs) == len(ys) and all(x == y or "*" in (x, y) for x, y in zip(xs, ys, strict=True))


def merge_shapes(a: str, b: str) -> str:
    """``a`` with its unknown kinds filled from ``b`` (shapes that fit)."""
    return ",".join(y if x == "*" else x for x, y in zip(a.split(","), b.split(","), strict=True))


def _sql_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _view(df: Any, prefix: str) -> str:
    from cdcflow.engine.sql import view_name

    name = view_name(prefix)
    df.createOrReplaceTempView(name)
    return name
