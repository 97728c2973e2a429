"""``cdcflow demo`` leaves its pipelines' configuration files, and the read commands open the
demo's replicas through them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import load_config_file
from cdcflow.demo import run_demo
from cdcflow.errors import ConfigError


@pytest.mark.spark
def test_the_demo_leaves_configurations_the_read_commands_open(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cdcflow.cli.main import main

    workdir = tmp_path / "demo-data"
    lines: list[str] = []
    assert run_demo(workdir, transactions=8, echo=lines.append, dialects=["cockroachdb"])
    path = workdir / "cockroachdb.yaml"
    assert lines[-5:] == [
        f"the pipelines' configurations: {path}",
        "look at the replicas with the read commands, e.g.:",
        f"  cdcflow tables {path}",
        f"  cdcflow show {path} orders",
        f"  cdcflow history {path}",
    ]
    cfg = load_config_file(path)
    assert cfg.namespace == "demo_cockroachdb"
    assert cfg.sources[0].path == str(workdir / "landing" / "cockroachdb")
    assert cfg.checkpoint == str(workdir / "checkpoints" / "cockroachdb")
    # the counts the demo printed for its replicas are what the read command finds there
    printed = {
        ln.split()[0]: ln.split()[1] for ln in lines if ln.endswith("rows  equals the oracle")
    }
    capsys.readouterr()
    assert main(["tables", str(path)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["table", "rows"]
    found = {r.split()[0].removeprefix("cdc.demo_cockroachdb."): r.split()[1] for r in rows}
    assert found == printed and len(found) == 3


def test_an_unknown_demo_dialect_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        run_demo(tmp_path / "demo", dialects=["debezum"])
    assert (
        str(e.value)
        == "[CONFIG_INVALID] the demo has no dialect 'debezum'. Did you mean 'debezium'?"
    )
