"""The ``cdcflow serve`` HTTP receiver: authenticate, decode, land durably, then acknowledge.

HTTP is uvicorn's (an ASGI server on asyncio, HTTP/1.1 parsed by h11, connections kept alive
between requests); ``prometheus_client`` serves ``/metrics``, and cdcflow's decoders decode:
it starts without Spark or a JVM. Bodies are read on the event loop; authentication,
decoding and landing run in a pool of ``max_in_flight`` threads, whose durable writes share
their flushes (:mod:`cdcflow.serve.landing`). A request is *in flight* from the moment its
POST is read until its answer is sent, and requests over ``max_in_flight`` are answered 503.

Per POST to a configured endpoint, in order:

1. ``Content-Length`` (or chunked length) over ``max_body_size`` → 413, body not read;
2. bearer token (``Authorization: Bearer …``), then the unified format's signature, timestamp
   window and event id → 401 (``AUTH_*``) — a missing, non-ASCII or garbage header is a 401;
3. a replayed event id inside the replay window → 200 ``{"status": "duplicate"}``, not landed;
4. the body (for CloudEvents binary mode: a Kafka-record-shaped JSON document holding the
   ``ce_*`` attributes and the body, which the ``sqlserver_ces`` dialect reads back) is decoded
   with the endpoint's dialect exactly as the pipeline will decode the landed file; a body that
   cannot be decoded → 400 with the error code, kept under ``_rejected/`` with a reason file;
5. the file is landed durably (:mod:`cdcflow.serve.landing`); disk full → 503;
6. only then 200 ``{"status": "accepted", "events": N, "file": NAME}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from cdcflow import signing
from cdcflow.config import parse_duration
from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.base import DialectOptions
from cdcflow.secrets import Secret
from cdcflow.serve.config import EndpointRuntime, Settings
from cdcflow.serve.landing import DiskFull, LandingZone, ReplayJournal
from cdcflow.transports.message import Unreadable

log = logging.getLogger("cdcflow.serve")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_CE_HEADER = "ce-"
_DRAIN_LIMIT = 1024 * 1024
_KEPT_HEADERS = ("content-type", "x-savegress-event-id", "x-savegress-timestamp")
#: The HTTP/1.1 parser uvicorn runs (h11: headers bounded, see docs/webhooks.md).
HTTP_PARSER = "h11"


@dataclass
class Response:
    """An answer: status, JSON document, extra headers; ``close`` drops the connection (the
    body was not read)."""

    status: int
    doc: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False

    @property
    def reason(self) -> str:
        return str(self.doc.get("code") or self.doc.get("status") or self.status)


class Metrics:
    """The receiver's Prometheus metrics, in a registry of its own: several receivers in one
    process (tests, an embedding application) never share or collide on a series."""

    def __init__(self, in_flight: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter(
            "cdcflow_serve_requests",
            "Requests and gRPC calls answered, by status (HTTP status or gRPC code).",
            ["endpoint", "status"],
            registry=reg,
        )
        self.bytes = Counter(
            "cdcflow_serve_bytes", "Bytes of bodies landed.", ["endpoint"], registry=reg
        )
        self.events = Counter(
            "cdcflow_serve_events",
            "Canonical events in landed bodies.",
            ["endpoint"],
            registry=reg,
        )
        self.files = Counter("cdcflow_serve_files", "Files landed.", ["endpoint"], registry=reg)
        self.duplicates = Counter(
            "cdcflow_serve_duplicates", "Replayed event ids answered.", ["endpoint"], registry=reg
        )
        self.rejects = Counter(
            "cdcflow_serve_rejects",
            "Requests refused, by reason code.",
            ["endpoint", "reason"],
            registry=reg,
        )
        self.in_flight = Gauge(
            "cdcflow_serve_in_flight", "Requests being handled now.", registry=reg
        )
        self.in_flight.set_function(in_flight)
        self.latency = Histogram(
            "cdcflow_serve_request_seconds",
            "Time to answer a request.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )

    def observe(self, endpoint: str, status: int | str, seconds: float, reason: str | None) -> None:
        """One answered request or gRPC call (``status``: HTTP status or gRPC code name;
        ``reason``: the error code of a refusal)."""
        self.requests.labels(endpoint, str(status)).inc()
        if reason is not None:
            self.rejects.labels(endpoint, reason).inc()
        self.latency.labels(endpoint).observe(seconds)

    def accepted(self, endpoint: str, nbytes: int, events: int) -> None:
        """One landed body."""
        self.bytes.labels(endpoint).inc(nbytes)
        self.events.labels(endpoint).inc(events)
        self.files.labels(endpoint).inc()

    def duplicate(self, endpoint: str) -> None:
        """One replayed event id answered ``duplicate``."""
        self.duplicates.labels(endpoint).inc()

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics and their content type, in the format the ``Accept`` header asks for
        (Prometheus text, or OpenMetrics)."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


class BodyTooLarge(Exception):
    """The body is over ``max_body_size``."""


class BadFraming(Exception):
    """The request's length framing is unusable."""


