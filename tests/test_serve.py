"""`cdcflow serve`: the durable webhook receiver, over real loopback HTTP (no Spark)."""

from __future__ import annotations

import errno
import hashlib
import hmac
import http.client
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from cdcflow import signing
from cdcflow.decode.decoder import Decoder
from cdcflow.errors import ConfigError
from cdcflow.event import dumps
from cdcflow.serve import landing as landing_mod
from cdcflow.serve.config import load_serve_config
from cdcflow.serve.server import ReceiverServer, make_server

SECRET = "whsec-test-0123456789"
TOKEN = "tok-abcdef-987654"
NOW = lambda: str(int(time.time()))  # noqa: E731


# ---------------------------------------------------------------------- fixtures and helpers


def base_config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "landing": str(tmp_path / "landing"),
        "max_body_size": "64KiB",
        "max_in_flight": 8,
        "retry_after": "7s",
        "endpoints": [
            {"path": "/crdb", "dialect": "cockroachdb", "landing": "crdb"},
            {
                "path": "/events",
                "dialect": "savegress",
                "landing": "savegress",
                "auth": {"signature": {"secret": {"env": "TEST_SG_SECRET"}}},
            },
            {
                "path": "/token",
                "dialect": "auto",
                "landing": "token",
                "auth": {"bearer": {"token": {"file": str(tmp_path / "token.txt")}}},
            },
            {"path": "/ces", "dialect": "sqlserver_ces", "landing": "ces"},
            {"path": "/auto", "dialect": "auto", "landing": "auto"},
            {"path": "/datastream", "dialect": "datastream", "landing": "datastream"},
        ],
    }
    cfg.update(overrides)
    return cfg


