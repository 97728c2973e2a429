"""Operating a pipeline over time: replica identity, sources added and renamed, checkpoints
and landing zones that are not what the configuration says."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.cli.main import main
from cdcflow.config import PipelineConfig, load_config
from cdcflow.dialects import renderer, renderer_features
from cdcflow.errors import ConfigError
from cdcflow.pipeline.query import Pipeline
from cdcflow.simulation.workload import Workload, generate
from cdcflow.sources.base import SourceMissing
from cdcflow.sources.landing import read_raw
from cdcflow.testing.compare import compare_replicas
from tests.scenario import ev, land

pytestmark = pytest.mark.spark


def _source(name: str, path: Path, dialect: str, options: Any = None, **extra: Any) -> dict:
    doc: dict[str, Any] = {"name": name, "path": str(path), "dialect": dialect, **extra}
    if options is not None:
        doc["keys"] = {t: list(k) for t, k in options.table_keys.items()}
        doc["types"] = {t: dict(c) for t, c in options.column_types.items()}
        doc["options"] = dict(options.extra)
    return doc


def _config(root: Path, name: str, sources: list[dict], **extra: Any) -> PipelineConfig:
    return load_config(
        {
            "pipeline": name,
            "checkpoint": str(root / "checkpoint"),
            "namespace": name,
            "catalog": {"name": "cdc", "warehouse": str(root / "warehouse")},
            "sources": sources,
            **extra,
        }
    )


def _render(dialect: str, root: Path, seed: int) -> tuple[Workload, Any]:
    w = generate(seed, tables=2, transactions=25, features=renderer_features(dialect))
    res = renderer(dialect)(w, root / dialect, seed=seed, faults=False)
    return w, res.options


def test_two_sources_with_the_same_table_names_write_two_exact_replicas(
    spark: Any, tmp_path: Path
) -> None:
    w_crdb, o_crdb = _render("cockroachdb", tmp_path, 3)
    w_ds, o_ds = _render("datastream", tmp_path, 4)
    assert set(w_crdb.tables) == set(w_ds.tables)  # the same names: accounts, events...
    cfg = _config(
        tmp_path,
        "two_src",
        [
            _source("crdb", tmp_path / "cockroachdb", "cockroachdb", o_crdb),
            _source("mysql", tmp_path / "datastream", "datastream", o_ds),
        ],
    )
    result = Pipeline(cfg, spark).run()
    assert result.dead_lettered == 0
    compare_replicas(spark, w_crdb, "two_src", prefix="crdb__").assert_equal()
    compare_replicas(spark, w_ds, "two_src", prefix="mysql__").assert_equal()
    names = {r["tableName"] for r in spark.sql("SHOW TABLES IN cdc.two_src").collect()}
    assert not names & set(w_crdb.tables)  # no replica under a bare, shared name


def _cdcflow_views(spark: Any) -> set[str]:
    return {
        t.name
        for t in spark.catalog.listTables()
        if t.isTemporary and t.name.startswith("cdcflow_")
    }


def test_batches_leave_no_temporary_view_behind(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch names a few dozen temporary views (one per staged step and table, some in the
    pool writing tables in parallel) in its streaming query's session, which lives as long
    as the query — months for ``--follow``; each view holds its plan, so every batch must
    drop its own."""
    from cdcflow.pipeline.batch import BatchRunner

    sessions: list[Any] = []
    batch = BatchRunner._batch

    def watched(self: BatchRunner, df: Any, batch_id: int) -> None:
        sessions.append(df.sparkSession)
        batch(self, df, batch_id)
        # inside the batch's own scope, its views are there
        assert _cdcflow_views(df.sparkSession)

    monkeypatch.setattr(BatchRunner, "_batch", watched)
    w = generate(41, tables=3, transactions=40)
    res = renderer("savegress")(w, tmp_path / "landing", seed=41, faults=True)
    cfg = _config(
        tmp_path,
        "views",
        [_source("s", tmp_path / "landing", "savegress", res.options, max_files_per_batch=2)],
        parallel_tables=3,
        tables={"default": {"mode": "scd2"}},
    )
    result = Pipeline(cfg, spark).run()
    assert result.failure is None and len(result.reports) >= 2
    assert sessions and not any(_cdcflow_views(s) for s in sessions)
    compare_replicas(spark, w, "views", histories=w.tables).assert_equal()