class BodyTimeout(Exception):
    """The client did not send its whole body within ``body_timeout``."""


def _error(status: int, code: str, message: str, **extra: Any) -> Response:
    return Response(status, {"status": "error", "code": code, "message": message}, **extra)


def _header_text(value: str | None) -> str | None:
    """A header as :class:`Headers` gives it (ISO-8859-1 decoded) back as the sent text, or
    ``None``; non-UTF-8 bytes stay as they were decoded (and so fail ASCII checks)."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def bearer_matches(given: str | None, token: Secret) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <token>`` (the scheme without case),
    compared in constant time; a missing or non-Latin-1 value does not match."""
    if given is None:
        return False
    try:
        raw = given.strip().encode("latin-1")
    except UnicodeEncodeError:
        raw = b""
    scheme, _, value = raw.partition(b" ")
    ok = hmac.compare_digest(b"Bearer " + value.strip(), b"Bearer " + token.reveal())
    return ok and scheme.lower() == b"bearer"


class Endpoint:
    """One configured path with its decoder, replay journal and authentication."""

    def __init__(self, runtime: EndpointRuntime, zone: LandingZone) -> None:
        self.runtime = runtime
        cfg = runtime.config
        self.path = cfg.path
        self.subdir = cfg.subdir
        self.decoder = Decoder(
            cfg.dialect,
            DialectOptions(
                table_keys={t: tuple(k) for t, k in cfg.keys.items()},
                column_types=cfg.types,
                extra=cfg.options,
            ),
        )
        sig = cfg.auth.signature
        self.journal: ReplayJournal | None = None
        self.tolerance = 0.0
        if sig is not None:
            self.tolerance = float(parse_duration(sig.timestamp_tolerance))
            safe = hashlib.sha256(self.path.encode()).hexdigest()[:12]
            self.journal = ReplayJournal(
                zone.root / "_serve" / f"replay-{self.subdir.replace('/', '-')}-{safe}.log",
                float(parse_duration(sig.replay_window)),
            )

    def __repr__(self) -> str:
        return f"Endpoint({self.runtime!r})"

    def authenticate_headers(self, headers: Headers) -> Response | None:
        """Checks that need no body: the bearer token."""
        token = self.runtime.bearer_token
        if token is None:
            return None
        given = headers.get("Authorization")
        if not bearer_matches(given, token):
            code = "AUTH_MISSING" if given is None else "AUTH_BAD_TOKEN"
            return _error(
                401,
                code,
                "a valid bearer token is required",
                headers={"WWW-Authenticate": 'Bearer realm="cdcflow"'},
            )
        return None

    def authenticate_body(self, headers: Headers, body: bytes) -> Response | None:
        """The unified format's signature and timestamp (the body is signed, nothing else)."""
        secret = self.runtime.signing_secret
        sig = self.runtime.config.auth.signature
        if secret is None or sig is None:
            return None
        header = _header_text(headers.get(signing.SIGNATURE_HEADER))
        if header is None:
            return _error(401, "AUTH_MISSING", f"missing {signing.SIGNATURE_HEADER} header")
        if not signing.verify(body, header, secret.reveal()):
            return _error(401, "AUTH_BAD_SIGNATURE", "the signature does not match the body")
        stamp = _header_text(headers.get(signing.TIMESTAMP_HEADER))
        if stamp is not None or sig.require_timestamp:
            problem = signing.check_timestamp(stamp, self.tolerance)
            if problem is not None:
                return _error(
                    401,
                    f"AUTH_TIMESTAMP_{problem.upper()}",
                    f"{signing.TIMESTAMP_HEADER} is {problem} "
                    f"(tolerance {sig.timestamp_tolerance})",
                )
        event_id = _header_text(headers.get(signing.EVENT_ID_HEADER))
        if sig.require_event_id and not event_id:
            return _error(401, "AUTH_MISSING_EVENT_ID", f"missing {signing.EVENT_ID_HEADER}")
        return None

    def replay_key(self, headers: Headers, body: bytes) -> tuple[str | None, Response | None]:
        """The key replays are recognised by: the event id inside the signed body (``id``,
        ``batch_id``), else the body's digest; a header id contradicting a single event's
        signed id is refused."""
        if self.journal is None:
            return None, None
        signed = signing.signed_event_id(body)
        header = _header_text(headers.get(signing.EVENT_ID_HEADER))
        if signed is not None and header and header != signed:
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and "events" not in doc:
                return None, _error(
                    401,
                    "AUTH_EVENT_ID_MISMATCH",
                    f"{signing.EVENT_ID_HEADER} differs from the signed event id",
                )
        if signed is not None:
            return "id:" + signed, None
        return "sha256:" + hashlib.sha256(body).hexdigest(), None