@dataclass
class Running:
    server: ReceiverServer
    landing: Path
    port: int
    scheme: str = "http"
    context: ssl.SSLContext | None = None

    def conn(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=10, context=self.context
            )
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, Any] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def post(
        self, path: str, body: bytes, headers: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        h = {"Content-Type": "application/json", **(headers or {})}
        status, _, payload = self.request("POST", path, body, h)
        return status, orjson.loads(payload)

    def landed(self, sub: str) -> list[Path]:
        d = self.landing / sub
        return sorted(p for p in d.iterdir() if p.is_file()) if d.exists() else []

    def rejected(self, sub: str) -> list[Path]:
        d = self.landing / "_rejected" / sub
        return sorted(d.iterdir()) if d.exists() else []


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics(running: Running) -> Samples:
    """``GET /metrics`` parsed: value by (sample name, labels)."""
    status, headers, payload = running.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(payload.decode())
        for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def start(cfg: dict[str, Any], base: Path) -> tuple[ReceiverServer, threading.Thread]:
    settings = load_serve_config(cfg, "(test)", base)
    server = make_server(settings)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    return server, thread


@pytest.fixture
def secrets_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SG_SECRET", SECRET)
    (tmp_path / "token.txt").write_text(TOKEN + "\n")


@pytest.fixture
def running(tmp_path: Path, secrets_env: None) -> Iterator[Running]:
    server, thread = start(base_config(tmp_path), tmp_path)
    try:
        yield Running(server, tmp_path / "landing", server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def signed(body: bytes, event_id: str | None = "evt-1", ts: str | None = None) -> dict[str, str]:
    h = {
        "X-Savegress-Signature": signing.sign(body, SECRET),
        "X-Savegress-Timestamp": ts or NOW(),
    }
    if event_id is not None:
        h["X-Savegress-Event-ID"] = event_id
    return h


def events_of(data: bytes, dialect: str, origin: str | None = None) -> list[bytes]:
    """Canonical events of a body/file (as JSON), failing on any rejection."""
    out: list[bytes] = []
    for o in Decoder(dialect).decode_file(data, origin):
        assert not o.rejections, o.rejections
        out.extend(dumps(e) for e in o.events)
    return out


def crdb_body(n: int = 2, length: int | None = None) -> bytes:
    payload = [
        {
            "after": {"id": i, "v": f"v{i}"},
            "key": [i],
            "topic": "users",
            "updated": f"{1700000000000000000 + i}.0000000000",
        }
        for i in range(n)
    ]
    return orjson.dumps({"payload": payload, "length": n if length is None else length})


def unified_event(i: int = 1) -> dict[str, Any]:
    return {
        "id": f"evt-{i}",
        "source": "postgres",
        "schema": "public",
        "table": "users",
        "operation": "INSERT",
        "timestamp": "2025-01-15T10:30:00Z",
        "position": {"lsn": f"0/{1000 + i:X}", "sequence": i},
        "after": {"id": i, "name": f"n{i}"},
        "key": {"id": i},
    }


def unified_batch(ids: range) -> bytes:
    events = [unified_event(i) for i in ids]
    return orjson.dumps(
        {
            "batch_id": f"batch-{ids.start}-{ids.stop}",
            "batch_size": len(events),
            "batch_timestamp": "2025-01-15T10:30:00Z",
            "events": events,
        }
    )


def ces_event(seq: int) -> dict[str, Any]:
    data = {
        "eventsource": {
            "db": "d",
            "schema": "dbo",
            "tbl": "t",
            "cols": [
                {"name": "id", "type": "int", "index": 0},
                {"name": "v", "type": "money", "index": 1},
            ],
            "pkkey": [{"columnname": "id", "value": str(seq)}],
            "transaction": {
                "commitlsn": "0000002C:00000300:017C",
                "beginlsn": "0000002C:00000300:0001",
                "sequencenumber": seq,
                "committime": "2026-01-01T00:00:00Z",
            },
        },
        "eventrow": {"old": "{}", "current": orjson.dumps({"id": str(seq), "v": "1.5"}).decode()},
    }
    return {
        "specversion": "1.0",
        "type": "com.microsoft.SQL.CES.DML.V1",
        "source": "/",
        "id": f"ces-{seq}",
        "logicalid": f"g:00000000000000000000:{seq:020d}",
        "time": "2026-01-01T00:00:00Z",
        "operation": "INS",
        "segmentindex": 0,
        "finalsegment": True,
        "data": orjson.dumps(data).decode(),
    }


def datastream_event(pos: int) -> dict[str, Any]:
    meta = {
        "table": "t",
        "database": "app",
        "primary_keys": ["id"],
        "log_file": "mysql-bin.000002",
        "log_position": pos,
        "change_type": "INSERT",
        "is_deleted": False,
    }
    return {
        "uuid": f"00000000-0000-4000-8000-{pos:012d}",
        "read_timestamp": "2024-05-01T10:00:01.000Z",
        "source_timestamp": "2024-05-01T10:00:00.000Z",
        "object": "app_t",
        "read_method": "mysql-cdc-binlog",
        "stream_name": "projects/p/locations/l/streams/s",
        "schema_key": "k",
        "source_metadata": meta,
        "payload": {"id": pos, "v": "a"},
        "sort_keys": [1714557600000, "mysql-bin.000002", pos],
    }


# ---------------------------------------------------------------------- signing


def spec_verify_signature(payload: bytes, signature: str, secret: str) -> bool:
    """The unified format spec's sample verifier, verbatim."""
    expected = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"sha256={expected}", signature)


def test_sign_matches_the_spec_verifier_and_verify_is_tolerant() -> None:
    body = b'{"id":"evt-1"}'
    header = signing.sign(body, SECRET)
    assert spec_verify_signature(body, header, SECRET)
    assert signing.verify(body, header, SECRET)
    assert signing.verify(body, header.encode(), SECRET.encode())
    assert signing.verify(body, "  SHA256=" + header[7:].upper() + " ", SECRET)
    assert not signing.verify(body + b" ", header, SECRET)
    assert not signing.verify(body, signing.sign(body, "other"), SECRET)
    for bad in (None, "", "sha256=", "md5=abc", "sha256=zz", header + "00", "sha256=é" * 3, 42):
        assert signing.verify(body, bad, SECRET) is False
    assert signing.verify(body, "sha256=\xe9".encode("latin-1"), SECRET) is False
    # the spec's verifier crashes where ours answers False
    with pytest.raises(TypeError):
        spec_verify_signature(body, "sha256=é", SECRET)
    assert signing.verify_any(body, header, [b"old", SECRET])


def test_timestamp_and_signed_event_id() -> None:
    now = 1_700_000_000.0
    assert signing.check_timestamp("1700000000", 300, now) is None
    assert signing.check_timestamp("1700000000000", 300, now) is None  # milliseconds
    assert signing.check_timestamp("1699999000", 300, now) == "stale"
    assert signing.check_timestamp("1700001000", 300, now) == "future"
    assert signing.check_timestamp(None, 300, now) == "missing"
    assert signing.check_timestamp("soon", 300, now) == "malformed"
    assert signing.check_timestamp("１７００", 300, now) == "malformed"
    assert signing.signed_event_id(orjson.dumps(unified_event(3))) == "evt-3"
    assert signing.signed_event_id(unified_batch(range(2))) == "batch-0-2"
    assert signing.signed_event_id(b"[1]") is None
    assert signing.signed_event_id(b"not json") is None
    headers = signing.signature_headers(b"x", SECRET, "evt-9", 5)
    assert headers["X-Savegress-Timestamp"] == "5"
    assert spec_verify_signature(b"x", headers["X-Savegress-Signature"], SECRET)


# ---------------------------------------------------------------------- CockroachDB


def test_cockroachdb_batch_lands_and_decodes_like_the_body(running: Running) -> None:
    body = crdb_body(3)
    status, doc = running.post("/crdb", body)
    assert status == 200 and doc["status"] == "accepted" and doc["events"] == 3
    [path] = running.landed("crdb")
    assert path.name == doc["file"] and not path.name.startswith(("_", "."))
    assert path.read_bytes() == body
    assert events_of(path.read_bytes(), "cockroachdb", str(path)) == events_of(body, "cockroachdb")
    assert len(events_of(path.read_bytes(), "auto", str(path))) == 3


def test_cockroachdb_length_mismatch_is_400_and_kept_as_rejected(running: Running) -> None:
    body = crdb_body(2, length=5)
    status, doc = running.post("/crdb", body)
    assert status == 400 and doc["code"] == "LENGTH_MISMATCH"
    assert running.landed("crdb") == []
    files = running.rejected("crdb")
    assert [p.suffix for p in files] == [".body", ".json"]
    assert files[0].read_bytes() == body
    reason = orjson.loads(files[1].read_bytes())
    assert reason["code"] == "LENGTH_MISMATCH" and reason["endpoint"] == "/crdb"
    status, doc = running.post("/crdb", b'{"payload": [')
    assert status == 400 and doc["code"] == "TRUNCATED_JSON"
    status, doc = running.post("/crdb", b"   ")
    assert status == 400 and doc["code"] == "EMPTY_BODY"


def test_file_names_sort_in_arrival_order(running: Running) -> None:
    names = [running.post("/crdb", crdb_body(1))[1]["file"] for _ in range(5)]
    assert names == sorted(names) and len(set(names)) == 5
    assert [p.name for p in running.landed("crdb")] == names


# ---------------------------------------------------------------------- unified format


def test_unified_single_and_batch_with_valid_signatures(running: Running) -> None:
    single = orjson.dumps(unified_event(1))
    status, doc = running.post("/events", single, signed(single, "evt-1"))
    assert (status, doc["events"]) == (200, 1)
    batch = unified_batch(range(10, 14))
    status, doc = running.post("/events", batch, signed(batch, "batch-10-14"))
    assert (status, doc["events"]) == (200, 4)
    landed = running.landed("savegress")
    assert [p.read_bytes() for p in landed] == [single, batch]
    for p, body in zip(landed, (single, batch), strict=True):
        assert events_of(p.read_bytes(), "savegress", str(p)) == events_of(body, "savegress")


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        (lambda b: {**signed(b), "X-Savegress-Signature": signing.sign(b, "wrong")}, "BAD_SIG"),
        (lambda b: signed(b + b" "), "BAD_SIG"),  # tampered body
        (lambda b: {k: v for k, v in signed(b).items() if "Signature" not in k}, "MISSING"),
        (
            lambda b: {**signed(b), "X-Savegress-Signature": "sha256=\xe9\xe9".encode("latin-1")},
            "BAD_SIG",
        ),
        (lambda b: {**signed(b), "X-Savegress-Signature": "sha256=ü".encode()}, "BAD_SIG"),
        (lambda b: {**signed(b), "X-Savegress-Signature": "garbage"}, "BAD_SIG"),
        (lambda b: signed(b, ts=str(int(time.time()) - 3600)), "TIMESTAMP_STALE"),
        (lambda b: signed(b, ts=str(int(time.time()) + 3600)), "TIMESTAMP_FUTURE"),
        (
            lambda b: {k: v for k, v in signed(b).items() if "Timestamp" not in k},
            "TIMESTAMP_MISSING",
        ),
        (lambda b: signed(b, event_id="evt-other"), "EVENT_ID_MISMATCH"),
    ],
    ids=[
        "wrong-secret",
        "tampered",
        "missing",
        "latin1",
        "utf8",
        "garbage",
        "stale",
        "future",
        "no-timestamp",
        "id-mismatch",
    ],
)
def test_unified_authentication_failures_are_401_and_land_nothing(
    running: Running, headers: Any, code: str
) -> None:
    body = orjson.dumps(unified_event(1))
    status, doc = running.post("/events", body, headers(body))
    assert status == 401, doc
    assert doc["code"] == f"AUTH_{code}".replace("BAD_SIG", "BAD_SIGNATURE")
    assert running.landed("savegress") == [] and running.rejected("savegress") == []


