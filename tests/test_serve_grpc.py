"""`cdcflow serve`'s gRPC endpoint, with a real gRPC client over loopback: streams and batches
land durably and decode as the pipeline reads them; a call is all or nothing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.savegress.proto import event_to_proto
from cdcflow.errors import ConfigError, DecodeError
from cdcflow.proto import receiver_pb2, receiver_pb2_grpc
from cdcflow.proto import savegress_pb2 as pb
from cdcflow.serve import landing as landing_mod
from cdcflow.serve.config import load_serve_config
from cdcflow.serve.grpc_server import GrpcServer, make_grpc_server, split_batch
from cdcflow.serve.server import ReceiverServer, make_server
from cdcflow.transports.protobuf import split_delimited
from tests.test_serve import _FullDisk, _self_signed

TOKEN = "grpc-tok-5f1e0c9a"
STREAM = "/cdcflow.receiver.v1.Receiver/Stream"
SEND = "/cdcflow.receiver.v1.Receiver/Send"


def event(i: int, table: str = "users") -> pb.CDCEvent:
    doc = {
        "id": f"evt-{i}",
        "source": "postgres",
        "schema": "public",
        "table": table,
        "operation": "INSERT",
        "timestamp": "2025-01-15T10:30:00Z",
        "position": {"lsn": f"0/{0x1000 + i:X}", "sequence": 0},
        "after": {"id": i, "name": f"n{i}"},
    }
    return pb.CDCEvent.FromString(event_to_proto(doc))


def grpc_config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "landing": str(tmp_path / "landing"),
        "max_body_size": "64KiB",
        "max_in_flight": 16,
        "retry_after": "7s",
        "endpoints": [{"path": "/events", "dialect": "savegress", "landing": "savegress"}],
        "grpc": {
            "listen": {"host": "127.0.0.1", "port": 0},
            "endpoints": [
                {
                    "name": "events",
                    "landing": "savegress",
                    "auth": {"bearer": {"token": {"env": "TEST_GRPC_TOKEN"}}},
                    "options": {"limits": {"max_message_bytes": 4096}},
                },
                {"name": "open", "landing": "open"},
            ],
        },
    }
    cfg.update(overrides)
    return cfg


@dataclass
class Served:
    http: ReceiverServer
    grpc: GrpcServer
    landing: Path
    channel: grpc.Channel

    @property
    def stub(self) -> receiver_pb2_grpc.ReceiverStub:
        return receiver_pb2_grpc.ReceiverStub(self.channel)

    def raw_stream(self) -> Callable[..., Any]:
        """``Stream`` taking each message's bytes as they are (no serializer)."""
        return self.channel.stream_unary(STREAM, response_deserializer=receiver_pb2.Ack.FromString)

    def raw_send(self) -> Callable[..., Any]:
        return self.channel.unary_unary(SEND, response_deserializer=receiver_pb2.Ack.FromString)

    def landed(self, sub: str = "savegress") -> list[Path]:
        d = self.landing / sub
        return sorted(p for p in d.iterdir() if p.is_file()) if d.exists() else []

    def rejected(self, sub: str = "savegress") -> list[Path]:
        d = self.landing / "_rejected" / sub
        return sorted(d.iterdir()) if d.exists() else []

    def metrics(self) -> str:
        return generate_latest(self.http.receiver.metrics.registry).decode()


AUTH = (("authorization", f"Bearer {TOKEN}"), ("cdcflow-endpoint", "events"))


def serve(tmp_path: Path, cfg: dict[str, Any]) -> Served:
    settings = load_serve_config(cfg, "(test)", tmp_path)
    http = make_server(settings)
    server = make_grpc_server(http.receiver)
    assert server is not None
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    return Served(http, server, tmp_path / "landing", channel)


def close(s: Served) -> None:
    s.channel.close()
    s.grpc.stop(0).wait(10)
    s.http.server_close()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)
    s = serve(tmp_path, grpc_config(tmp_path))
    try:
        yield s
    finally:
        close(s)


