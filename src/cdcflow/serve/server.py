"""The ``cdcflow serve`` HTTP receiver: uvicorn (an ASGI server on asyncio, HTTP/1.1 parsed by
h11, connections kept alive between requests) in front of the receiver's core
(:mod:`cdcflow.serve.receiver`); ``prometheus_client`` serves ``/metrics``, and cdcflow's
decoders decode: it starts without Spark or a JVM. Bodies are read on the event loop;
authentication, decoding and landing run in a pool of ``max_in_flight`` threads, whose durable
writes share their flushes (:mod:`cdcflow.serve.landing`). A request is *in flight* from the
moment its POST is read until its answer is sent, and requests over ``max_in_flight`` are
answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import uvicorn

from cdcflow.serve.config import Settings
from cdcflow.serve.receiver import (
    DRAIN_LIMIT,
    BadFraming,
    BodyTimeout,
    BodyTooLarge,
    Endpoint,
    Headers,
    Receiver,
    Response,
    refusal,
)

log = logging.getLogger("cdcflow.serve")

#: The HTTP/1.1 parser uvicorn runs (h11: headers bounded, see docs/webhooks.md).
HTTP_PARSER = "h11"


#: Seconds an idle kept-alive connection stays open.
KEEP_ALIVE = 60
#: Seconds in-flight requests get to finish when the server stops.
GRACE = 30
_JSON = "application/json"


def _answer_headers(ctype: str, length: int, extra: Mapping[str, str], close: bool) -> list[Any]:
    out = [(b"content-type", ctype.encode()), (b"content-length", str(length).encode())]
    out += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
    if close:
        out.append((b"connection", b"close"))
    return out


class ReceiverApp:
    """The receiver as an ASGI application (what uvicorn serves)."""

    def __init__(self, receiver: Receiver, workers: ThreadPoolExecutor) -> None:
        self.receiver = receiver
        self.workers = workers

    def __repr__(self) -> str:
        return f"ReceiverApp({self.receiver!r})"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        route = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        route = route.split("?", 1)[0].rstrip("/") or "/"
        method = scope["method"]
        headers = Headers(scope["headers"])
        receiver = self.receiver
        endpoint = receiver.endpoints.get(route)
        if method in ("GET", "HEAD") and endpoint is None:
            status, payload, ctype = receiver.get(route, headers.get("accept"))
            await self._send(send, status, payload, ctype, {}, False)
            return
        if method != "POST" and endpoint is not None:
            doc = {"status": "error", "code": "METHOD_NOT_ALLOWED"}
            await self._send(send, 405, orjson.dumps(doc), _JSON, {"Allow": "POST"}, True)
            return
        if endpoint is None:
            resp = refusal(404, "NOT_FOUND", "no endpoint at this path", close=True)
            if method == "POST":
                await self._answer(send, resp, started, "-")
            else:
                await self._send(send, 404, orjson.dumps(resp.doc), _JSON, resp.headers, True)
            return
        client = scope.get("client")
        remote = str(client[0]) if client else "-"
        with receiver.slot() as got:
            if not got:
                resp = receiver.busy("OVERLOADED", "too many requests in flight")
            else:
                try:
                    resp = await self._post(endpoint, headers, receive, remote)
                except Exception as e:  # never leak internals; never acknowledge
                    log.exception("unexpected error on %s: %s", route, type(e).__name__)
                    resp = refusal(
                        500, "INTERNAL", "internal error; the body was not kept", close=True
                    )
            await self._answer(send, resp, started, endpoint.path)

    async def _post(
        self, endpoint: Endpoint, headers: Headers, receive: Any, remote: str
    ) -> Response:
        receiver = self.receiver
        denied = endpoint.authenticate_headers(headers)
        if denied is not None:
            denied.close = True
            return denied
        try:
            body = await self._read_body(headers, receive)
        except BodyTooLarge:
            return refusal(
                413, "BODY_TOO_LARGE", f"the body is over {receiver.max_body} bytes", close=True
            )
        except BadFraming as e:
            return refusal(400, "BAD_FRAMING", str(e), close=True)
        except BodyTimeout:
            return refusal(
                408,
                "BODY_TIMEOUT",
                f"the body did not arrive within {receiver.body_timeout:g}s; it was not kept",
                close=True,
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.workers, receiver.post, endpoint, headers, body, remote
        )

    async def _read_body(self, headers: Headers, receive: Any) -> bytes:
        """The body, whole before the receiver's ``body_timeout`` runs out (``BodyTimeout``);
        a moderately oversized one is read and dropped so the client sees the 413 instead of
        a reset connection, a huge one is not read."""
        limit = self.receiver.max_body
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked:
            length_text = headers.get("content-length")
            if length_text is None:
                raise BadFraming("Content-Length or chunked transfer encoding is required")
            try:
                length = int(length_text.strip())
            except ValueError:
                raise BadFraming("Content-Length is not a number") from None
            if length > limit + DRAIN_LIMIT:
                raise BodyTooLarge
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.receiver.body_timeout
        parts: list[bytes] = []
        total = 0
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise BodyTimeout
            try:
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                raise BodyTimeout from None
            if message["type"] == "http.disconnect":
                raise BadFraming("the connection closed before the whole body arrived")
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit + DRAIN_LIMIT:
                raise BodyTooLarge
            if total <= limit:
                parts.append(chunk)
            if not message.get("more_body", False):
                break
        if total > limit:
            raise BodyTooLarge
        return b"".join(parts)

    async def _answer(self, send: Any, resp: Response, started: float, metric: str) -> None:
        reason = None if resp.status == 200 else resp.reason
        seconds = time.perf_counter() - started
        self.receiver.metrics.observe(metric, resp.status, seconds, reason)
        await self._send(send, resp.status, orjson.dumps(resp.doc), _JSON, resp.headers, resp.close)

    @staticmethod
    async def _send(
        send: Any, status: int, payload: bytes, ctype: str, extra: Mapping[str, str], close: bool
    ) -> None:
        head = _answer_headers(ctype, len(payload), extra, close)
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": payload})


class _Server(uvicorn.Server):
    """uvicorn's server, leaving the process's signal handlers to ``cdcflow serve``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ReceiverServer:
    """The HTTP(S) server of a :class:`Receiver`: bound when made, serving in
    :meth:`serve_forever` until :meth:`shutdown`."""

    def __init__(self, receiver: Receiver, address: tuple[str, int]) -> None:
        self.receiver = receiver
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # TCP named: asyncio sets TCP_NODELAY on the connections of TCP sockets only, and an
        # answer's head and body are two writes (a kept-alive client's delayed ACK stalled
        # every answer by ~40 ms)
        self.socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(2048)
        except OSError:
            self.socket.close()
            raise
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        tls = receiver.settings.config.tls
        self.tls = tls is not None
        self._workers = ThreadPoolExecutor(
            max_workers=receiver.max_in_flight, thread_name_prefix="cdcflow-serve"
        )
        options: dict[str, Any] = {}
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
            options = {
                "ssl_certfile": tls.cert_file,
                "ssl_keyfile": tls.key_file,
                "ssl_context_factory": lambda config, default: ctx,
            }
        config = uvicorn.Config(
            ReceiverApp(receiver, self._workers),
            http=HTTP_PARSER,
            lifespan="off",
            log_config=None,
            log_level="error",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            headers=[("server", "cdcflow-serve")],
            timeout_keep_alive=KEEP_ALIVE,
            timeout_graceful_shutdown=GRACE,
            **options,
        )
        self._server = _Server(config)
        self._serving = threading.Event()
        self._stopped = threading.Event()

    def __repr__(self) -> str:
        return f"ReceiverServer({self.url!r})"

    @property
    def url(self) -> str:
        host, port = self.server_address
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"{'https' if self.tls else 'http'}://{shown}:{port}"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`shutdown` (requests in flight then get :data:`GRACE` seconds).
        ``poll_interval`` is accepted for the standard library's servers' callers."""
        self._serving.set()
        try:
            asyncio.run(self._server.serve(sockets=[self.socket]))
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and wait until :meth:`serve_forever` has returned."""
        self._server.should_exit = True
        if self._serving.is_set():
            self._stopped.wait()

    def server_close(self) -> None:
        """Close the listening socket and the worker threads."""
        self.socket.close()
        self._workers.shutdown(wait=False)


def make_server(settings: Settings) -> ReceiverServer:
    """A bound (not yet serving) receiver for ``settings``."""
    receiver = Receiver(settings)
    listen = settings.config.listen
    return ReceiverServer(receiver, (listen.host, listen.port))