def test_replayed_event_id_is_a_duplicate_and_lands_once(running: Running, tmp_path: Path) -> None:
    body = orjson.dumps(unified_event(5))
    assert running.post("/events", body, signed(body, "evt-5"))[1]["status"] == "accepted"
    status, doc = running.post("/events", body, signed(body, "evt-5"))
    assert (status, doc["status"]) == (200, "duplicate")
    # a replay with a fresh timestamp and without the (unsigned) id header: still the same
    # signed event
    status, doc = running.post("/events", body, signed(body, None))
    assert (status, doc["status"]) == (200, "duplicate")
    assert len(running.landed("savegress")) == 1
    # the replay window survives a restart (durable journal)
    again, thread = start(base_config(tmp_path), tmp_path)
    try:
        other = Running(again, running.landing, again.server_address[1])
        assert other.post("/events", body, signed(body, "evt-5"))[1]["status"] == "duplicate"
        assert len(other.landed("savegress")) == 1
        assert sample(metrics(other), "cdcflow_serve_duplicates_total", endpoint="/events") == 1
    finally:
        again.shutdown()
        again.server_close()
        thread.join(5)
    # each receiver counts its own: the restarted one answered one duplicate
    assert sample(metrics(running), "cdcflow_serve_duplicates_total", endpoint="/events") == 2