def ids_of(files: list[Path]) -> list[str]:
    """Event ids of landed files, read as the pipeline reads them; fails on any rejection."""
    out: list[str] = []
    for p in files:
        for o in Decoder("savegress").decode_file(p.read_bytes(), p.name):
            assert not o.rejections, o.rejections
            out.extend(e["id"] for e in o.events)
    return out


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value


def trailer(err: grpc.RpcError, key: str) -> str | None:
    found = [m.value for m in err.trailing_metadata() or () if m.key == key]
    return found[0] if found else None


# ---------------------------------------------------------------------- accepted calls


def test_stream_and_batch_land_whole_and_read_as_the_pipeline_reads(served: Served) -> None:
    ack = served.stub.Stream(iter([event(i) for i in range(5)]), metadata=AUTH)
    assert ack.accepted == 5
    [first] = served.landed()
    assert ack.file == first.name and first.suffix == ".pb"
    # the messages as sent, length-delimited (compared parsed: map entries have no order)
    landed = [pb.CDCEvent.FromString(m) for _, m in split_delimited(first.read_bytes())]
    assert landed == [event(i) for i in range(5)]
    ack = served.stub.Send(receiver_pb2.EventBatch(events=[event(5), event(6)]), metadata=AUTH)
    assert ack.accepted == 2
    assert ids_of(served.landed()) == [f"evt-{i}" for i in range(7)]
    # an empty call lands nothing and says so
    assert served.stub.Stream(iter([]), metadata=AUTH) == receiver_pb2.Ack(accepted=0, file="")
    # one endpoint without a token; the endpoint is named in the metadata
    ack = served.stub.Stream(iter([event(9)]), metadata=(("cdcflow-endpoint", "open"),))
    assert ack.accepted == 1 and [p.name for p in served.landed("open")] == [ack.file]
    text = served.metrics()
    assert 'cdcflow_serve_requests_total{endpoint="grpc:events",status="OK"} 3.0' in text
    assert 'cdcflow_serve_events_total{endpoint="grpc:events"} 7.0' in text
    assert 'cdcflow_serve_files_total{endpoint="grpc:events"} 2.0' in text


def test_eight_concurrent_streams(served: Served) -> None:
    acks: list[receiver_pb2.Ack] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def client(k: int) -> None:
        def messages() -> Iterator[pb.CDCEvent]:
            barrier.wait(10)
            for i in range(100):
                yield event(k * 1000 + i)

        try:
            ack = served.stub.Stream(messages(), metadata=AUTH, timeout=30)
        except grpc.RpcError as e:
            with lock:
                errors.append(e)
            return
        with lock:
            acks.append(ack)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(a.accepted for a in acks) == [100] * 8
    assert sorted(a.file for a in acks) == [p.name for p in served.landed()]
    want = sorted(f"evt-{k * 1000 + i}" for k in range(8) for i in range(100))
    assert sorted(ids_of(served.landed())) == want


# ---------------------------------------------------------------------- refused calls


def test_bad_token_is_unauthenticated_before_any_message_is_read(served: Served) -> None:
    pulled: list[int] = []

    def messages() -> Iterator[pb.CDCEvent]:
        for i in range(3):
            pulled.append(i)
            yield event(i)

    for metadata, code in (
        ((("cdcflow-endpoint", "events"),), "AUTH_MISSING"),
        ((("cdcflow-endpoint", "events"), ("authorization", "Bearer wrong")), "AUTH_BAD_TOKEN"),
        ((("cdcflow-endpoint", "events"), ("authorization", TOKEN)), "AUTH_BAD_TOKEN"),
    ):
        err = refused(lambda m=metadata: served.stub.Stream(messages(), metadata=m))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        assert trailer(err, "cdcflow-code") == code
        err = refused(
            lambda m=metadata: served.stub.Send(
                receiver_pb2.EventBatch(events=[event(1)]), metadata=m
            )
        )
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert served.landed() == [] and served.rejected() == []
    # with two endpoints, a call must name one
    err = refused(lambda: served.stub.Stream(iter([event(1)])))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == (
        "[NO_ENDPOINT] name one gRPC endpoint in the cdcflow-endpoint metadata "
        "(this receiver has: events, open)"
    )
    assert 'reason="AUTH_BAD_TOKEN"' in served.metrics()


