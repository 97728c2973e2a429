"""``cdcflow run`` and ``cdcflow demo``."""

from __future__ import annotations

from pathlib import Path

import click

from cdcflow.cli.main import echo_err


@click.command("run")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--follow", is_flag=True, help="Keep following the landing zones.")
def run_cmd(config: str, follow: bool) -> None:
    """Run the pipeline described by CONFIG (YAML): decode the landing zones and apply the
    events to Iceberg tables. Stops when everything present is processed, unless --follow."""
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.report import format_report

    cfg = load_config_file(config)
    pipeline = Pipeline(cfg)
    echo_err(
        f"pipeline {cfg.pipeline}: {len(cfg.sources)} source(s) → "
        f"{cfg.catalog.name}.{cfg.namespace}" + (" (following)" if follow else "")
    )
    reports = pipeline.run(follow=follow, on_report=lambda r: click.echo(format_report(r)))
    total = sum(r.events for r in reports)
    dead = sum(r.dead_lettered for r in reports)
    click.echo(f"done: {len(reports)} batch(es), {total:,} events, {dead:,} dead-lettered")


@click.command("demo")
@click.option(
    "--dir",
    "workdir",
    default="./demo-data",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Working directory (recreated).",
)
@click.option("--seed", default=7, show_default=True, help="Workload seed.")
@click.option(
    "--transactions", default=150, show_default=True, help="Source transactions to generate."
)
def demo_cmd(workdir: str, seed: int, transactions: int) -> None:
    """Zero-configuration end-to-end run: generate a workload, render it in every registered
    dialect with delivery faults, run the pipeline twice (the second run redelivers part of the
    input) and check every replica against the oracle."""
    from cdcflow.demo import run_demo

    ok = run_demo(Path(workdir), seed=seed, transactions=transactions, echo=click.echo)
    if not ok:
        raise click.exceptions.Exit(1)
