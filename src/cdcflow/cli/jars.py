"""``cdcflow jars``: the jars a pipeline's session loads, by Maven coordinates, and the cache."""

from __future__ import annotations

import click


@click.command("jars")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--fetch", is_flag=True, help="Resolve what the cache lacks (needs Maven Central or a mirror)."
)
@click.option(
    "--print",
    "what",
    type=click.Choice(["list", "jars", "packages"]),
    default="list",
    show_default=True,
    help="list: versions, coordinates and cached files; jars: the cached files, comma-separated "
    "(for spark-submit --jars); packages: the coordinates (for spark-submit --packages).",
)
def jars_cmd(config: str | None, fetch: bool, what: str) -> None:
    """The Maven coordinates of the jars a session of CONFIG loads with the installed PySpark
    (without CONFIG: every jar cdcflow can load: Iceberg's Spark runtime, the SQLite and
    PostgreSQL JDBC drivers, Spark's Kafka connector), and whether cdcflow's jar cache holds
    them. --fetch resolves what it lacks, each set of jars on its own, so one that cannot be
    resolved is named and the others are still cached; runs need no network afterwards.

    Exit status: 0 the cache holds them, 1 it does not (without --fetch), 2 a set of them could
    not be resolved (with --fetch: the others are cached)."""
    import pyspark

    from cdcflow.spark import jars
    from cdcflow.spark.session import SparkSettings, needs

    if config is not None:
        from cdcflow.config import load_config_file
        from cdcflow.pipeline.session import spark_settings

        settings = spark_settings(load_config_file(config))
    else:
        settings = SparkSettings()
    wanted = needs(settings, pyspark.__version__)
    if what == "packages":
        click.echo(",".join(c for n in wanted for c in n.coordinates))
        return
    cache = jars.JarCache(jars.cache_root())
    found = jars.fetch(wanted, cache, resolving=fetch)
    if what == "jars":
        if any(f is None for f in found.values()):
            raise click.ClickException(
                f"cdcflow's jar cache ({cache.root}) lacks them: add --fetch"
            )
        click.echo(",".join(jars.loaded(found)))
        return
    click.echo(f"PySpark {pyspark.__version__}, Iceberg {jars.ICEBERG_VERSION}; cache {cache.root}")
    for need, files in found.items():
        optional = "" if need.required else " (optional)"
        click.echo(f"{need.label}{optional}: {','.join(need.coordinates)}")
        if isinstance(files, list):
            for path in files:
                click.echo(f"  {path}")
        else:
            click.echo("  not resolved" if files else "  not cached")
    jars.loaded(found)  # raises for a required set that could not be resolved
    if any(f is None for f in found.values()):
        click.echo("not cached: run `cdcflow jars --fetch` (or the first session fetches them)")
        raise click.exceptions.Exit(1)