def test_bearer_token(running: Running) -> None:
    body = crdb_body(1)
    status, headers, _ = running.request("POST", "/token", body, {})
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    for bad in ("Bearer nope", f"Basic {TOKEN}", "Bearer " + TOKEN + "x", "Bearer \xe9"):
        assert running.post("/token", body, {"Authorization": bad})[0] == 401
    status, doc = running.post("/token", body, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and doc["events"] == 1
    assert len(running.landed("token")) == 1


# ---------------------------------------------------------------------- CloudEvents


def test_cloudevents_structured_and_batched(running: Running) -> None:
    one = orjson.dumps(ces_event(1))
    status, doc = running.post("/ces", one, {"Content-Type": "application/cloudevents+json"})
    assert (status, doc["events"]) == (200, 1)
    batch = orjson.dumps([ces_event(2), ces_event(3)])
    ctype = {"Content-Type": "application/cloudevents-batch+json"}
    status, doc = running.post("/ces", batch, ctype)
    assert (status, doc["events"]) == (200, 2)
    assert running.post("/auto", batch, ctype)[0] == 200
    for p in running.landed("ces") + running.landed("auto"):
        ids = [orjson.loads(e)["id"] for e in events_of(p.read_bytes(), "auto", str(p))]
        assert ids in (["ces-1"], ["ces-2", "ces-3"])


def test_cloudevents_binary_mode_keeps_the_attributes(running: Running) -> None:
    ev = ces_event(7)
    headers = {
        f"ce-{k}": str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in ev.items()
        if k != "data"
    }
    body = ev["data"].encode()
    for path in ("/ces", "/auto"):
        status, doc = running.post(path, body, headers)
        assert (status, doc["events"]) == (200, 1), doc
    for sub in ("ces", "auto"):
        [p] = running.landed(sub)
        record = orjson.loads(p.read_bytes())
        assert record["headers"]["ce_id"] == "ces-7" and record["value"] == ev["data"]
        for dialect in ("sqlserver_ces", "auto"):
            [e] = events_of(p.read_bytes(), dialect, str(p))
            assert orjson.loads(e)["id"] == "ces-7"
    # the same event sent structured decodes to the same canonical event (in binary mode
    # Content-Type is the event's datacontenttype)
    structured = events_of(
        orjson.dumps({**ev, "datacontenttype": "application/json"}), "sqlserver_ces"
    )
    assert events_of(running.landed("ces")[0].read_bytes(), "sqlserver_ces") == structured


# ---------------------------------------------------------------------- Datastream


def test_datastream_json_events(running: Running) -> None:
    one = orjson.dumps(datastream_event(100))
    status, doc = running.post("/datastream", one)
    assert (status, doc["events"]) == (200, 1)
    lines = b"\n".join(orjson.dumps(datastream_event(p)) for p in (101, 102)) + b"\n"
    status, doc = running.post("/datastream", lines, {"Content-Type": "application/x-ndjson"})
    assert (status, doc["events"]) == (200, 2)
    status, doc = running.post("/auto", one)
    assert status == 200
    bodies = [one, lines]
    for p, body in zip(running.landed("datastream"), bodies, strict=True):
        assert events_of(p.read_bytes(), "datastream", str(p)) == events_of(body, "datastream")
    status, doc = running.post("/auto", b'{"hello": "world"}')
    assert status == 400 and doc["code"] == "DIALECT_UNDETECTED"


# ---------------------------------------------------------------------- limits


def test_body_over_the_limit_is_413(running: Running) -> None:
    big = crdb_body(2000)
    assert len(big) > 64 * 1024
    status, doc = running.post("/crdb", big)
    assert status == 413 and doc["code"] == "BODY_TOO_LARGE"

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    c = running.conn()
    c.request("POST", "/crdb", body=chunks(), encode_chunked=True)
    assert c.getresponse().status == 413
    c.close()
    # a chunked body under the limit is fine
    c = running.conn()
    small = crdb_body(2)
    c.request("POST", "/crdb", body=iter([small[:10], small[10:]]), encode_chunked=True)
    assert c.getresponse().status == 200
    c.close()
    assert len(running.landed("crdb")) == 1


def test_in_flight_limit_answers_503_with_retry_after(tmp_path: Path, secrets_env: None) -> None:
    server, thread = start(base_config(tmp_path, max_in_flight=1), tmp_path)
    r = Running(server, tmp_path / "landing", server.server_address[1])
    gate, entered = threading.Event(), threading.Event()
    real = server.receiver.land

    def slow_land(sub: str, data: bytes) -> Path:
        entered.set()
        gate.wait(5)
        return real(sub, data)

    server.receiver.land = slow_land
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(r.post("/crdb", crdb_body(1))[0]))
    try:
        first.start()
        assert entered.wait(5)
        assert sample(metrics(r), "cdcflow_serve_in_flight") == 1
        status, headers, payload = r.request("POST", "/crdb", crdb_body(1), {})
        assert status == 503 and headers["retry-after"] == "7"
        assert orjson.loads(payload)["code"] == "OVERLOADED"
        gate.set()
        first.join(5)
        assert results == [200]
        assert r.post("/crdb", crdb_body(1))[0] == 200
        assert len(r.landed("crdb")) == 2
        got = metrics(r)
        assert sample(got, "cdcflow_serve_in_flight") == 0
        assert (
            sample(got, "cdcflow_serve_rejects_total", endpoint="/crdb", reason="OVERLOADED") == 1
        )
    finally:
        gate.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


