"""``cdcflow run`` and ``cdcflow demo``."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cdcflow.cli.main import echo_err

if TYPE_CHECKING:
    from cdcflow.config import PipelineConfig


@click.command("run")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--follow", is_flag=True, help="Keep following the landing zones.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz, /readyz and the status page on this port (as metrics: "
    "{port: …} in CONFIG does; 0: any free port).",
)
@click.option(
    "--remote",
    metavar="sc://HOST:PORT",
    help="Run on this Spark Connect server (as spark: {remote: …} in CONFIG does; an address "
    "holding a token goes in the environment variable SPARK_REMOTE instead).",
)
def run_cmd(config: str, follow: bool, metrics_port: int | None, remote: str | None) -> None:
    """Run the pipeline described by CONFIG (YAML): decode the landing zones and apply the
    events to Iceberg tables. Stops when everything present is processed, unless --follow;
    Ctrl-C or SIGTERM then stops after the batch in progress.

    Exit status: 0 everything applied, 3 some messages were dead-lettered, 1 the run failed,
    2 it could not start (a configuration problem, a missing landing zone, another run of the
    same pipeline)."""
    from cdcflow.config import load_config_file
    from cdcflow.errors import CdcflowError
    from cdcflow.observe.server import reporting, watch
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.report import format_report
    from cdcflow.pipeline.session import remote_url
    from cdcflow.spark.session import session_running

    cfg = load_config_file(config)
    if remote is not None:
        cfg = with_remote(cfg, remote)
    # no JVM is started before the checks that need none (paths, the run lock)
    own_session = (
        remote_url(cfg) is not None or "pyspark" not in sys.modules or not session_running()
    )
    pipeline = Pipeline(cfg)
    pipeline.check_paths()
    with StopSignals.spare_spark():
        pipeline.open()
    try:
        server = watch(pipeline, cfg, metrics_port)
    except BaseException:
        pipeline.close()
        raise
    echo_err(
        f"pipeline {cfg.pipeline}: {len(cfg.sources)} source(s) → "
        f"{cfg.catalog.name}.{cfg.namespace}" + (" (following)" if follow else "")
    )
    if server is not None:
        echo_err(f"metrics, health and the status page on {server.url}")
    with StopSignals() as signals:
        result = pipeline.run(
            follow=follow,
            on_report=reporting(
                server, lambda r: click.echo(format_report(r, source=len(cfg.sources) > 1))
            ),
            should_stop=signals.received,
            raise_on_failure=False,
        )
    click.echo(result.summary())
    if result.failure is not None:
        failure = result.failure
        if isinstance(failure, CdcflowError) and failure.hint:
            echo_err(f"{failure}\nhint: {failure.hint}")
        else:
            echo_err(str(failure))
    if own_session:
        # Stopped here rather than by the JVM's exit, so that a local-cluster master ends the
        # application instead of seeing its executors die and launching new ones.
        pipeline.stop_session()
    if result.exit_status:
        raise click.exceptions.Exit(result.exit_status)


def with_remote(cfg: PipelineConfig, url: str) -> PipelineConfig:
    """The configuration run on the Spark Connect server at ``url`` (``--remote``)."""
    from cdcflow.config import check_remote
    from cdcflow.errors import ConfigError

    try:
        check_remote(url)
    except ValueError as e:
        raise ConfigError(f"--remote: {e}") from None
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"remote": url})})


class StopSignals:
    """SIGINT and SIGTERM ask the run to stop after the batch in progress (no traceback); a
    second one ends the process at once (the interrupted batch is read again next time)."""

    def __init__(self) -> None:
        self._count = 0
        self._previous: dict[int, object] = {}

    @staticmethod
    @contextmanager
    def spare_spark() -> Iterator[None]:
        """SIGTERM ignored while Spark's JVM starts: a JVM started with the signal ignored
        keeps ignoring it, so a SIGTERM to the whole process group (a service manager, a
        terminal) reaches only this process, which stops after the batch in progress and then
        stops Spark — instead of Spark shutting down under the batch. (PySpark starts the JVM
        with SIGINT ignored for the same reason.)"""
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def received(self) -> bool:
        """Whether a stop was asked for."""
        return self._count > 0

    def _handle(self, signum: int, frame: object) -> None:
        self._count += 1
        if self._count == 1:
            echo_err("stopping after the batch in progress (again to stop at once)")
        else:
            os._exit(130)

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


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
    "--kafka", is_flag=True, help="Through a Kafka broker started for the demo (needs mvn)."
)
@click.option(
    "--transactions", default=150, show_default=True, help="Source transactions to generate."
)
@click.option(
    "--dialect",
    "dialects",
    multiple=True,
    help="Only this dialect (repeatable; default: every dialect with a renderer).",
)
def demo_cmd(
    workdir: str, seed: int, transactions: int, kafka: bool, dialects: tuple[str, ...]
) -> None:
    """Zero-configuration end-to-end run: generate a workload, render it in every registered
    dialect with delivery faults, run the pipeline twice (the second run redelivers part of the
    input) and check every replica against the oracle. With --kafka: start a Kafka broker,
    produce each dialect's workload into topics in its producer's Kafka form, read them with
    kafka sources, check the replicas, stop the broker. Each pipeline's configuration is left
    in the working directory (<dir>/<dialect>.yaml) for the read commands."""
    from cdcflow.demo import run_demo, run_kafka_demo

    run = run_kafka_demo if kafka else run_demo
    ok = run(
        Path(workdir),
        seed=seed,
        transactions=transactions,
        echo=click.echo,
        dialects=dialects or None,
    )
    if not ok:
        raise click.exceptions.Exit(1)
