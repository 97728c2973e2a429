"""``cdcflow maintain``: table maintenance on demand."""

from __future__ import annotations

import click


@click.command("maintain")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--table",
    "tables",
    multiple=True,
    help="A replica to maintain (repeatable; default: every replica and the internal tables).",
)
def maintain_cmd(config: str, tables: tuple[str, ...]) -> None:
    """Maintain CONFIG's tables now, under the pipeline's run lock (so never beside a run):
    data files rewritten where they hold delete files or are many, snapshots beyond the
    policy's retention expired, orphan files older than its orphan_age removed. Each action
    is printed and recorded in the maintenance table (cdcflow history --maintenance)."""
    from cdcflow.config import load_config_file
    from cdcflow.pipeline.query import Pipeline

    cfg = load_config_file(config)
    with Pipeline(cfg) as pipeline:
        actions = pipeline.maintain(list(tables) or None)
    for action in actions:
        click.echo(action.line())
    click.echo(f"{len(actions)} maintenance action(s)")