class _FullDisk:
    """The ``os`` module as the landing code sees it, with a full disk."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_answers_503_and_leaves_nothing(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landing_mod, "os", _FullDisk())
    body = orjson.dumps(unified_event(9))
    status, headers, payload = running.request("POST", "/events", body, signed(body, "evt-9"))
    assert status == 503 and headers["retry-after"] == "7"
    assert orjson.loads(payload)["code"] == "DISK_FULL"
    assert list((running.landing / "savegress").iterdir()) == []
    monkeypatch.undo()
    # the id was not remembered: the sender's retry lands it
    status, doc = running.post("/events", body, signed(body, "evt-9"))
    assert (status, doc["status"]) == (200, "accepted")


def test_temp_files_start_with_underscore_and_are_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    class _Crash:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def replace(src: Any, dst: Any) -> None:
            seen.append(sorted(p.name for p in Path(src).parent.iterdir()))
            raise KeyboardInterrupt  # "the process dies" between fsync and rename

    monkeypatch.setattr(landing_mod, "os", _Crash())
    zone = landing_mod.LandingZone(tmp_path / "landing")
    zone.prepare(["crdb"])
    with pytest.raises(KeyboardInterrupt):
        zone.land("crdb", b"{}")
    monkeypatch.undo()
    [names] = seen
    assert len(names) == 1 and names[0].startswith("_") and names[0].endswith(".tmp")
    # what a crash leaves is invisible to the pipeline, and the next start removes it
    from cdcflow.cli.main import resolve_paths

    assert resolve_paths((str(tmp_path / "landing" / "crdb"),)) == []
    assert zone.prepare(["crdb"]) in (0, 1)
    assert [p for p in (tmp_path / "landing" / "crdb").iterdir()] == []


# ---------------------------------------------------------------------- health, metrics


def test_health_and_metrics(running: Running) -> None:
    status, _, payload = running.request("GET", "/healthz")
    assert status == 200 and orjson.loads(payload)["status"] == "ok"
    running.post("/crdb", crdb_body(2))
    running.post("/crdb", crdb_body(2, length=9))
    # a request leaves the in-flight count once its answer is sent: the client may be faster
    assert running.server.receiver.wait_idle(10)
    got = metrics(running)
    assert sample(got, "cdcflow_serve_requests_total", endpoint="/crdb", status="200") == 1
    assert sample(got, "cdcflow_serve_requests_total", endpoint="/crdb", status="400") == 1
    assert sample(got, "cdcflow_serve_events_total", endpoint="/crdb") == 2
    assert sample(got, "cdcflow_serve_files_total", endpoint="/crdb") == 1
    assert sample(got, "cdcflow_serve_bytes_total", endpoint="/crdb") == len(crdb_body(2))
    assert (
        sample(got, "cdcflow_serve_rejects_total", endpoint="/crdb", reason="LENGTH_MISMATCH") == 1
    )
    assert sample(got, "cdcflow_serve_in_flight") == 0
    assert sample(got, "cdcflow_serve_request_seconds_count", endpoint="/crdb") == 2
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in got.items()
        if name == "cdcflow_serve_request_seconds_bucket"
    }
    assert buckets["+Inf"] == 2 and "0.001" in buckets and "10.0" in buckets
    assert running.request("GET", "/nope")[0] == 404
    assert running.post("/nope", b"{}")[0] == 404
    # docs/webhooks.md: 404 for a path without an endpoint, 405 for a method other than POST
    for method in ("GET", "HEAD", "PUT", "DELETE", "PATCH"):
        status, headers, _ = running.request(method, "/crdb", b"{}")
        assert (status, headers.get("allow")) == (405, "POST"), method
        assert running.request(method, "/nope", b"{}")[0] == 404, method
    got = metrics(running)
    assert sample(got, "cdcflow_serve_requests_total", endpoint="-", status="404") == 1
    assert sample(got, "cdcflow_serve_rejects_total", endpoint="-", reason="NOT_FOUND") == 1


def test_metrics_in_openmetrics_when_asked(running: Running) -> None:
    running.post("/crdb", crdb_body(1))
    status, headers, payload = running.request(
        "GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text")
    assert payload.endswith(b"# EOF\n")
    families = {f.name: f for f in openmetrics_families(payload.decode())}
    assert families["cdcflow_serve_requests"].type == "counter"
    assert families["cdcflow_serve_request_seconds"].type == "histogram"
    [total] = [
        s.value
        for s in families["cdcflow_serve_files"].samples
        if s.name == "cdcflow_serve_files_total"
    ]
    assert total == 1


# ---------------------------------------------------------------------- secrets


def test_secrets_never_in_logs_errors_or_repr(
    running: Running, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG, logger="cdcflow")
    body = orjson.dumps(unified_event(1))
    answers = [
        running.post("/events", body, signed(body)),
        running.post("/events", body, {"X-Savegress-Signature": "sha256=ü".encode()}),
        running.post("/events", b"{", signed(b"{")),
        running.post("/token", body, {"Authorization": "Bearer wrong"}),
        running.post("/token", crdb_body(1), {"Authorization": f"Bearer {TOKEN}"}),
    ]
    receiver = running.server.receiver
    texts = [
        caplog.text,
        repr(answers),
        repr(receiver),
        repr(receiver.settings),
        repr(list(receiver.settings.endpoints.values())),
        repr(list(receiver.endpoints.values())),
        str(receiver.settings.endpoints["/events"].signing_secret),
        repr(running.server),
    ]
    for p in running.landing.rglob("*"):
        if p.is_file() and "_rejected" in p.parts:
            texts.append(p.read_text(errors="replace"))
    for t in texts:
        assert SECRET not in t and TOKEN not in t
    assert "hidden" in repr(receiver.settings.endpoints["/events"].signing_secret)
    # configuration errors name the key and the variable, never a value
    cfg = base_config(tmp_path)
    cfg["endpoints"][1]["auth"]["signature"]["secret"] = {"env": "TEST_SG_SECRET", "file": SECRET}
    with pytest.raises(ConfigError) as err:
        load_serve_config(cfg, "(t)", tmp_path)
    assert "endpoints.1.auth.signature.secret" in str(err.value) and SECRET not in str(err.value)
    # nor the value itself written where its variable's name belongs
    cfg["endpoints"][1]["auth"]["signature"]["secret"] = SECRET
    with pytest.raises(ConfigError) as err:
        load_serve_config(cfg, "(t)", tmp_path)
    assert "endpoints.1.auth.signature.secret" in str(err.value) and SECRET not in str(err.value)


def test_config_errors_name_the_bad_key(tmp_path: Path, secrets_env: None) -> None:
    def error(cfg: dict[str, Any]) -> str:
        with pytest.raises(ConfigError) as e:
            load_serve_config(cfg, "(t)", tmp_path)
        return str(e.value)

    assert "listen.prot: unknown key. Did you mean 'port'? Allowed keys: host, port" in error(
        base_config(tmp_path, listen={"prot": 1})
    )
    bad = base_config(tmp_path)
    bad["endpoints"][1]["auth"]["signature"]["secert"] = "X"
    assert (
        "endpoints.1.auth.signature.secert: unknown key. Did you mean 'secret'? "
        "Allowed keys: replay_window, require_event_id, require_timestamp, secret, "
        "timestamp_tolerance" in error(bad)
    )
    bad = base_config(tmp_path)
    bad["endpoints"][0]["dialect"] = "cockroach"
    assert "endpoints.0.dialect" in error(bad) and "cockroachdb" in error(bad)
    bad = base_config(tmp_path)
    bad["endpoints"][0]["landing"] = "../x"
    assert "endpoints.0.landing" in error(bad)
    assert "max_body_size" in error(base_config(tmp_path, max_body_size="lots"))
    bad = base_config(tmp_path)
    bad["endpoints"][1]["auth"]["signature"]["secret"] = {"env": "NOT_SET_ANYWHERE_XYZ"}
    assert (
        "endpoints.1.auth.signature.secret: environment variable NOT_SET_ANYWHERE_XYZ is not set"
        in error(bad)
    )
    bad = base_config(tmp_path)
    bad["endpoints"].append(dict(bad["endpoints"][0]))
    assert "configured twice" in error(bad)
    assert "endpoints" in error(base_config(tmp_path, endpoints=[]))


# ---------------------------------------------------------------------- TLS


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    proc = subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {proc.stderr.decode()[:200]}")
    return cert, key


def test_tls(tmp_path: Path, secrets_env: None) -> None:
    cert, key = _self_signed(tmp_path)
    cfg = base_config(tmp_path, tls={"cert_file": str(cert), "key_file": str(key)})
    server, thread = start(cfg, tmp_path)
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        r = Running(server, tmp_path / "landing", server.server_address[1], "https", ctx)
        assert server.url.startswith("https://")
        body = orjson.dumps(unified_event(2))
        status, doc = r.post("/events", body, signed(body, "evt-2"))
        assert (status, doc["status"]) == (200, "accepted")
        # plain HTTP to the TLS port gets no answer
        with pytest.raises((http.client.HTTPException, OSError)):
            plain = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
            plain.request("GET", "/healthz")
            plain.getresponse()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# ---------------------------------------------------------------------- the real command


@pytest.mark.services
def test_serve_command_sigkill_keeps_every_acknowledged_body(
    tmp_path: Path, secrets_env: None
) -> None:
    """`cdcflow serve` killed with SIGKILL under load: every
    acknowledged body is landed whole, and no partial file is visible."""
    import yaml

    cfg = base_config(tmp_path)
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcflow", "serve", "serve.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TEST_SG_SECRET": SECRET},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        r = Running(None, tmp_path / "landing", port)  # type: ignore[arg-type]
        acked: dict[str, bytes] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def client(k: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                body = crdb_body(1 + (i % 50))
                try:
                    status, doc = r.post("/crdb", body)
                except (OSError, http.client.HTTPException, orjson.JSONDecodeError):
                    return
                if status == 200:
                    with lock:
                        acked[doc["file"]] = body

        clients = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in clients:
            t.start()
        time.sleep(0.6)
        os.kill(proc.pid, signal.SIGKILL)
        stop.set()
        for t in clients:
            t.join(10)
    finally:
        proc.kill()
        proc.wait(10)
    assert len(acked) > 5
    visible = {p.name: p for p in (tmp_path / "landing" / "crdb").iterdir()}
    for name, body in acked.items():
        assert visible[name].read_bytes() == body
    for name, p in visible.items():
        if not name.startswith(("_", ".")):
            orjson.loads(p.read_bytes())  # whole
            assert name.endswith(".json")


@pytest.mark.services
def test_serve_does_not_import_pyspark(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from cdcflow.cli.main import main\n"
        "main(['serve', '--help'])\n"
        "import cdcflow.serve.server\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"CONFIG" in proc.stdout


def test_concurrent_landings_share_their_folder_and_journal_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight bodies landed at once: each writer returns only once its own file is in place and
    its folder flushed, but the folder is flushed for many files at a time, and the replay
    journal's lines of eight commits are flushed together too (a flush each before)."""
    zone = landing_mod.LandingZone(tmp_path / "landing")
    zone.prepare(["crdb"])
    journal = landing_mod.ReplayJournal(zone.root / "_serve" / "replay.log", 3600.0)
    flushed: list[list[str]] = []
    real_fsync_dir = landing_mod.fsync_dir
    real_fsync = os.fsync

    def fsync_dir(path: Path) -> None:
        time.sleep(0.2)  # a slow disk: the other writers queue meanwhile
        flushed.append(sorted(p.name for p in path.iterdir()))
        real_fsync_dir(path)

    journal_flushes = []

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("replay.log"):
            time.sleep(0.2)
            journal_flushes.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(landing_mod, "fsync_dir", fsync_dir)
    monkeypatch.setattr(landing_mod.os, "fsync", fsync)
    landed: dict[int, tuple[Path, int]] = {}
    start_line = threading.Barrier(8)

    def writer(i: int) -> None:
        start_line.wait()
        path = zone.land("crdb", b'{"i": %d}' % i)
        # returned: its file is in place, and a folder flush came after its rename
        landed[i] = (path, len([f for f in flushed if path.name in f]))
        assert journal.claim(f"id-{i}") == "new"
        journal.commit(f"id-{i}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(landed) == list(range(8))
    for i, (path, flushes_after) in landed.items():
        assert path.read_bytes() == b'{"i": %d}' % i and flushes_after >= 1
    assert 1 <= len(flushed) <= 3, flushed  # 8 before
    assert 1 <= len(journal_flushes) <= 3, journal_flushes  # 8 before
    again = landing_mod.ReplayJournal(zone.root / "_serve" / "replay.log", 3600.0)
    assert all(again.claim(f"id-{i}") == "duplicate" for i in range(8))
