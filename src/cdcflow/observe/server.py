"""The HTTP endpoint of a running pipeline: ``/metrics`` (Prometheus), ``/healthz`` (the process
lives), ``/readyz`` (a batch succeeded, or a trigger found nothing to do, within the last
``ready_intervals`` follow intervals), ``/status.json`` and the status page at ``/``.

A small threaded WSGI server of the standard library (as ``prometheus_client`` serves its
own), in threads of its own beside the pipeline; a poller looks at the streaming queries
between scrapes (:meth:`~cdcflow.observe.metrics.PipelineMetrics.poll`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import choose_encoder

from cdcflow.errors import ConfigError
from cdcflow.observe.page import page

if TYPE_CHECKING:
    from cdcflow.config import PipelineConfig
    from cdcflow.observe.metrics import PipelineMetrics
    from cdcflow.pipeline.query import Pipeline

_LOG = logging.getLogger("cdcflow")
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a scrape every few seconds, for months)."""


class MetricsServer:
    """Serves one pipeline's metrics, health, readiness and status page."""

    def __init__(self, metrics: PipelineMetrics, host: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        """Where it answers (``http://host:port/``)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/"

    def start(self, seed: bool = True) -> MetricsServer:
        """Listen and start answering (``seed``: read the tables' figures from the catalog
        first, in the background)."""
        try:
            server = make_server(
                self.host, self.port, self.app, server_class=_Server, handler_class=_Quiet
            )
        except OSError as e:
            raise ConfigError(
                f"metrics: cannot listen on {self.host}:{self.port} ({e.strerror or e})",
                code="METRICS_PORT",
                hint="pick another metrics.port (or --metrics-port), or stop what listens there",
            ) from None
        self._server = server
        self.port = int(server.server_address[1])
        serving = threading.Thread(target=server.serve_forever, name="cdcflow-metrics", daemon=True)
        polling = threading.Thread(
            target=self._poll, args=(seed,), name="cdcflow-metrics-poll", daemon=True
        )
        self._threads = [serving, polling]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop answering."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for t in self._threads:
            t.join(timeout=5)
        self.metrics.close()

    def _poll(self, seed: bool) -> None:
        if seed:
            try:
                self._seed()
            except Exception:  # the page then starts from this run's batches only
                _LOG.debug("seeding the metrics from the catalog", exc_info=True)
        every = max(1.0, min(5.0, self.metrics.interval / 2))
        while not self._stop.wait(every):
            try:
                self.metrics.poll()
            except Exception:  # one look that failed: the next one tries again
                _LOG.debug("polling the pipeline", exc_info=True)

    def _seed(self) -> None:
        from cdcflow.errors import CdcflowError
        from cdcflow.observe.catalog import CatalogUnreadable, open_catalog
        from cdcflow.observe.tables_iceberg import IcebergResults

        try:
            catalog = open_catalog(self.metrics.cfg.catalog)
        except (CatalogUnreadable, CdcflowError):
            return
        results = IcebergResults(self.metrics.cfg, catalog)
        try:
            self.metrics.seed(results)
        except CdcflowError:  # no namespace yet: the first batches make it
            self.metrics.results = results

    # ------------------------------------------------------------------ the WSGI app

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """The endpoints."""
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            self.metrics.poll(light=True)
            encode, content_type = choose_encoder(environ.get("HTTP_ACCEPT") or "")
            return _answer(start_response, "200 OK", content_type, encode(self.metrics.registry))
        if path == "/healthz":
            return _answer(start_response, "200 OK", "text/plain", b"ok\n")
        if path == "/readyz":
            self.metrics.poll(light=True)
            ready, why = self.metrics.ready()
            status = "200 OK" if ready else "503 Service Unavailable"
            return _answer(start_response, status, "text/plain", (why + "\n").encode())
        if path == "/status.json":
            self.metrics.poll(light=True)
            body = self.metrics.status().dumps().encode()
            return _answer(start_response, "200 OK", "application/json", body)
        if path in ("/", "/index.html"):
            self.metrics.poll(light=True)
            html = page(self.metrics.status()).encode()
            return _answer(start_response, "200 OK", "text/html; charset=utf-8", html)
        return _answer(start_response, "404 Not Found", "text/plain", b"not found\n")


def _answer(start_response: StartResponse, status: str, kind: str, body: bytes) -> list[bytes]:
    start_response(
        status,
        [
            ("Content-Type", kind),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [body]


def watch(pipeline: Pipeline, cfg: PipelineConfig, port: int | None = None) -> MetricsServer | None:
    """Serve the metrics of ``pipeline`` when its configuration asks for them (``metrics:``)
    or ``port`` is given; stopped when the pipeline closes. Its ``on_report`` must include
    the server's :meth:`~cdcflow.observe.metrics.PipelineMetrics.report` (see
    :func:`reporting`)."""
    from cdcflow.observe.metrics import PipelineMetrics

    settings = cfg.metrics
    if settings is None and port is None:
        return None
    host = settings.host if settings is not None else "127.0.0.1"
    intervals = settings.ready_intervals if settings is not None else 3
    chosen = port if port is not None else (settings.port if settings is not None else 0)
    metrics = PipelineMetrics(cfg, pipeline, ready_intervals=intervals)
    server = MetricsServer(metrics, host, chosen).start()
    pipeline.on_close.append(server.stop)
    return server


def reporting(
    server: MetricsServer | None, *others: Callable[[Any], None] | None
) -> Callable[[Any], None] | None:
    """An ``on_report`` that gives each report to the server's metrics and to ``others``."""
    calls = [c for c in others if c is not None]
    if server is not None:
        calls.insert(0, server.metrics.report)
    if not calls:
        return None

    def on_report(report: Any) -> None:
        for call in calls:
            call(report)

    return on_report
