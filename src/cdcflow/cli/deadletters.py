"""``cdcflow dead-letters``: what could not be decoded or applied, and replaying it."""

from __future__ import annotations

import click

from cdcflow.cli.results import (
    _common,
    _config_arg,
    _reading,
    _session,
    emit_listing,
    open_results,
)


@click.command("dead-letters")
@_config_arg
@click.option("--limit", default=50, show_default=True)
@click.option("--code", "codes", multiple=True, metavar="CODE", help="Only these error codes.")
@click.option("--table", "tables", multiple=True, metavar="TABLE", help="Only these tables.")
@click.option("--source", "sources", multiple=True, metavar="NAME", help="Only these sources.")
@click.option(
    "--since", metavar="TIME", help="Only dead letters first seen at or after TIME (ISO-8601)."
)
@click.option(
    "--replay",
    is_flag=True,
    help="Decode the stored messages again with the current configuration and apply what "
    "now succeeds; replayed dead letters are marked and not replayed again.",
)
@click.option("--all", "include_replayed", is_flag=True, help="List replayed ones too.")
@_common
@_reading
def dead_letters_cmd(
    config: str,
    limit: int,
    codes: tuple[str, ...],
    tables: tuple[str, ...],
    sources: tuple[str, ...],
    since: str | None,
    replay: bool,
    include_replayed: bool,
    output: str,
    full: bool,
    use_spark: bool,
) -> None:
    """List dead-lettered messages (origin, error code and message, the message's bytes:
    escaped and cut in a table, whole and base64 in JSON), or replay them."""
    from cdcflow.pipeline.replay import DeadLetterFilter, replay_dead_letters, source_ids

    chosen = DeadLetterFilter(codes, tables, sources, since, include_replayed)
    if replay:
        cfg, spark = _session(config, short=False)
        result = replay_dead_letters(cfg, spark, chosen)
        click.echo(result.summary())
        if result.exit_status:
            raise click.exceptions.Exit(result.exit_status)
        return
    chosen.since_time()  # a bad --since is refused before anything is read
    results = open_results(config, use_spark)
    ids = source_ids(results.cfg, sources) if sources else None
    whole = full or output == "json"
    found = results.dead_letters(chosen, ids, limit, None if whole else 80)
    if found is None:
        click.echo("no dead letters")
        return
    emit_listing(found, output, full)
