"""Maintenance between batches: the policy, what it does to a table (files, snapshots), a
crash around each action, and what needs old snapshots (replays, the ledger) after expiry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import MaintenanceConfig, load_config
from cdcflow.dialects.savegress.render import render_to_landing
from cdcflow.errors import ConfigError
from cdcflow.iceberg.maintain import (
    TableFigures,
    due,
    orphans_sql,
    rewrite_sql,
)
from cdcflow.simulation.landing import append
from cdcflow.simulation.workload import generate
from cdcflow.testing.compare import compare_replicas
from tests.crashing import ROOT, command, line_points
from tests.processes import pipeline_config

SOURCE = {"name": "s", "path": "/landing", "dialect": "savegress"}


def test_the_policy_says_what_is_due() -> None:
    policy = MaintenanceConfig(rewrite_delete_files=10, rewrite_data_files=30, keep_snapshots=5)
    quiet = TableFigures(data_files=4, delete_files=3, snapshots=5)
    assert not due(policy, quiet, orphans_removed_at=1000.0, now=1000.0).anything
    deletes = TableFigures(data_files=4, delete_files=10, snapshots=6, oldest=900.0)
    plan = due(policy, deletes, orphans_removed_at=1000.0, now=1000.0 + 3600)
    assert (plan.rewrite, plan.expire, plan.orphans) == (True, True, False)
    # snapshots beyond keep_snapshots, none older than the retention (1h): nothing to expire
    young = TableFigures(data_files=4, delete_files=0, snapshots=60, oldest=900.0)
    assert not due(policy, young, 1000.0, 900.0 + 3599).expire
    assert due(policy, young, 1000.0, 900.0 + 3601).expire
    assert due(policy, TableFigures(data_files=30), 1000.0, 1000.0).rewrite
    # orphans: once per interval, and first on a table never cleaned
    assert due(policy, quiet, None, 1000.0).orphans
    assert due(policy, quiet, 1000.0, 1000.0 + 86400).orphans
    # by hand: whatever can be done
    forced = due(policy, TableFigures(data_files=2, snapshots=2, oldest=0.0), 1000.0, 1.0, True)
    assert (forced.rewrite, forced.expire, forced.orphans) == (True, False, True)
    assert not due(policy, TableFigures(data_files=1), 1000.0, 1.0, True).rewrite


def test_procedure_calls_name_the_table_and_bounds() -> None:
    assert rewrite_sql("cdc", "ns", "my table") == (
        "CALL `cdc`.system.rewrite_data_files(table => '`cdc`.`ns`.`my table`', options => "
        "map('delete-file-threshold', '1', 'min-input-files', '2', 'remove-dangling-deletes', "
        "'true', 'partial-progress.enabled', 'false'))"
    )
    assert "remove_orphan_files(table => '`cdc`.`ns`.`t`', older_than => TIMESTAMP '1970-01-02" in (
        orphans_sql("cdc", "ns", "t", 86400.0)
    )


def test_the_configuration_turns_it_off_per_pipeline_or_table_and_refuses_short_orphan_ages() -> (
    None
):
    cfg = load_config(
        {
            "sources": [SOURCE],
            "maintenance": "off",
            "tables": {"busy": {"maintenance": {"every_batches": 5}}, "quiet": {}},
        }
    )
    assert not cfg.maintenance.enabled and cfg.maintenance_of("quiet") is None
    busy = cfg.maintenance_of("busy")
    assert busy is not None and busy.every_batches == 5
    default = load_config({"sources": [SOURCE]})
    assert default.maintenance_of("any") == MaintenanceConfig()
    assert (
        load_config({"sources": [SOURCE], "tables": {"t": {"maintenance": False}}}).maintenance_of(
            "t"
        )
        is None
    )
    with pytest.raises(ConfigError) as e:
        load_config({"sources": [SOURCE], "maintenance": {"orphan_age": "2h"}})
    assert "maintenance.orphan_age: '2h' is under 24h" in str(e.value)


POLICY = {
    "every_batches": 2,
    "rewrite_delete_files": 2,
    "rewrite_data_files": 4,
    "snapshot_retention": "0s",
    "keep_snapshots": 2,
}


@pytest.mark.spark
def test_maintenance_between_batches_keeps_files_and_snapshots_bounded(
    spark: Any, tmp_path: Path
) -> None:
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.results import maintenance

    w = generate(31, tables=2, transactions=60)
    res = render_to_landing(w, tmp_path / "landing", seed=31, files=8, duplicates=0.1)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = pipeline_config(
        tmp_path, warehouse, res.options, namespace="upkeep", maintenance=POLICY
    )
    cfg = load_config_file(config)
    reports = Pipeline(cfg, spark).run().reports
    assert len(reports) == 8
    lines = [line for r in reports for line in r.maintenance]
    assert any(line.startswith("rewrite_data_files ") for line in lines), lines
    assert any(line.startswith("expire_snapshots ") for line in lines), lines
    compare_replicas(spark, w, "upkeep").assert_equal()
    actions = maintenance(cfg, spark).collect()
    assert {r["action"] for r in actions} >= {"rewrite_data_files", "expire_snapshots"}
    rewrites = [r for r in actions if r["action"] == "rewrite_data_files"]
    assert all(r["files_after"] <= r["files_before"] for r in rewrites)
    for name in w.tables:
        snaps = spark.sql(f"SELECT count(*) AS n FROM cdc.upkeep.{name}.snapshots").collect()
        # the kept snapshots, and those of the batches since the last round
        assert snaps[0]["n"] <= POLICY["keep_snapshots"] + 2 * 2, name
        # and the expired snapshots' own files went with them: the manifest lists on disk
        # are those of the snapshots kept
        lists = spark.sql(f"SELECT manifest_list FROM cdc.upkeep.{name}.snapshots").collect()
        kept = {Path(r["manifest_list"].removeprefix("file:")) for r in lists}
        folder = next(iter(kept)).parent
        assert set(folder.glob("snap-*.avro")) == kept, name
    # by hand: everything that can be done, then nothing is left to rewrite
    with Pipeline(cfg, spark) as pipeline:
        done = pipeline.maintain()
    assert {a.action for a in done} >= {"remove_orphan_files"}
    for name in w.tables:
        files = spark.sql(f"SELECT count(*) AS n FROM cdc.upkeep.{name}.delete_files").collect()[0][
            "n"
        ]
        assert files == 0, name
    compare_replicas(spark, w, "upkeep").assert_equal()
    # what cdcflow history --maintenance shows
    from click.testing import CliRunner

    from cdcflow.cli.main import cli

    shown = CliRunner().invoke(cli, ["history", str(config), "--maintenance"])
    assert shown.exit_code == 0, shown.output
    # read with pyiceberg as through Spark: the same lines, both listings
    for argv in (["--maintenance"], []):
        through_spark = CliRunner().invoke(cli, ["history", str(config), *argv, "--spark"])
        assert (
            through_spark.output == CliRunner().invoke(cli, ["history", str(config), *argv]).output
        )
    assert "remove_orphan_files" in shown.output and "rewrite_data_files" in shown.output
    assert "files" in shown.output.splitlines()[0]
    # and between the batches of the history, as rows of their own
    listed = CliRunner().invoke(cli, ["history", str(config)])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[0].split()[-4:] == ["slowest", "stage", "or", "action"]
    upkeep = [ln for ln in lines if ln.startswith("maintenance ")]
    assert any("rewrite_data_files upkeep." in ln and " files)" in ln for ln in upkeep), upkeep
    assert any("by hand" in ln and "remove_orphan_files" in ln for ln in upkeep)
    assert sum(1 for ln in lines[1:] if not ln.startswith("maintenance ")) == 8
    with pytest.raises(ConfigError, match="no replica 'nope'"):
        with Pipeline(cfg, spark) as pipeline:
            pipeline.maintain(["nope"])


def _run(config: Path, crash_after: str) -> int:
    done = subprocess.run(
        command(crash_after, "run", str(config)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        timeout=600,
    )
    return done.returncode


@pytest.mark.spark
def test_apply_changes_called_batch_by_batch_gets_its_maintenance_rounds(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``cdc.apply_changes`` of a batch DataFrame is a pipeline's only batch: the rounds
    come by batch id (after batches 1 and 3 with ``every_batches: 2``), so a table every call
    rewrites does not pile up delete files (a count of the pipeline's own batches never
    reached 2); the tombstone expiry runs on the first call of the process only, not on
    every call (it is hourly per process)."""
    import cdcflow.api as cdc
    from cdcflow.pipeline import upkeep

    monkeypatch.setattr(upkeep, "_EXPIRED", {}, raising=False)
    expiries: list[str] = []
    expire = upkeep.Upkeep.expire

    def counted(self: upkeep.Upkeep, session: Any) -> None:
        expiries.append(self.internal)
        expire(self, session)

    monkeypatch.setattr(upkeep.Upkeep, "expire", counted)

    schema = "userId bigint, name string, operation string, sequenceNum bigint"
    settings: dict[str, Any] = {
        "namespace": "upkeep_calls",
        "checkpoint": str(tmp_path / "chk"),
        "maintenance": {"every_batches": 2, "rewrite_delete_files": 1, "rewrite_data_files": 2},
    }
    rounds = []
    for b in range(4):
        rows = [(k, f"n{b}", "DELETE" if b and k == b else "UPSERT", b * 100 + k) for k in range(8)]
        result = cdc.apply_changes(
            target="users",
            source=spark.createDataFrame(rows, schema),
            keys=["userId"],
            sequence_by="sequenceNum",
            apply_as_deletes="operation = 'DELETE'",
            except_column_list=["operation", "sequenceNum"],
            session=spark,
            **settings,
        )
        assert result.exit_status == 0
        rounds.append([a.table for r in result.reports for a in r.actions])
    assert "users" not in rounds[0] and "users" not in rounds[2]
    assert "users" in rounds[1] and "users" in rounds[3], rounds
    done = spark.sql(
        "SELECT batch_id, action FROM cdc.upkeep_calls__cdcflow.maintenance "
        "WHERE table = 'users' AND action = 'rewrite_data_files' ORDER BY batch_id"
    ).collect()
    assert [(r["batch_id"], r["action"]) for r in done] == [
        (1, "rewrite_data_files"),
        (3, "rewrite_data_files"),
    ]
    rows = spark.sql("SELECT userId, name FROM cdc.upkeep_calls.users ORDER BY 1").collect()
    assert [tuple(r) for r in rows] == [(k, "n3") for k in range(8) if k != 3]
    assert expiries == ["upkeep_calls__cdcflow"]


