"""The gRPC endpoint of ``cdcflow serve``: ``CDCEvent`` messages in, landed durably, then answered.

The service is ``cdcflow.receiver.v1.Receiver`` (``cdcflow/proto/receiver.proto``): ``Stream``
takes a client stream of ``CDCEvent`` messages, ``Send`` an ``EventBatch``; both answer
``Ack{accepted, file}``. It shares the HTTP receiver's :class:`~cdcflow.serve.receiver.Receiver`:
its landing zone, its in-flight slots (``max_in_flight`` counts HTTP requests and gRPC calls
together), ``max_body_size`` (the bytes of one call), ``body_timeout`` and its metrics.

Per call, in order:

1. the endpoint named by the ``cdcflow-endpoint`` metadata (optional with one endpoint), else
   ``NOT_FOUND``; its bearer token (``authorization: Bearer …``), else ``UNAUTHENTICATED``,
   before any message is read;
2. an in-flight slot, else ``UNAVAILABLE`` (``OVERLOADED``);
3. each message as it arrives: over the endpoint's ``max_message_bytes`` or the call over
   ``max_body_size`` → ``RESOURCE_EXHAUSTED``; a message the ``savegress`` decoder rejects →
   ``INVALID_ARGUMENT`` naming its index (the message is kept under ``_rejected/``);
4. when the client has sent everything: the messages land together, length-delimited, in one
   ``.pb`` file (temp file, fsync, rename, folder fsync); disk full → ``UNAVAILABLE``;
5. only then ``Ack``.

A call is all or nothing: a refusal, a client that goes away, or a call not finished within
``body_timeout`` (cancelled) lands none of its messages. Refusals carry trailing metadata
``cdcflow-code`` (the error code) and, for a message, ``cdcflow-index``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.model import DialectOptions
from cdcflow.errors import DecodeError
from cdcflow.proto import receiver_pb2
from cdcflow.serve.config import GrpcConfig, GrpcEndpointRuntime
from cdcflow.serve.landing import DiskFull, Withdrawn
from cdcflow.serve.receiver import Receiver, bearer_matches
from cdcflow.transports.message import RawMessage
from cdcflow.transports.protobuf import read_varint, write_delimited

log = logging.getLogger("cdcflow.serve")

#: The service's full name, as ``receiver.proto`` declares it.
SERVICE = receiver_pb2.DESCRIPTOR.services_by_name["Receiver"].full_name
#: Metadata key naming the endpoint of a call.
ENDPOINT_KEY = "cdcflow-endpoint"
#: Room for an ``EventBatch``'s own framing beyond ``max_body_size``.
_FRAMING_SLACK = 64 * 1024


class Refused(Exception):
    """A call answered with an error status (never an exception of the receiver itself)."""

    def __init__(
        self, status: grpc.StatusCode, code: str, message: str, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.index = index

    @property
    def details(self) -> str:
        return f"[{self.code}] {self.message}"


def split_batch(data: bytes) -> list[bytes]:
    """The serialized ``CDCEvent`` messages of a serialized ``EventBatch`` (field 1), as sent;
    other fields are skipped as protobuf readers do. ``CORRUPT_PROTOBUF`` when the batch's own
    framing does not hold."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = read_varint(data, pos)
            continue
        if wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise DecodeError(
                    f"EventBatch field {field} claims {size} bytes but only "
                    f"{len(data) - pos} remain",
                    code="CORRUPT_PROTOBUF",
                )
            if field == 1:
                out.append(data[pos : pos + size])
            pos += size
        else:
            raise DecodeError(
                f"EventBatch holds a field of wire type {wire}", code="CORRUPT_PROTOBUF"
            )
        if pos > len(data):
            raise DecodeError("EventBatch ends inside a field", code="CORRUPT_PROTOBUF")
    return out


class GrpcEndpoint:
    """One gRPC endpoint: its landing folder, decoder (``savegress``) and token."""

    def __init__(self, runtime: GrpcEndpointRuntime) -> None:
        self.runtime = runtime
        cfg = runtime.config
        self.name = cfg.name
        self.subdir = cfg.subdir
        self.label = f"grpc:{cfg.name}"
        self.decoder = Decoder(
            "savegress",
            DialectOptions(
                table_keys={t: tuple(k) for t, k in cfg.keys.items()},
                column_types=cfg.types,
                extra=cfg.options,
            ),
        )
        self.max_message = self.decoder.limits.max_message_bytes

    def __repr__(self) -> str:
        return f"GrpcEndpoint({self.runtime!r})"


class _Watch:
    """Cancels a call that is not finished within ``seconds`` (a stalled client must not hold
    an in-flight slot)."""

    def __init__(self, context: grpc.ServicerContext, seconds: float) -> None:
        self._context = context
        self._lock = threading.Lock()
        self._done = False
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
        self._context.cancel()

    def finish(self) -> bool:
        """Stop watching; ``False`` when the call was already cancelled for its time."""
        self._timer.cancel()
        with self._lock:
            self._done = True
            return not self.fired


