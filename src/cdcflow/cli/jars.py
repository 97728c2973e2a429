"""``cdcflow jars``: the jars a pipeline's session loads, by Maven coordinates, and the cache."""

from __future__ import annotations

import click


@click.command("jars")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--fetch", is_flag=True, help="Resolve what the cache lacks (needs Maven Central).")
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
    """The Maven coordinates of the jars a session of CONFIG (default: the embedded catalog)
    loads with the installed PySpark, and whether cdcflow's jar cache holds them. --fetch
    resolves them into the cache; runs need no network afterwards.

    Exit status: 0 the cache holds them, 1 it does not (without --fetch)."""
    import pyspark

    from cdcflow.spark import jars
    from cdcflow.spark.session import SparkSettings, coordinates, resolve_jars

    if config is not None:
        from cdcflow.config import load_config_file
        from cdcflow.pipeline.query import spark_settings

        settings = spark_settings(load_config_file(config))
    else:
        settings = SparkSettings()
    wanted = coordinates(settings, pyspark.__version__)
    if what == "packages":
        click.echo(",".join(wanted))
        return
    cache = jars.JarCache(jars.cache_root())
    found = cache.lookup(wanted)
    if found is None and fetch:
        found = resolve_jars(wanted, cache)
    if what == "jars":
        if found is None:
            raise click.ClickException(
                f"cdcflow's jar cache ({cache.root}) lacks them: add --fetch"
            )
        click.echo(",".join(found))
        return
    click.echo(f"PySpark {pyspark.__version__}, Iceberg {jars.ICEBERG_VERSION}; cache {cache.root}")
    click.echo("packages: " + ",".join(wanted))
    if found is None:
        click.echo("not cached: run `cdcflow jars --fetch` (or the first session fetches them)")
        raise click.exceptions.Exit(1)
    for path in found:
        click.echo(f"  {path}")
