"""The receiver's core, whatever carries the request (HTTP here, gRPC in
:mod:`cdcflow.serve.grpc_server`): authenticate, decode with the endpoint's dialect exactly as the
pipeline will, land durably, then answer; its metrics; the request's headers as one
case-insensitive mapping.

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

import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from cdcflow import signing
from cdcflow.config_base import parse_duration
from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.model import DialectOptions
from cdcflow.secrets import Secret
from cdcflow.serve.config import EndpointRuntime, Settings
from cdcflow.serve.landing import DiskFull, LandingZone, ReplayJournal
from cdcflow.transports.message import Unreadable

log = logging.getLogger("cdcflow.serve")


_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CE_HEADER = "ce-"
DRAIN_LIMIT = 1024 * 1024
KEPT_HEADERS = ("content-type", "x-savegress-event-id", "x-savegress-timestamp")


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


def refusal(status: int, code: str, message: str, **extra: Any) -> Response:
    """An error answer with its code and message."""
    return Response(status, {"status": "error", "code": code, "message": message}, **extra)


def header_text(value: str | None) -> str | None:
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
            return refusal(
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
        header = header_text(headers.get(signing.SIGNATURE_HEADER))
        if header is None:
            return refusal(401, "AUTH_MISSING", f"missing {signing.SIGNATURE_HEADER} header")
        if not signing.verify(body, header, secret.reveal()):
            return refusal(401, "AUTH_BAD_SIGNATURE", "the signature does not match the body")
        stamp = header_text(headers.get(signing.TIMESTAMP_HEADER))
        if stamp is not None or sig.require_timestamp:
            problem = signing.check_timestamp(stamp, self.tolerance)
            if problem is not None:
                return refusal(
                    401,
                    f"AUTH_TIMESTAMP_{problem.upper()}",
                    f"{signing.TIMESTAMP_HEADER} is {problem} "
                    f"(tolerance {sig.timestamp_tolerance})",
                )
        event_id = header_text(headers.get(signing.EVENT_ID_HEADER))
        if sig.require_event_id and not event_id:
            return refusal(401, "AUTH_MISSING_EVENT_ID", f"missing {signing.EVENT_ID_HEADER}")
        return None

    def replay_key(self, headers: Headers, body: bytes) -> tuple[str | None, Response | None]:
        """The key replays are recognised by: the event id inside the signed body (``id``,
        ``batch_id``), else the body's digest; a header id contradicting a single event's
        signed id is refused."""
        if self.journal is None:
            return None, None
        signed = signing.signed_event_id(body)
        header = header_text(headers.get(signing.EVENT_ID_HEADER))
        if signed is not None and header and header != signed:
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and "events" not in doc:
                return None, refusal(
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
        return refusal(
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
            return refusal(500, "LANDING_FAILED", "the body could not be written; retry")
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
                if k.lower() in KEPT_HEADERS or k.lower().startswith(CE_HEADER)
            },
        }
        try:
            self.zone.reject(endpoint.subdir, body, reason)
        except (OSError, DiskFull) as e:
            log.error("could not keep a rejected body: %s", e)
        log.info("rejected a body on %s: [%s] %s", endpoint.path, code, message[:200])
        return refusal(400, code, message[:2000])


def landed_form(headers: Mapping[str, str], body: bytes) -> bytes:
    """What lands for a body: the body itself, or — CloudEvents binary mode (``ce-*``
    headers) — a Kafka-record-shaped JSON document ``{"headers": {"ce_…": …}, "value": body}``
    so the attributes travel with the data (``value_base64`` when the body is not UTF-8)."""
    attrs: dict[str, str] = {}
    content_type: str | None = None
    for k, v in headers.items():
        name = k.lower()
        if name.startswith(CE_HEADER) and len(name) > len(CE_HEADER):
            attrs["ce_" + name[len(CE_HEADER) :]] = header_text(v) or ""
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