def test_malformed_message_names_its_index_and_nothing_of_the_call_lands(
    served: Served,
) -> None:
    good = [event(i).SerializeToString() for i in range(3)]
    for bad, code in ((b"\xff\xff\xff", "CORRUPT_PROTOBUF"), (b"", "MISSING_OPERATION")):
        err = refused(lambda b=bad: served.raw_stream()(iter([*good, b, good[0]]), metadata=AUTH))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert trailer(err, "cdcflow-code") == code
        assert trailer(err, "cdcflow-index") == "3"
        assert err.details().startswith(f"[{code}] message 3: ")
        assert err.details().endswith("; nothing of this call was landed")
    assert served.landed() == []
    # the bad message is kept with its reason, as a rejected webhook body is
    assert len(served.rejected()) == 4
    # a batch: its index in the batch; a batch whose own framing is broken
    batch = receiver_pb2.EventBatch(events=[event(1), pb.CDCEvent(id="x")]).SerializeToString()
    err = refused(lambda: served.raw_send()(batch, metadata=AUTH))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailer(err, "cdcflow-index") == "1"
    err = refused(lambda: served.raw_send()(b"\x0a\x50abc", metadata=AUTH))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailer(err, "cdcflow-code") == "CORRUPT_PROTOBUF"
    assert served.landed() == []


def test_split_batch_takes_field_one_as_sent_and_skips_others() -> None:
    # deterministic: a map field's entries are otherwise written in any order
    a, b = (event(n).SerializeToString(deterministic=True) for n in (1, 2))
    batch = receiver_pb2.EventBatch(events=[event(1), event(2)])
    data = batch.SerializeToString(deterministic=True)
    assert split_batch(data) == [a, b]
    # unknown fields of every wire type are skipped, as protobuf readers do
    extra = b"\x10\x96\x01" + b"\x19" + b"\0" * 8 + b"\x25" + b"\0" * 4 + b"\x2a\x02hi"
    assert split_batch(extra + data) == [a, b]
    assert split_batch(b"") == []
    for broken in (b"\x0a", b"\x0a\x05ab", b"\x0b", b"\x19\0"):
        with pytest.raises(DecodeError) as e:
            split_batch(broken)
        assert e.value.code == "CORRUPT_PROTOBUF"


def test_oversize_message_and_call_are_resource_exhausted(served: Served) -> None:
    big = pb.CDCEvent.FromString(event(1).SerializeToString())
    big.metadata["pad"] = "x" * 5000
    err = refused(lambda: served.stub.Stream(iter([event(0), big]), metadata=AUTH))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert trailer(err, "cdcflow-code") == "MESSAGE_TOO_LARGE"
    assert trailer(err, "cdcflow-index") == "1"
    assert "over the limit of 4096 bytes (max_message_bytes)" in err.details()
    # many messages, each small, over max_body_size (64 KiB) together
    many = [event(i) for i in range(2000)]
    err = refused(lambda: served.stub.Stream(iter(many), metadata=AUTH))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert trailer(err, "cdcflow-code") == "CALL_TOO_LARGE"
    # a batch over max_body_size is refused by gRPC itself before it is read
    err = refused(lambda: served.stub.Send(receiver_pb2.EventBatch(events=many * 2), metadata=AUTH))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert served.landed() == [] and served.rejected() == []
    # the receiver goes on
    assert served.stub.Stream(iter([event(7)]), metadata=AUTH).accepted == 1


