"""The batch's statements as text, without Spark: for a few plan shapes every statement the
engine builds (staging, per-table sources and statements, tombstones, history) compared with
``golden/sql/<shape>.sql`` (written only by ``pytest --update-goldens``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdcflow.engine import multiset
from cdcflow.engine.encoding import newest_truncates_sql, sequence_sql
from cdcflow.engine.history import (
    history_write_sql,
    log_merge_sql,
    touched_sql,
    versions_sql,
)
from cdcflow.engine.meta import TableMeta
from cdcflow.engine.plan import TablePlan, TableSettings, TableState, decide, ordered_truncate
from cdcflow.engine.schema import Seen
from cdcflow.engine.stage import StageSql
from cdcflow.engine.statements import (
    changelog_source_sql,
    changelog_sql,
    insert_sql,
    merge_source_sql,
    merge_sql,
    tombstones_sql,
    truncate_sql,
)
from cdcflow.engine.stats import stats_sql
from cdcflow.iceberg.layouts import KEY_PROPERTY, KEYLESS_PROPERTY, TRUNCATE_PROPERTY
from tests.golden import check_golden_text

TOMBSTONES = "cat.`shop__cdcflow`.`tombstones`"
HISTORY_LOG = "cat.`shop__cdcflow`.`history_log`"
MULTISET_LOG = "cat.`shop__cdcflow`.`multiset_log`"


def meta(ops: dict[str, int], seen: dict[str, str], **kw: object) -> TableMeta:
    m = TableMeta(ops=dict(ops), **kw)  # type: ignore[arg-type]
    for c, t in seen.items():
        m.see(c, t, Seen(1))
    return m


def batch_sql(plans: list[TablePlan], tombstones: bool = False) -> str:
    """Every statement of one batch over fixed view names, in the order they run."""
    sql = StageSql(plans)
    out: list[tuple[str, str | None]] = []
    ordered = [p for p in plans if p.sequence_by]
    out.append(("sequence", sequence_sql(plans)))
    if ordered:
        out.append(("newest truncates", newest_truncates_sql("trunc", ordered)))
    out.append(("validated", sql.validated_sql("events")))
    out.append(("rejected", sql.rejected_sql("validated") if sql.has_rules else None))
    staged = winners = None
    if sql.tables.keyed:
        out.append(("rows", sql.rows_sql("validated")))
        rows = "rows"
        if sql.tables.history:
            out.append(("winners", sql.winners_sql(rows, "validated")))
            winners = "winners"
        if sql.tables.merge:
            if sql.tables.history:
                out.append(("merge rows", sql.merge_rows_sql(rows)))
                rows = "merge_rows"
            out.append(("collapsed", sql.collapsed_sql(rows, tombstones)))
            out.append(("staged", sql.staged_sql("collapsed", TOMBSTONES if tombstones else None)))
            staged = "staged"
    mset = None
    if sql.tables.multiset:
        out.append(("multiset winners", sql.multiset_winners_sql("validated")))
        log = MULTISET_LOG if tombstones else None
        out.append(("multiset staged", sql.multiset_staged_sql("mset", log, "pipe", 7)))
        mset = "multiset"
    out.append(("stats", stats_sql(sql.tables, "validated", staged, winners, mset)))
    if mset is not None:
        out.append(("multiset log source", sql.multiset_log_source_sql(mset)))
        for replaces in (False, True):
            text = multiset.log_write_sql(
                MULTISET_LOG, "mlog", sql.tables.multiset, "pipe", 7, replaces
            )
            out.append((f"multiset log{' (replacing)' if replaces else ''}", text))
    if winners is not None:
        out.append(("history log source", sql.history_log_source_sql(winners)))
        names = [p.name for p in sql.tables.history]
        out.append(("history log", log_merge_sql(HISTORY_LOG, "log", names)))
    for p in plans:
        ident = f"cat.`shop`.`{p.name}`"
        if p.mode == "append":
            out.append((f"changelog source {p.target}", changelog_source_sql("validated", p)))
            out.append((f"changelog {p.target}", changelog_sql(ident, "changelog")))
        elif p.mode == "scd2" and p.keys is not None:
            truncated = p.meta.ops.get("TRUNCATE", 0) > 0
            touched = touched_sql("winners", HISTORY_LOG, p, truncated)
            out.append((f"versions {p.target}", versions_sql(HISTORY_LOG, touched, p)))
            history = history_write_sql(ident, p, "versions", touched)
            out.append((f"history {p.target}", history))
        elif p.multiset:
            out.append((f"touched {p.target}", multiset.touched_sql(mset or "", MULTISET_LOG, p)))
            out.append((f"copies {p.target}", multiset.source_sql("touched", MULTISET_LOG, p)))
            out.append((f"multiset {p.target}", multiset.write_sql(ident, p, "copies")))
        elif p.keys is not None:
            if p.truncate is not None:
                out.append((f"truncate {p.target}", truncate_sql(ident, p.truncate)))
            if staged is not None:
                out.append((f"merge source {p.target}", merge_source_sql(staged, p)))
                if p.exists:
                    out.append((f"merge {p.target}", merge_sql(ident, p, "source", p.truncate)))
                else:
                    out.append((f"insert {p.target}", insert_sql(ident, p, "source")))
    if staged is not None and any(not p.soft_deletes for p in sql.tables.merge):
        out.append(("deletes source", sql.deletes_source_sql(staged)))
        out.append(("tombstones", tombstones_sql(TOMBSTONES, "deletes")))
    return "\n\n".join(f"-- {name}\n{(text or '(none)').strip()}" for name, text in out)


COLUMNS = {"id": "bigint", "name": "string", "price": "decimal(10,2)"}
#: An existing replica of ``orders`` (merged into; a replica the batch creates is appended to)
ORDERS = TableState({**COLUMNS, "_cdc": "struct<>"}, {KEY_PROPERTY: "id"})


def test_one_merge_table_with_keys() -> None:
    m = meta({"INSERT": 2, "UPDATE": 1}, COLUMNS)
    plans = [decide(TableSettings("orders", keys=("id",)), m, ORDERS)]
    check_golden_text("sql", "merge_keys", batch_sql(plans))


def test_replicas_the_batch_creates_are_appended_to() -> None:
    hard = meta({"INSERT": 2, "UPDATE": 1, "DELETE": 1}, COLUMNS)
    soft = meta({"INSERT": 1, "DELETE": 1}, {"id": "int", "sku": "string"})
    history = meta({"INSERT": 1, "UPDATE": 1}, COLUMNS)
    plans = [
        decide(TableSettings("orders", keys=("id",)), hard, None),
        decide(TableSettings("items", keys=("id",), deletes="soft"), soft, None),
        decide(TableSettings("customers", mode="scd2", keys=("id",)), history, None),
    ]
    text = batch_sql(plans, tombstones=True)
    assert "MERGE INTO cat.`shop`.`orders`" not in text
    assert "MERGE INTO cat.`shop`.`customers`" not in text
    check_golden_text("sql", "insert_new_tables", text)


def test_merge_with_soft_deletes_and_tombstones() -> None:
    soft = meta({"INSERT": 1, "DELETE": 1}, COLUMNS)
    hard = meta({"UPDATE": 1, "DELETE": 2}, {"id": "int", "sku": "string"})
    state = TableState({"id": "int", "sku": "string", "_cdc": "struct<>"}, {KEY_PROPERTY: "id"})
    plans = [
        decide(TableSettings("orders", keys=("id",), deletes="soft"), soft, None),
        decide(TableSettings("items", name="stock_items"), hard, state),
    ]
    check_golden_text("sql", "merge_soft_tombstones", batch_sql(plans, tombstones=True))


def test_an_scd2_table_beside_a_merge_table() -> None:
    history = meta({"INSERT": 1, "UPDATE": 2, "DELETE": 1}, {**COLUMNS, "note": "string"})
    settings = TableSettings(
        "customers", mode="scd2", keys=("id",), track_history_columns=("name",)
    )
    validity = {"__START_AT": "string", "__END_AT": "string", "__CURRENT": "boolean"}
    existing = TableState(
        {**COLUMNS, "note": "string", **validity, "_cdc": "struct<>"}, {KEY_PROPERTY: "id"}
    )
    plans = [
        decide(settings, history, existing),
        decide(TableSettings("orders", keys=("id",)), meta({"INSERT": 1}, COLUMNS), None),
    ]
    check_golden_text("sql", "scd2", batch_sql(plans, tombstones=True))


def test_a_table_with_partial_images() -> None:
    m = meta({"INSERT": 1, "UPDATE": 3}, COLUMNS, partial=True)
    plans = [decide(TableSettings("orders", keys=("id",)), m, ORDERS)]
    check_golden_text("sql", "partial_images", batch_sql(plans))


def test_a_truncate_watermark() -> None:
    state = TableState(
        {"id": "bigint", "name": "string", "_cdc": "struct<>"},
        {KEY_PROPERTY: "id", TRUNCATE_PROPERTY: "p05"},
    )
    m = meta({"TRUNCATE": 1, "INSERT": 2}, {"id": "bigint", "name": "string"}, truncate="p07")
    plan = decide(TableSettings("orders", keys=("id",)), m, state)
    assert plan.truncate == "p07" and plan.watermark == "p07"
    check_golden_text("sql", "truncate_watermark", batch_sql([plan]))


def test_a_changelog_and_a_table_ordered_by_its_columns() -> None:
    ordered = TableSettings("orders", keys=("id",), sequence_by=("version",))
    m = meta({"INSERT": 1, "TRUNCATE": 1}, {**COLUMNS, "version": "bigint"}, shapes={"n": 1})
    plans = [
        decide(TableSettings("audit", mode="append"), meta({"INSERT": 3}, COLUMNS), None),
        ordered_truncate(decide(ordered, m, None), "p0210!"),
    ]
    check_golden_text("sql", "changelog_sequence_by", batch_sql(plans))
    # decided once: the newest TRUNCATE in the columns' order applies past the watermark only
    ordered_plan = plans[1]
    assert decide(ordered, m, None).truncate is None and ordered_plan.truncate == "p0210!"
    assert ordered_plan.properties[TRUNCATE_PROPERTY] == "p0210!"
    marked = TableState({"id": "bigint", "_cdc": "struct<>"}, {TRUNCATE_PROPERTY: "p0300!"})
    assert ordered_truncate(decide(ordered, m, marked), "p0210!").truncate is None
    history = decide(
        TableSettings("orders", mode="scd2", keys=("id",), sequence_by=("version",)), m, None
    )
    assert ordered_truncate(history, "p0210!") is history


def test_tables_without_a_key() -> None:
    """Two keyless tables (``keys: none``) beside a keyed one: one with partial updates and a
    log to look up, a new one with a ``TRUNCATE``; the keyed table's SQL is unchanged."""
    events = meta({"INSERT": 2, "UPDATE": 1, "DELETE": 1}, COLUMNS, partial=True)
    logs = TableState({**COLUMNS, "_cdc": "struct<>"}, {KEYLESS_PROPERTY: "true"})
    audit = meta({"INSERT": 1, "TRUNCATE": 1}, {"at": "timestamp", "what": "string"}, truncate="p9")
    plans = [
        decide(TableSettings("logs", keys="none"), events, logs),  # type: ignore[arg-type]
        decide(TableSettings("audit", keys="none"), audit, None),  # type: ignore[arg-type]
        decide(TableSettings("orders", keys=("id",)), meta({"INSERT": 1}, COLUMNS), ORDERS),
    ]
    assert [p.multiset for p in plans] == [True, True, False]
    text = batch_sql(plans, tombstones=True)
    assert "MERGE INTO cat.`shop`.`logs`" in text and "INSERT INTO cat.`shop`.`audit`" in text
    check_golden_text("sql", "multiset", text)


def test_the_statements_are_built_without_spark(tmp_path: Path) -> None:
    """The SQL builders and the batch's plan import and run with pyspark unimportable (no
    SparkSession, no JVM)."""
    script = """
import sys
sys.modules["pyspark"] = None  # any import of pyspark now fails
from tests.test_engine_sql import batch_sql, meta
from cdcflow.engine.plan import TableSettings, decide
plan = decide(TableSettings("t", keys=("id",)), meta({"INSERT": 1}, {"id": "bigint"}), None)
text = batch_sql([plan], tombstones=True)
assert "INSERT INTO" in text and "cdcflow_" not in text  # only the views it was given
from cdcflow.engine.stats import TableStats
from cdcflow.engine.steps import batch_plan, table_ddl
assert table_ddl(plan).creates
stats = {"t": TableStats(live=1, deletes=1)}
steps = batch_plan([plan], stats, logged=False, watermarks=False)
assert steps.lines() == ["tombstones", "insert:t"]
assert sys.modules["pyspark"] is None
print("built", len(text))
"""
    root = Path(__file__).resolve().parent.parent
    env_path = f"{root / 'src'}:{root}"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("built")
