"""The ``cdcflow`` command line.

Heavy imports (pyspark) happen inside the commands that need them, so ``--help`` and
``cdcflow inspect`` start without a JVM. Known errors print ``[CODE] message`` and a hint on
stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cdcflow.errors import CdcflowError, CommandFailed

_DEBUG = False

#: Command name → (module, click command attribute). A command's module is imported when the
#: command runs (or help lists the commands), so each command imports only what it needs.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("cdcflow.cli.inspect", "inspect_cmd"),
    "run": ("cdcflow.cli.pipeline", "run_cmd"),
    "demo": ("cdcflow.cli.pipeline", "demo_cmd"),
    "tables": ("cdcflow.cli.results", "tables_cmd"),
    "show": ("cdcflow.cli.results", "show_cmd"),
    "sql": ("cdcflow.cli.results", "sql_cmd"),
    "dead-letters": ("cdcflow.cli.deadletters", "dead_letters_cmd"),
    "history": ("cdcflow.cli.results", "history_cmd"),
    "watermarks": ("cdcflow.cli.results", "watermarks_cmd"),
    "status": ("cdcflow.cli.status", "status_cmd"),
    "serve": ("cdcflow.cli.serve", "serve_cmd"),
    "jars": ("cdcflow.cli.jars", "jars_cmd"),
    "migrate-catalog": ("cdcflow.cli.catalog", "migrate_catalog_cmd"),
    "maintain": ("cdcflow.cli.maintain", "maintain_cmd"),
}


class _Commands(click.Group):
    """The commands of :data:`COMMANDS`, each imported when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        import importlib

        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module, name = found
        command: click.Command = getattr(importlib.import_module(module), name)
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors (and Spark's last lines).")
@click.option("-v", "--verbose", is_flag=True, help="Show Spark's own lines on stderr.")
@click.version_option(package_name="cdcflow")
def cli(debug: bool, verbose: bool) -> None:
    """cdcflow: CDC messages of every dialect → exact Apache Iceberg replicas on Spark."""
    global _DEBUG
    _DEBUG = debug
    from cdcflow.spark.session import JvmOutput

    # the JVM a command starts keeps Spark's and log4j's lines to itself, unless -v
    JvmOutput.enabled = True
    JvmOutput.verbose = verbose


def main(argv: list[str] | None = None) -> int:
    """Entry point: one error funnel for every command."""
    try:
        rv = cli.main(args=argv, prog_name="cdcflow", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except CdcflowError as e:
        return _report(e, e)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as e:
        return _report(e, _known(e))


def _known(exc: Exception) -> CdcflowError:
    """A coded error for an exception that is not cdcflow's own: Spark's, or a failure of
    cdcflow itself."""
    if "pyspark" in sys.modules:
        from cdcflow.spark.errors import spark_problem

        found = spark_problem(exc)
        if found is not None:
            return found
    return CommandFailed(
        f"{type(exc).__name__}: {exc}".strip()[:500],
        code="INTERNAL_ERROR",
        hint="run with --debug for the whole trace; this is a bug of cdcflow, please report it",
    )


def _report(exc: Exception, error: CdcflowError) -> int:
    """Print ``[CODE] message`` and the hint (the trace too with ``--debug``); the exit
    status: 1 for a failure while running, 2 for a command that could not start."""
    click.echo(str(error), err=True)
    if error.hint:
        click.echo(f"hint: {error.hint}", err=True)
    if _DEBUG:
        from cdcflow.spark import session

        if session.JVM_OUTPUT is not None and session.JVM_OUTPUT.kept:
            click.echo("Spark's last lines:", err=True)
            click.echo("\n".join(session.JVM_OUTPUT.kept), err=True)
        raise exc
    return 1 if isinstance(error, CommandFailed) else 2


def echo_err(message: str) -> None:
    """Write one line to stderr."""
    click.echo(message, err=True)


def resolve_paths(paths: tuple[str, ...]) -> list[Path | None]:
    """Files named on the command line; directories expand to their files (sorted);
    ``-`` means stdin (``None``)."""
    out: list[Path | None] = []
    for p in paths or ("-",):
        if p == "-":
            out.append(None)
            continue
        path = Path(p)
        if path.is_dir():
            out.extend(
                f
                for f in sorted(path.rglob("*"))
                if f.is_file() and not f.name.startswith(("_", "."))
            )
        elif path.exists():
            out.append(path)
        else:
            raise CdcflowError(f"no such file: {p}", code="FILE_NOT_FOUND")
    return out
