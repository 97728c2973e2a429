"""``cdcflow serve CONFIG``: receive webhook-delivered CDC messages and land them durably."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from cdcflow.cli.main import echo_err


@click.command("serve")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--host", default=None, help="Override listen.host.")
@click.option("--port", type=int, default=None, help="Override listen.port (0: any free port).")
@click.option("-v", "--verbose", count=True, help="Log each request (-v) or more (-vv).")
def serve_cmd(config: str, host: str | None, port: int | None, verbose: int) -> int:
    """Run the webhook receiver described by CONFIG (no Spark, no JVM).

    Accepted bodies are decoded with the endpoint's dialect, landed durably in the landing zone
    the pipeline reads, and only then acknowledged.
    """
    from cdcflow.serve.config import load_serve_config_file
    from cdcflow.serve.server import make_server

    logging.basicConfig(
        level=logging.DEBUG if verbose > 1 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if verbose == 1:
        logging.getLogger("cdcflow.serve").setLevel(logging.DEBUG)
    settings = load_serve_config_file(config)
    if host is not None or port is not None:
        listen = settings.config.listen.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        cfg = settings.config.model_copy(update={"listen": listen})
        settings = type(settings)(
            config=cfg, landing=settings.landing, endpoints=settings.endpoints
        )
    server = make_server(settings)
    log = logging.getLogger("cdcflow.serve")
    for ep in server.receiver.endpoints.values():
        auth = ep.runtime
        if auth.signing_secret is None and auth.bearer_token is None:
            log.warning("endpoint %s accepts unauthenticated requests", ep.path)
        log.info(
            "endpoint %s (dialect %s) lands in %s",
            ep.path,
            auth.config.dialect,
            settings.landing / ep.subdir,
        )
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the bound address on stdout (tests and scripts read it; port 0 picks a free port)
    click.echo(f"listening on {server.url}", err=False)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        if not server.receiver.wait_idle(30.0):
            echo_err("stopped with requests still in flight (they were not acknowledged)")
        server.server_close()
    log.info("stopped")
    return 0