class GrpcReceiver:
    """The service's two methods over a :class:`Receiver`."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.endpoints = {
            name: GrpcEndpoint(rt) for name, rt in receiver.settings.grpc_endpoints.items()
        }

    def __repr__(self) -> str:
        return f"GrpcReceiver(endpoints={list(self.endpoints)})"

    # ------------------------------------------------------------------ the methods

    def stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        """``Stream``: a client stream of serialized ``CDCEvent`` messages."""
        return self._call(context, lambda: requests)

    def send(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """``Send``: one serialized ``EventBatch``."""

        def messages() -> Iterable[bytes]:
            try:
                return split_batch(request)
            except DecodeError as e:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, e.code, f"not an EventBatch: {e.message}"
                ) from None

        return self._call(context, messages)

    # ------------------------------------------------------------------ one call

    def _call(
        self, context: grpc.ServicerContext, messages: Callable[[], Iterable[bytes]]
    ) -> bytes:
        receiver = self.receiver
        started = time.perf_counter()
        label = "-"
        status = "OK"
        reason: str | None = None
        try:
            endpoint = self._endpoint(context)
            label = endpoint.label
            self._authenticate(endpoint, context)
            with receiver.slot() as got:
                if not got:
                    raise Refused(
                        grpc.StatusCode.UNAVAILABLE,
                        "OVERLOADED",
                        f"too many calls in flight; retry in {receiver.retry_after}s",
                    )
                watch = _Watch(context, receiver.body_timeout)
                try:
                    parts, events = self._take(endpoint, messages(), context)
                finally:
                    in_time = watch.finish()
                if not in_time or not context.is_active():
                    raise grpc.RpcError("the call was cancelled")
                ack = self._land(endpoint, parts, events, context)
            return ack.SerializeToString()
        except Refused as r:
            status, reason = r.status.name, r.code
            metadata: list[tuple[str, str]] = [("cdcflow-code", r.code)]
            if r.index is not None:
                metadata.append(("cdcflow-index", str(r.index)))
            context.set_trailing_metadata(tuple(metadata))
            context.abort(r.status, r.details)
            raise  # abort raises; never reached
        except grpc.RpcError:
            # the client went away, or the call ran over body_timeout: nothing was landed
            status, reason = "CANCELLED", "CANCELLED"
            raise
        except Exception as e:  # never leak internals; never acknowledge
            if not context.is_active():
                status, reason = "CANCELLED", "CANCELLED"
                raise
            log.exception("unexpected error on gRPC endpoint %s: %s", label, type(e).__name__)
            status, reason = "INTERNAL", "INTERNAL"
            context.set_trailing_metadata((("cdcflow-code", "INTERNAL"),))
            context.abort(grpc.StatusCode.INTERNAL, "[INTERNAL] internal error; nothing landed")
            raise
        finally:
            receiver.metrics.observe(label, status, time.perf_counter() - started, reason)

    def _endpoint(self, context: grpc.ServicerContext) -> GrpcEndpoint:
        names = [v for k, v in context.invocation_metadata() if k == ENDPOINT_KEY]
        if not names and len(self.endpoints) == 1:
            return next(iter(self.endpoints.values()))
        name = names[0] if len(names) == 1 else None
        found = self.endpoints.get(name) if isinstance(name, str) else None
        if found is None:
            raise Refused(
                grpc.StatusCode.NOT_FOUND,
                "NO_ENDPOINT",
                f"name one gRPC endpoint in the {ENDPOINT_KEY} metadata "
                f"(this receiver has: {', '.join(sorted(self.endpoints))})",
            )
        return found

    def _authenticate(self, endpoint: GrpcEndpoint, context: grpc.ServicerContext) -> None:
        token = endpoint.runtime.bearer_token
        if token is None:
            return
        given = [v for k, v in context.invocation_metadata() if k == "authorization"]
        value = given[0] if len(given) == 1 and isinstance(given[0], str) else None
        if not bearer_matches(value, token):
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED,
                "AUTH_MISSING" if not given else "AUTH_BAD_TOKEN",
                "a valid bearer token is required (authorization: Bearer <token>)",
            )

    def _take(
        self, endpoint: GrpcEndpoint, messages: Iterable[bytes], context: grpc.ServicerContext
    ) -> tuple[list[bytes], int]:
        """Every message of the call, each checked and decoded as it arrives."""
        limit = self.receiver.max_body
        parts: list[bytes] = []
        total = 0
        events = 0
        for index, raw in enumerate(messages):
            if len(raw) > endpoint.max_message:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "MESSAGE_TOO_LARGE",
                    f"message {index} of {len(raw)} bytes is over the limit of "
                    f"{endpoint.max_message} bytes (max_message_bytes); nothing was landed",
                    index,
                )
            # as landed: the message and its varint length prefix
            total += len(raw) + max(1, (len(raw).bit_length() + 6) // 7)
            if total > limit:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "CALL_TOO_LARGE",
                    f"the call is over {limit} bytes (max_body_size) at message {index}; "
                    "nothing was landed: send fewer messages per call",
                    index,
                )
            out = endpoint.decoder.decode(
                RawMessage(data=raw, origin=None, offset=index, form="protobuf")
            )
            if out.rejections:
                rej = out.rejections[0]
                self._keep_rejected(endpoint, raw, rej.code, rej.message, index, context)
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    rej.code,
                    f"message {index}: {rej.message[:2000]}; nothing of this call was landed",
                    index,
                )
            events += len(out.events) + len(out.segments)
            parts.append(raw)
        return parts, events

    def _keep_rejected(
        self,
        endpoint: GrpcEndpoint,
        raw: bytes,
        code: str,
        message: str,
        index: int,
        context: grpc.ServicerContext,
    ) -> None:
        reason = {
            "code": code,
            "message": message[:2000],
            "endpoint": endpoint.label,
            "dialect": "savegress",
            "index": index,
            "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "remote": context.peer(),
            "bytes": len(raw),
        }
        try:
            self.receiver.zone.reject(endpoint.subdir, raw, reason)
        except (OSError, DiskFull) as e:
            log.error("could not keep a rejected message: %s", e)
        log.info("rejected a gRPC call on %s: [%s] %s", endpoint.label, code, message[:200])

    def _land(
        self,
        endpoint: GrpcEndpoint,
        parts: list[bytes],
        events: int,
        context: grpc.ServicerContext,
    ) -> receiver_pb2.Ack:
        if not parts:
            return receiver_pb2.Ack(accepted=0, file="")
        data = write_delimited(parts)
        try:
            # a client that went away mid-stream can look like one that closed its stream: its
            # cancellation may arrive just after; it is looked for once the data is on disk
            path = self.receiver.zone.land(endpoint.subdir, data, ".pb", context.is_active)
        except Withdrawn:
            raise grpc.RpcError("the call was cancelled") from None
        except DiskFull:
            log.error("landing zone disk full; answering UNAVAILABLE")
            raise Refused(
                grpc.StatusCode.UNAVAILABLE,
                "DISK_FULL",
                f"the landing zone's disk is full; retry in {self.receiver.retry_after}s",
            ) from None
        except OSError as e:
            log.error("could not land a gRPC call: %s", e.strerror or type(e).__name__)
            raise Refused(
                grpc.StatusCode.INTERNAL,
                "LANDING_FAILED",
                "the messages could not be written; retry",
            ) from None
        self.receiver.metrics.accepted(endpoint.label, len(data), events)
        log.debug("landed %s (%d messages) from %s", path.name, len(parts), context.peer())
        return receiver_pb2.Ack(accepted=len(parts), file=path.name)


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


class GrpcServer:
    """The gRPC server of a :class:`Receiver` (bound by the constructor; :meth:`start`)."""

    def __init__(self, receiver: Receiver, config: GrpcConfig) -> None:
        self.service = GrpcReceiver(receiver)
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                # no deserializers: the methods see each message's bytes as sent
                "Stream": grpc.stream_unary_rpc_method_handler(self.service.stream),
                "Send": grpc.unary_unary_rpc_method_handler(self.service.send),
            },
        )
        # threads beyond max_in_flight answer the calls over it at once with UNAVAILABLE
        workers = receiver.max_in_flight + 8
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cdcflow-grpc"),
            handlers=[handler],
            options=[
                ("grpc.max_receive_message_length", receiver.max_body + _FRAMING_SLACK),
                ("grpc.so_reuseport", 0),
            ],
        )
        host = config.listen.host
        address = (
            f"[{host}]:{config.listen.port}" if ":" in host else f"{host}:{config.listen.port}"
        )
        tls = config.tls
        self.tls = tls is not None
        if tls is None:
            self.port = self._server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes())],
                root_certificates=_read(tls.client_ca_file),
                require_client_auth=tls.client_ca_file is not None,
            )
            self.port = self._server.add_secure_port(address, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        self.host = host

    def __repr__(self) -> str:
        return f"GrpcServer({self.url!r})"

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'grpcs' if self.tls else 'grpc'}://{shown}:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float | None) -> threading.Event:
        """Refuse new calls at once; calls in flight get ``grace`` seconds to finish (then are
        cancelled). The event is set when all are done."""
        return self._server.stop(grace)


def make_grpc_server(receiver: Receiver) -> GrpcServer | None:
    """The bound (not yet started) gRPC server of a receiver, when it has a ``grpc`` section."""
    config = receiver.settings.config.grpc
    return GrpcServer(receiver, config) if config is not None else None