def test_the_pipelines_own_stream_is_checked_once_and_others_batches_each_time(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The canonical types of a stream the pipeline decodes itself are checked by its decoder:
    its batches are not checked again (a regular expression per type of every event, in
    Spark's interpreter). Frames given to one's own ``foreachBatch`` still are."""
    import cdcflow.decode.spark as decode_spark

    checked: list[int] = []
    check = decode_spark._types_checked

    def counted(frame: Any) -> Any:
        checked.append(1)
        return check(frame)

    monkeypatch.setattr(decode_spark, "_types_checked", counted)
    w = generate(43, tables=2, transactions=20)
    res = renderer("savegress")(w, tmp_path / "landing", seed=43)
    cfg = _config(
        tmp_path,
        "checked",
        [_source("s", tmp_path / "landing", "savegress", res.options, max_files_per_batch=2)],
    )
    pipe = Pipeline(cfg, spark)
    result = pipe.run()
    assert result.failure is None and len(result.reports) >= 2
    assert checked == []
    raw = read_raw(spark, str(tmp_path / "landing"), streaming=False)
    frame = decode_spark.decode_dataframe(raw, "savegress", res.options)
    own = Pipeline(cfg, spark)
    own.open()
    try:
        assert own.foreach_batch()._frame(frame) is not frame
    finally:
        own.close()
    assert checked == [1]


def test_two_databases_under_one_replica_name_are_refused_naming_both(
    spark: Any, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    land(
        landing,
        [
            ev("INSERT", "users", 10, after={"id": 1, "v": "shop"}, metadata={"database": "shop"}),
            ev("INSERT", "users", 11, after={"id": 2, "v": "shop"}, metadata={"database": "shop"}),
            ev("INSERT", "users", 12, after={"id": 1, "v": "crm"}, metadata={"database": "crm"}),
        ],
    )
    cfg = _config(
        tmp_path,
        "ident",
        [_source("pg", landing, "savegress", keys={"users": ["id"]})],
    )
    result = Pipeline(cfg, spark).run()
    assert result.dead_lettered == 1 and result.exit_status == 3
    rows = spark.sql("SELECT id, v FROM cdc.ident.users ORDER BY id").collect()
    assert [(r["id"], r["v"]) for r in rows] == [(1, "shop"), (2, "shop")]
    dead = spark.sql("SELECT error_code, error_message FROM cdc.ident__cdcflow.dead_letters")
    (letter,) = dead.collect()
    assert letter["error_code"] == "REPLICA_NAME_CONFLICT"
    assert "pg:crm.users" in letter["error_message"]
    assert "pg:shop.users" in letter["error_message"]


def test_a_source_added_later_is_read_from_its_start_and_the_others_are_not_reread(
    spark: Any, tmp_path: Path
) -> None:
    w_a, o_a = _render("savegress", tmp_path / "a", 5)
    w_b, o_b = _render("savegress", tmp_path / "b", 6)
    w_c, o_c = _render("savegress", tmp_path / "c", 7)
    srcs = [
        _source("a", tmp_path / "a" / "savegress", "savegress", o_a),
        _source("b", tmp_path / "b" / "savegress", "savegress", o_b),
    ]
    first = Pipeline(_config(tmp_path, "grow", srcs), spark).run()
    assert first.events > 0
    srcs.append(_source("c", tmp_path / "c" / "savegress", "savegress", o_c))
    second = Pipeline(_config(tmp_path, "grow", srcs), spark).run()
    # only c's events were read: a and b went on where they were
    c_events = Pipeline(_config(tmp_path / "alone", "alone", [srcs[2]]), spark).run().events
    assert second.events == c_events
    for prefix, w in (("a__", w_a), ("b__", w_b), ("c__", w_c)):
        compare_replicas(spark, w, "grow", prefix=prefix).assert_equal()
    # renamed, a source keeps its progress and its replica names
    srcs[2] = {**srcs[2], "name": "c2", "renamed_from": "c"}
    third = Pipeline(_config(tmp_path, "grow", srcs), spark).run()
    assert third.events == 0
    compare_replicas(spark, w_c, "grow", prefix="c__").assert_equal()


def test_a_missing_landing_zone_is_an_error_unless_it_may_be_created(
    spark: Any, tmp_path: Path
) -> None:
    typo = tmp_path / "landnig"
    cfg = _config(tmp_path, "typo", [_source("s", typo, "savegress")])
    with pytest.raises(SourceMissing) as e:
        Pipeline(cfg, spark).run()
    assert e.value.code == "SOURCE_PATH_MISSING" and str(typo) in e.value.message
    assert not typo.exists()
    made = _config(tmp_path, "typo", [_source("s", typo, "savegress", create_path=True)])
    assert Pipeline(made, spark).run().events == 0 and typo.is_dir()


def test_a_checkpoint_of_another_pipeline_is_refused_naming_both(
    spark: Any, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    land(landing, [ev("INSERT", "t", 1, after={"id": 1})])
    src = [_source("s", landing, "savegress", keys={"t": ["id"]})]
    Pipeline(_config(tmp_path, "first", src), spark).run()
    with pytest.raises(ConfigError) as e:
        Pipeline(_config(tmp_path, "second", src), spark).run()
    assert "'first'" in e.value.message and "'second'" in e.value.message


def test_replica_names_cannot_change_under_a_running_source(spark: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    land(landing, [ev("INSERT", "t", 1, after={"id": 1})])
    src = _source("s", landing, "savegress", keys={"t": ["id"]})
    Pipeline(_config(tmp_path, "names", [src]), spark).run()
    renamed = {**src, "replica_name": "{source}_{table}"}
    with pytest.raises(ConfigError) as e:
        Pipeline(_config(tmp_path, "names", [renamed]), spark).run()
    assert "'{table}'" in e.value.message and e.value.hint and "sources/s" in e.value.hint


def test_a_source_forgotten_and_added_back_rereads_its_landing_zone_in_full(
    spark: Any, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    land(landing, [ev("INSERT", "users", 10, after={"id": 1, "v": "a"})])
    cfg = _config(tmp_path, "forget", [_source("pg", landing, "savegress", keys={"users": ["id"]})])
    assert Pipeline(cfg, spark).run().events == 1
    land(landing, [ev("INSERT", "users", 11, after={"id": 2, "v": "b"})])
    shutil.rmtree(
        Path(cfg.checkpoint) / "sources" / "pg"
    )  # forgotten, then added back: its new query's batch 0 holds both files
    assert Pipeline(cfg, spark).run().events == 2  # not taken for the earlier run's batch 0
    rows = spark.sql("SELECT id, v FROM cdc.forget.users ORDER BY id").collect()
    assert [(r["id"], r["v"]) for r in rows] == [(1, "a"), (2, "b")]


_LINE = re.compile(
    r"^(?P<source>\w+ )?batch \d+: (?P<events>[\d,]+) events \([^)]*\) · "
    r"(?P<applied>[\d,]+) applied · (?P<duplicates>[\d,]+) duplicates · "
    r"(?P<stale>[\d,]+) stale · (?P<conflicts>[\d,]+) conflicts · "
    r"(?P<dead>[\d,]+) dead-lettered · tables .* · (?P<rate>[\d,.]+) events/s in "
)


def _figures(line: str) -> dict[str, Any]:
    found = _LINE.match(line)
    assert found is not None, line
    out: dict[str, Any] = {
        k: int(v.replace(",", ""))
        for k, v in found.groupdict().items()
        if k not in ("source", "rate") and v
    }
    out["source"] = (found["source"] or "").strip()
    out["rate"] = found["rate"]
    return out


def test_progress_lines_name_their_source_and_their_counts_add_up(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    users, other = tmp_path / "users", tmp_path / "other"
    first = land(
        users,
        [
            ev("INSERT", "users", 10, after={"id": 1, "v": "a"}),
            ev("DELETE", "users", 20, before={"id": 1, "v": "a"}),
            ev("INSERT", "users", 11, after={"id": 2, "v": "b"}),
            ev("INSERT", "users", 11, after={"id": 2, "v": "b"}),  # a duplicate
        ],
    )
    land(other, [ev("INSERT", "items", 5, after={"id": 7})])
    (other / "bad.jsonl").write_bytes(b"{not json\n")
    sources = [
        _source("pg", users, "savegress", keys={"users": ["id"]}),
        _source("shop", other, "savegress", keys={"items": ["id"]}),
    ]
    doc = {
        "pipeline": "counts",
        "checkpoint": str(tmp_path / "checkpoint"),
        "namespace": "counts",
        "catalog": {"name": "cdc", "warehouse": spark.conf.get("spark.sql.catalog.cdc.warehouse")},
        "sources": sources,
    }
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(doc))

    def run() -> list[dict[str, Any]]:
        assert main(["run", str(config)]) in (0, 3)
        lines = [ln for ln in capsys.readouterr().out.splitlines() if " batch " in ln]
        return [_figures(ln) for ln in lines]

    one = {f["source"]: f for f in run()}
    assert sorted(one) == ["pg", "shop"]
    assert {k: one["pg"][k] for k in ("events", "applied", "duplicates", "stale")} == {
        "events": 4,
        "applied": 3,
        "duplicates": 1,
        "stale": 0,
    }
    assert {k: one["shop"][k] for k in ("events", "applied", "dead")} == {
        "events": 2,
        "applied": 1,
        "dead": 1,
    }
    # a late update beside a newer insert of the deleted key: stale (its tombstone is newer)
    land(
        users,
        [
            ev("UPDATE", "users", 15, after={"id": 1, "v": "late"}),
            ev("INSERT", "users", 30, after={"id": 1, "v": "again"}),
        ],
    )
    (two,) = run()
    assert (two["events"], two["applied"], two["stale"]) == (2, 1, 1)
    # the first file delivered again: an old insert with its delete, both already applied
    land(users, first.read_bytes())
    (three,) = run()
    assert (three["events"], three["applied"], three["stale"], three["duplicates"]) == (4, 0, 3, 1)
    for figures in [*one.values(), two, three]:
        parts = ("applied", "duplicates", "stale", "conflicts", "dead")
        assert figures["events"] == sum(figures[k] for k in parts), figures
        if figures["events"]:
            assert figures["rate"] not in ("0", "0.0"), figures
    history = spark.sql(
        "SELECT events, applied, duplicates, stale, conflicts, dead_lettered "
        "FROM cdc.counts__cdcflow.batches"
    ).collect()
    assert len(history) == 4
    assert all(r[0] == sum(r[1:]) for r in history), history
    rows = spark.sql("SELECT id, v FROM cdc.counts.pg__users ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(1, "again"), (2, "b")]