def test_disk_full_is_unavailable_and_leaves_nothing(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landing_mod, "os", _FullDisk())
    err = refused(lambda: served.stub.Stream(iter([event(1), event(2)]), metadata=AUTH))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert err.details() == "[DISK_FULL] the landing zone's disk is full; retry in 7s"
    assert list((served.landing / "savegress").iterdir()) == []
    monkeypatch.undo()
    assert served.stub.Stream(iter([event(1), event(2)]), metadata=AUTH).accepted == 2


def test_client_disconnecting_mid_stream_lands_nothing(served: Served) -> None:
    sent, release = threading.Event(), threading.Event()

    def messages() -> Iterator[pb.CDCEvent]:
        for i in range(3):
            yield event(i)
        sent.set()
        release.wait(10)

    receiver = served.http.receiver
    future = served.stub.Stream.future(messages(), metadata=AUTH)
    try:
        assert sent.wait(5)
        deadline = time.monotonic() + 5
        while receiver.in_flight != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert receiver.in_flight == 1
        time.sleep(0.2)  # the three messages reach the server
        future.cancel()
    finally:
        release.set()
    assert receiver.wait_idle(5)
    assert served.landed() == []
    assert [p for p in served.landing.rglob("*") if p.is_file()] == []
    assert 'status="CANCELLED"' in served.metrics()
    assert served.stub.Stream(iter([event(4)]), metadata=AUTH).accepted == 1


def test_overload_is_unavailable_and_a_stalled_call_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)
    s = serve(tmp_path, grpc_config(tmp_path, max_in_flight=1, body_timeout="1s"))
    receiver = s.http.receiver
    stall = threading.Event()

    def stalled() -> Iterator[pb.CDCEvent]:
        yield event(1)
        stall.wait(10)

    try:
        future = s.stub.Stream.future(stalled(), metadata=AUTH)
        deadline = time.monotonic() + 5
        while receiver.in_flight != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        err = refused(lambda: s.stub.Stream(iter([event(2)]), metadata=AUTH))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert err.details() == "[OVERLOADED] too many calls in flight; retry in 7s"
        # the stalled call holds its slot no longer than body_timeout, and lands nothing
        with pytest.raises(grpc.RpcError) as e:
            future.result(timeout=10)
        assert e.value.code() == grpc.StatusCode.CANCELLED
        assert receiver.wait_idle(5)
        assert s.landed() == []
        assert s.stub.Stream(iter([event(3)]), metadata=AUTH).accepted == 1
    finally:
        stall.set()
        close(s)


def test_graceful_stop_finishes_in_flight_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)
    s = serve(tmp_path, grpc_config(tmp_path))
    first, more = threading.Event(), threading.Event()

    def messages() -> Iterator[pb.CDCEvent]:
        yield event(1)
        first.set()
        more.wait(10)
        yield event(2)
        yield event(3)

    try:
        future = s.stub.Stream.future(messages(), metadata=AUTH)
        assert first.wait(5)
        deadline = time.monotonic() + 5
        while s.http.receiver.in_flight != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        done = s.grpc.stop(10)
        # new calls are refused at once (gRPC answers UNAVAILABLE, or CANCELLED for a call
        # that raced the stop into the server); the stream in flight goes on
        err = refused(lambda: s.stub.Stream(iter([event(9)]), metadata=AUTH, timeout=5))
        assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        more.set()
        assert future.result(timeout=10).accepted == 3
        assert done.wait(10)
        assert ids_of(s.landed()) == ["evt-1", "evt-2", "evt-3"]
    finally:
        more.set()
        close(s)


# ---------------------------------------------------------------------- TLS, secrets, config