class Receiver:
    """Everything but HTTP parsing: endpoints, landing, metrics, limits."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        cfg = settings.config
        self.zone = LandingZone(settings.landing)
        removed = self.zone.prepare(
            [ep.config.subdir for ep in settings.endpoints.values()]
            + [ep.config.subdir for ep in settings.grpc_endpoints.values()]
        )
        if removed:
            log.info("removed %d temp file(s) left by an earlier crash", removed)
        self.endpoints = {p: Endpoint(rt, self.zone) for p, rt in settings.endpoints.items()}
        self.max_body = cfg.max_body_bytes
        self.max_in_flight = cfg.max_in_flight
        self.retry_after = str(cfg.retry_after_seconds)
        self.body_timeout = float(cfg.body_timeout_seconds)
        self.in_flight = 0
        self.metrics = Metrics(lambda: self.in_flight)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.started = time.time()
        # hook for tests: how a body is landed
        self.land: Callable[[str, bytes], Path] = self.zone.land

    def __repr__(self) -> str:
        return f"Receiver(landing={str(self.settings.landing)!r}, endpoints={list(self.endpoints)})"

    # ------------------------------------------------------------------ limits

    @contextlib.contextmanager
    def slot(self) -> Iterator[bool]:
        """Take an in-flight slot (``True``) or say the receiver is full (``False``)."""
        with self._lock:
            if self.in_flight >= self.max_in_flight:
                got = False
            else:
                self.in_flight += 1
                got = True
        try:
            yield got
        finally:
            if got:
                with self._lock:
                    self.in_flight -= 1
                    self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight (graceful shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self.in_flight == 0, timeout)

    def busy(self, code: str, message: str, retry_after: str | None = None) -> Response:
        return _error(
            503, code, message, headers={"Retry-After": retry_after or self.retry_after}, close=True
        )

    # ------------------------------------------------------------------ requests

    def get(self, path: str, accept: str | None = None) -> tuple[int, bytes, str]:
        """Answer a GET: ``/healthz``, ``/metrics`` (``accept``: the request's ``Accept``)."""
        if path == "/healthz":
            ok = os.access(self.zone.root, os.W_OK)
            doc = {
                "status": "ok" if ok else "landing zone not writable",
                "in_flight": self.in_flight,
                "uptime_seconds": round(time.time() - self.started, 3),
                "endpoints": sorted(self.endpoints),
            }
            return (200 if ok else 503), orjson.dumps(doc), "application/json"
        if path == "/metrics":
            payload, content_type = self.metrics.exposition(accept)
            return 200, payload, content_type
        return 404, orjson.dumps({"status": "error", "code": "NOT_FOUND"}), "application/json"

    def post(self, endpoint: Endpoint, headers: Headers, body: bytes, remote: str) -> Response:
        """Handle one POST to a configured endpoint whose headers passed
        :meth:`Endpoint.authenticate_headers` and whose body was read (the caller holds an
        in-flight slot)."""
        denied = endpoint.authenticate_body(headers, body)
        if denied is not None:
            return denied
        key, denied = endpoint.replay_key(headers, body)
        if denied is not None:
            return denied
        if key is not None:
            assert endpoint.journal is not None
            state = endpoint.journal.claim(key)
            if state == "duplicate":
                self.metrics.duplicate(endpoint.path)
                return Response(200, {"status": "duplicate"})
            if state == "busy":
                return self.busy("IN_PROGRESS", "the same event is being landed now", "1")
        try:
            response = self._decode_and_land(endpoint, headers, body, remote)
        except BaseException:
            if key is not None:
                assert endpoint.journal is not None
                endpoint.journal.release(key)
            raise
        if key is not None:
            assert endpoint.journal is not None
            if response.status == 200:
                endpoint.journal.commit(key)
            else:
                endpoint.journal.release(key)
        return response

    def _decode_and_land(
        self, endpoint: Endpoint, headers: Headers, body: bytes, remote: str
    ) -> Response:
        if not body.strip(b" \t\r\n"):
            return self._reject(endpoint, headers, body, "EMPTY_BODY", "the body is empty", remote)
        data = landed_form(headers, body)
        # one message at a time: memory stays proportional to the body
        framed = endpoint.decoder.frame(data, None)
        first = next(framed, None)
        if first is None or (isinstance(first, Unreadable) and first.code == "EMPTY_FILE"):
            return self._reject(
                endpoint, headers, body, "EMPTY_BODY", "no message in the body", remote
            )
        second = next(framed, None)
        several = second is not None
        messages = itertools.chain([first], [second] if second is not None else [], framed)
        events = 0
        item_rejections = 0
        policy = endpoint.runtime.config.item_rejections
        for msg in messages:
            out = endpoint.decoder.decode(msg)
            msg = out.message
            events += len(out.events) + len(out.segments)
            for rej in out.rejections:
                if rej.item is not None and policy == "land":
                    item_rejections += 1
                    continue
                where = ""
                if several:
                    where = f" (element {msg.index})" if msg.index is not None else ""
                    where = where or f" (line {msg.line})"
                if rej.item is not None:
                    where += f" (item {rej.item})"
                return self._reject(endpoint, headers, body, rej.code, rej.message + where, remote)
        try:
            path = self.land(endpoint.subdir, data)
        except DiskFull:
            log.error("landing zone disk full; answering 503")
            return self.busy("DISK_FULL", "the landing zone's disk is full")
        except OSError as e:
            log.error("could not land a body: %s", e.strerror or type(e).__name__)
            return _error(500, "LANDING_FAILED", "the body could not be written; retry")
        self.metrics.accepted(endpoint.path, len(body), events)
        log.debug("landed %s (%d events) from %s", path.name, events, remote)
        doc: dict[str, Any] = {"status": "accepted", "events": events, "file": path.name}
        if item_rejections:
            doc["rejected_items"] = item_rejections
        return Response(200, doc)

    def _reject(
        self,
        endpoint: Endpoint,
        headers: Headers,
        body: bytes,
        code: str,
        message: str,
        remote: str,
    ) -> Response:
        reason = {
            "code": code,
            "message": message[:2000],
            "endpoint": endpoint.path,
            "dialect": endpoint.runtime.config.dialect,
            "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "remote": remote,
            "bytes": len(body),
            "headers": {
                k.lower(): v
                for k, v in headers.items()
                if k.lower() in _KEPT_HEADERS or k.lower().startswith(_CE_HEADER)
            },
        }
        try:
            self.zone.reject(endpoint.subdir, body, reason)
        except (OSError, DiskFull) as e:
            log.error("could not keep a rejected body: %s", e)
        log.info("rejected a body on %s: [%s] %s", endpoint.path, code, message[:200])
        return _error(400, code, message[:2000])


def landed_form(headers: Mapping[str, str], body: bytes) -> bytes:
    """What lands for a body: the body itself, or — CloudEvents binary mode (``ce-*``
    headers) — a Kafka-record-shaped JSON document ``{"headers": {"ce_…": …}, "value": body}``
    so the attributes travel with the data (``value_base64`` when the body is not UTF-8)."""
    attrs: dict[str, str] = {}
    content_type: str | None = None
    for k, v in headers.items():
        name = k.lower()
        if name.startswith(_CE_HEADER) and len(name) > len(_CE_HEADER):
            attrs["ce_" + name[len(_CE_HEADER) :]] = _header_text(v) or ""
        elif name == "content-type":
            content_type = v
    if "ce_specversion" not in attrs:
        return body
    if content_type and "ce_datacontenttype" not in attrs:
        attrs["ce_datacontenttype"] = content_type
    record: dict[str, Any] = {"headers": attrs}
    try:
        record["value"] = body.decode("utf-8")
    except UnicodeDecodeError:
        import base64

        record["value_base64"] = base64.b64encode(body).decode("ascii")
    return orjson.dumps(record)


class Headers(Mapping[str, str]):
    """A request's headers: names without case, values as ISO-8859-1 text (the bytes sent,
    one character each); the first of a repeated header."""

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]
        self._first: dict[str, str] = {}
        for k, v in self._pairs:
            self._first.setdefault(k, v)

    def __getitem__(self, name: str) -> str:
        return self._first[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def __repr__(self) -> str:
        return f"Headers({sorted(self._first)})"


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
            resp = _error(404, "NOT_FOUND", "no endpoint at this path", close=True)
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
                    resp = _error(
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
            return _error(
                413, "BODY_TOO_LARGE", f"the body is over {receiver.max_body} bytes", close=True
            )
        except BadFraming as e:
            return _error(400, "BAD_FRAMING", str(e), close=True)
        except BodyTimeout:
            return _error(
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
            if length > limit + _DRAIN_LIMIT:
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
            if total > limit + _DRAIN_LIMIT:
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