@pytest.mark.services
@pytest.mark.spark
def test_a_crash_during_and_right_after_each_maintenance_action_then_rerun_equals_the_oracle(
    spark: Any, tmp_path: Path
) -> None:
    """A ``consistency: transactions`` pipeline with a maintenance round after every batch
    (snapshots expire down to two) is killed inside an orphan removal and a rewrite (a Spark
    job of the procedure running) and an expiry (committed, deleting the files it expired),
    and right after each, at a later round each time:
    the rerun converges to the oracle with no transaction left held, no batch is in the
    history twice, and dead letters replay after their snapshots expired."""
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.replay import DeadLetterFilter, replay_dead_letters

    w = generate(32, tables=2, transactions=100)
    res = render_to_landing(
        w, tmp_path / "landing", seed=32, files=10, duplicates=0.1, markers=True
    )
    first = sorted(res.files)[0]
    append(first, b"this line is not json\n")
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = pipeline_config(
        tmp_path,
        warehouse,
        res.options,
        namespace="upkeep_crash",
        consistency="transactions",
        maintenance={**POLICY, "every_batches": 1},
    )
    steps = (
        # orphans first: a table's orphans are removed once a day, and a removal cut short
        # does not count
        "during:remove_orphan_files",
        "remove_orphan_files",
        "during:rewrite_data_files",
        "rewrite_data_files",
        "during:expire_snapshots",
        "expire_snapshots",
    )
    # this Spark line's half (tests/crashing.py): Spark 4 the "during" points, 3.5 the others
    for step in line_points(steps):
        assert _run(config, step) == 137, step
    cfg = load_config_file(config)
    assert Pipeline(cfg, spark).run().failure is None
    compare_replicas(spark, w, "upkeep_crash").assert_equal()
    waiting = spark.sql(
        "SELECT count(*) AS n FROM cdc.upkeep_crash__cdcflow.held WHERE released_batch IS NULL"
    ).collect()[0]["n"]
    assert waiting == 0
    dead = spark.sql("SELECT count(*) AS n FROM cdc.upkeep_crash__cdcflow.dead_letters")
    assert dead.collect()[0]["n"] == 1  # the bad line, once
    hist = spark.sql(
        "SELECT batch_id, count(*) AS n FROM cdc.upkeep_crash__cdcflow.batches GROUP BY 1"
    ).collect()
    assert len(hist) == 10 and all(r["n"] == 1 for r in hist)
    expired = spark.sql(
        "SELECT count(*) AS n FROM cdc.upkeep_crash__cdcflow.dead_letters.snapshots"
    ).collect()[0]["n"]
    assert expired <= POLICY["keep_snapshots"] + 2
    replayed = replay_dead_letters(cfg, spark, DeadLetterFilter())
    assert sum(replayed.claimed.values()) == 1  # the bad line, dead-lettered again
    assert replayed.dead_lettered == 1
    compare_replicas(spark, w, "upkeep_crash").assert_equal()
