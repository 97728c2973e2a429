"""``cdcflow status``: the status page's content as text or JSON."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from cdcflow.cli.results import _common, _config_arg, _reading, emit, open_results

if TYPE_CHECKING:
    from cdcflow.config import PipelineConfig
    from cdcflow.observe.status import Status


def live_status(cfg: PipelineConfig, timeout: float = 1.0) -> Status | None:
    """The status a running pipeline serves (``metrics:`` in its configuration), ``None``
    when none answers."""
    import json
    import urllib.error
    import urllib.request

    from cdcflow.observe.status import Status

    settings = cfg.metrics
    if settings is None or not settings.port:
        return None
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "", "::") else settings.host
    url = f"http://{host}:{settings.port}/status.json"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            doc = json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("pipeline") != cfg.pipeline:
        return None
    return Status.from_json(doc)


@click.command("status")
@_config_arg
@_common
@_reading
def status_cmd(config: str, output: str, full: bool, use_spark: bool) -> None:
    """What a pipeline looks like now — its sources (last batch, lag behind what they read)
    and each replica's freshness, rows, last batch, dead letters and files — as its status
    page shows it. A running pipeline with metrics: in its configuration answers itself;
    otherwise it is read from the catalog and the checkpoint. JSON output: one object."""
    from cdcflow.config import load_config_file
    from cdcflow.observe.status import duration, text_rows
    from cdcflow.observe.survey import status_of

    cfg = load_config_file(config)
    status = None if use_spark else live_status(cfg)
    if status is None:
        status = status_of(cfg, open_results(config, use_spark), time.time())
    if output == "json":
        click.echo(status.dumps())
        return
    if status.ready is None:
        state = "read from the catalog"
    else:
        state = "running, " + ("ready" if status.ready else "NOT READY")
    dead = f" · {status.dead_letters:,} dead letters" if status.dead_letters else ""
    click.echo(f"pipeline {status.pipeline} · namespace {status.namespace} · {state}{dead}")
    source_cols, source_rows, table_cols, table_rows = text_rows(status)

    def ago(seconds: object) -> object:
        return f"{duration(seconds)} ago" if isinstance(seconds, float) else seconds

    click.echo("")
    emit(source_cols, [(s[0], s[1], ago(s[2]), *s[3:]) for s in source_rows], output, full)
    click.echo("")
    rows = [
        (t[0], t[1], duration(t[2]) if t[2] is not None else "", ago(t[3]), *t[4:])
        for t in table_rows
    ]
    emit(table_cols, rows, output, full)