def test_tls_with_client_certificates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)
    cert, key = _self_signed(tmp_path)
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    client_cert, client_key = _self_signed(client_dir)
    cfg = grpc_config(tmp_path)
    cfg["grpc"]["tls"] = {
        "cert_file": str(cert),
        "key_file": str(key),
        "client_ca_file": str(client_cert),
    }
    s = serve(tmp_path, cfg)
    try:
        assert s.grpc.url.startswith("grpcs://127.0.0.1:")
        target = f"localhost:{s.grpc.port}"
        with grpc.secure_channel(
            target,
            grpc.ssl_channel_credentials(
                root_certificates=cert.read_bytes(),
                private_key=client_key.read_bytes(),
                certificate_chain=client_cert.read_bytes(),
            ),
        ) as channel:
            stub = receiver_pb2_grpc.ReceiverStub(channel)
            assert stub.Stream(iter([event(1)]), metadata=AUTH, timeout=10).accepted == 1
        # without a client certificate, and in plain text: no call gets through
        for channel in (
            grpc.secure_channel(
                target, grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
            ),
            grpc.insecure_channel(f"127.0.0.1:{s.grpc.port}"),
        ):
            with channel:
                err = refused(
                    lambda c=channel: receiver_pb2_grpc.ReceiverStub(c).Stream(
                        iter([event(2)]), metadata=AUTH, timeout=5
                    )
                )
                assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert len(s.landed()) == 1
    finally:
        close(s)


def test_token_never_in_logs_errors_or_repr(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cdcflow")
    errors = [
        refused(
            lambda: served.stub.Stream(
                iter([event(1)]),
                metadata=(("cdcflow-endpoint", "events"), ("authorization", f"Bearer {TOKEN}x")),
            )
        ),
        refused(lambda: served.raw_stream()(iter([b"\xff"]), metadata=AUTH)),
    ]
    served.stub.Stream(iter([event(1)]), metadata=AUTH)
    texts = [
        caplog.text,
        served.metrics(),
        *(repr(e) + e.details() for e in errors),
        repr(served.grpc),
        repr(served.grpc.service),
        repr(list(served.grpc.service.endpoints.values())),
        repr(served.http.receiver.settings),
        repr(list(served.http.receiver.settings.grpc_endpoints.values())),
    ]
    texts += [p.read_text(errors="replace") for p in served.landing.rglob("*.json")]
    for t in texts:
        assert TOKEN not in t


def test_config_errors_name_the_grpc_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)

    def error(cfg: dict[str, Any]) -> str:
        with pytest.raises(ConfigError) as e:
            load_serve_config(cfg, "(t)", tmp_path)
        return str(e.value)

    cfg = grpc_config(tmp_path)
    cfg["grpc"]["endpoints"][0]["path"] = "/x"
    assert "grpc.endpoints.0.path: unknown key" in error(cfg)
    cfg = grpc_config(tmp_path)
    cfg["grpc"]["endpoints"][1]["name"] = "events"
    assert "gRPC endpoint name events is configured twice" in error(cfg)
    cfg = grpc_config(tmp_path)
    cfg["grpc"]["endpoints"][0]["auth"]["bearer"] = {"token": {"env": "NOT_SET_ANYWHERE_XYZ"}}
    assert "grpc.endpoints.0.auth.bearer.token: environment variable NOT_SET_ANYWHERE_XYZ" in error(
        cfg
    )
    cfg = grpc_config(tmp_path)
    cfg["endpoints"] = [{"path": "/crdb", "dialect": "cockroachdb", "landing": "savegress"}]
    assert "one landing folder holds one dialect" in error(cfg)
    cfg = grpc_config(tmp_path)
    cfg["grpc"]["tls"] = {"cert_file": "nope.pem", "key_file": "nope.pem"}
    assert "grpc.tls.cert_file: no file" in error(cfg)
    # a receiver of gRPC calls only
    cfg = grpc_config(tmp_path)
    del cfg["endpoints"]
    assert load_serve_config(cfg, "(t)", tmp_path).endpoints == {}


