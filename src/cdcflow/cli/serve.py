"""``cdcflow serve CONFIG``: receive webhook- and gRPC-delivered CDC messages and land them
durably."""

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
@click.option(
    "--grpc-port", type=int, default=None, help="Override grpc.listen.port (0: any free port)."
)
@click.option("-v", "--verbose", count=True, help="Log each request (-v) or more (-vv).")
def serve_cmd(
    config: str, host: str | None, port: int | None, grpc_port: int | None, verbose: int
) -> int:
    """Run the webhook (and gRPC) receiver described by CONFIG (no Spark, no JVM).

    Accepted bodies and gRPC calls are decoded with the endpoint's dialect, landed durably in
    the landing zone the pipeline reads, and only then acknowledged.
    """
    import dataclasses

    from cdcflow.errors import ConfigError
    from cdcflow.serve.config import load_serve_config_file
    from cdcflow.serve.grpc_server import make_grpc_server
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
        settings = dataclasses.replace(settings, config=cfg)
    if grpc_port is not None:
        grpc_cfg = settings.config.grpc
        if grpc_cfg is None:
            raise ConfigError("--grpc-port needs a grpc section in the configuration")
        grpc_cfg = grpc_cfg.model_copy(
            update={"listen": grpc_cfg.listen.model_copy(update={"port": grpc_port})}
        )
        cfg = settings.config.model_copy(update={"grpc": grpc_cfg})
        settings = dataclasses.replace(settings, config=cfg)
    server = make_server(settings)
    grpc_server = make_grpc_server(server.receiver)
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
    if grpc_server is not None:
        for gep in grpc_server.service.endpoints.values():
            if gep.runtime.bearer_token is None:
                log.warning("gRPC endpoint %s accepts unauthenticated calls", gep.name)
            log.info(
                "gRPC endpoint %s (dialect savegress) lands in %s",
                gep.name,
                settings.landing / gep.subdir,
            )
    stopping = threading.Event()
    stopped: list[threading.Event] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            if grpc_server is not None:
                # new calls are refused; calls in flight have 30 s to finish
                stopped.append(grpc_server.stop(30.0))
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if grpc_server is not None:
        grpc_server.start()
    # the bound addresses on stdout (tests and scripts read them; port 0 picks a free port)
    click.echo(f"listening on {server.url}", err=False)
    if grpc_server is not None:
        click.echo(f"listening on {grpc_server.url}", err=False)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        if grpc_server is not None:
            if not stopped:
                stopped.append(grpc_server.stop(30.0))
            stopped[0].wait(35.0)
        if not server.receiver.wait_idle(30.0):
            echo_err("stopped with requests still in flight (they were not acknowledged)")
        server.server_close()
    log.info("stopped")
    return 0