# ---------------------------------------------------------------------- the real command


@pytest.mark.services
def test_serve_command_finishes_a_stream_in_flight_on_sigterm(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(grpc_config(tmp_path)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "serve", "serve.yaml", "--grpc-port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TEST_GRPC_TOKEN": TOKEN},
    )
    first, more = threading.Event(), threading.Event()

    def messages() -> Iterator[pb.CDCEvent]:
        yield event(1)
        first.set()
        more.wait(20)
        yield event(2)

    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().decode().startswith("listening on http://127.0.0.1:")
        line = proc.stdout.readline().decode().strip()
        assert line.startswith("listening on grpc://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = receiver_pb2_grpc.ReceiverStub(channel)
            assert stub.Stream(iter([event(0)]), metadata=AUTH, timeout=10).accepted == 1
            future = stub.Stream.future(messages(), metadata=AUTH, timeout=30)
            assert first.wait(10)
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            # once new calls are refused, the stream in flight still finishes
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    stub.Stream(iter([]), metadata=AUTH, timeout=2)
                except grpc.RpcError:
                    break
                time.sleep(0.05)
            more.set()
            assert future.result(timeout=20).accepted == 2
        assert proc.wait(30) == 0
    finally:
        more.set()
        proc.kill()
        proc.wait(10)
    landed = sorted((tmp_path / "landing" / "savegress").glob("*.pb"))
    assert sorted(ids_of(landed)) == ["evt-0", "evt-1", "evt-2"]


# ---------------------------------------------------------------------- through the pipeline


@pytest.mark.spark
def test_streamed_workload_becomes_exact_replicas(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rendered workload sent as gRPC calls (streams and a batch, one call refused half-way
    and sent again, one retried after it was acknowledged), then the pipeline over the landing
    zone → the replicas equal the oracle."""
    from cdcflow.demo import demo_config
    from cdcflow.dialects.savegress.render import decode_options, render_messages
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.simulation.workload import ALL_FEATURES, generate
    from cdcflow.testing.compare import compare_replicas

    monkeypatch.setenv("TEST_GRPC_TOKEN", TOKEN)
    w = generate(29, tables=3, transactions=20, features=frozenset(ALL_FEATURES - {"truncate"}))
    events = [pb.CDCEvent.FromString(event_to_proto(d)) for d in render_messages(w)]
    options = decode_options(w)
    cfg = grpc_config(tmp_path, max_body_size="10MiB")
    endpoint = cfg["grpc"]["endpoints"][0]
    endpoint["keys"] = {t: list(k) for t, k in options.table_keys.items()}
    endpoint["types"] = {t: dict(c) for t, c in options.column_types.items()}
    endpoint["options"] = {}
    s = serve(tmp_path, cfg)
    try:
        third = len(events) // 3
        first, second, last = events[:third], events[third : 2 * third], events[2 * third :]
        assert s.stub.Stream(iter(first), metadata=AUTH).accepted == len(first)
        batch = receiver_pb2.EventBatch(events=second)
        assert s.stub.Send(batch, metadata=AUTH).accepted == len(second)
        assert s.stub.Send(batch, metadata=AUTH).accepted == len(second)  # a retry
        broken = [m.SerializeToString() for m in last[:5]] + [b"\xff"]
        err = refused(lambda: s.raw_stream()(iter(broken), metadata=AUTH))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert s.stub.Stream(iter(last), metadata=AUTH).accepted == len(last)
        assert len(s.landed()) == 4
    finally:
        close(s)

    pipeline = demo_config(tmp_path, "savegress", options)
    pipeline = pipeline.model_copy(update={"namespace": "grpc_served", "pipeline": "grpc_served"})
    reports = Pipeline(pipeline, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 0
    # a protobuf Struct is a map: a JSON column's object keys come back in another order
    compare_replicas(spark, w, "grpc_served", unordered_json=True).assert_equal()
