"""Outputs: unified rendering, signed webhook delivery with retries, file stream sinks."""

from __future__ import annotations

import datetime as dt
import email.utils
import itertools
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
from pydantic import SecretStr

from cdcflow.config import load_config
from cdcflow.errors import ConfigError
from cdcflow.outputs.stream import (
    MAX_BACKOFF,
    MAX_RETRY_AFTER,
    Delivery,
    backoff_delay,
    connection_pool,
    dumps,
    envelope,
    load_secret,
    post,
    render_unified,
    retry_policy,
)
from cdcflow.signing import verify
from tests.conftest_shared import shared_path

SECRET = "s3cret-value"


Step = int | tuple[int, dict[str, str]] | tuple[int, dict[str, str], float]


class Server:
    """A loopback HTTP server answering from a script of steps (then 200): a status, or a
    status with headers, and optionally seconds to wait before answering. Records each
    request and the time it arrived."""

    def __init__(self, script: list[Step] | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[tuple[Any, bytes]] = []
        self.arrived: list[float] = []
        self.ports: list[int] = []
        self.fail_all: int | None = None
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real receivers

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    owner.arrived.append(time.monotonic())
                    owner.ports.append(self.client_address[1])
                    owner.requests.append((self.headers, body))
                    step: Any = owner.script.pop(0) if owner.script else 200
                    if owner.fail_all is not None:
                        step = owner.fail_all
                if not isinstance(step, tuple):
                    step = (step, {})
                code, headers = step[0], step[1]
                if len(step) > 2:
                    time.sleep(step[2])
                try:
                    self.send_response(code)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client timed out and closed the connection

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/events"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(script: list[Any] | None = None) -> Server:
        s = Server(script)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "evt-1",
        "source": "postgres",
        "schema": "public",
        "table": "users",
        "operation": "UPDATE",
        "timestamp": dt.datetime(2025, 1, 15, 10, 30, 0, 123456, tzinfo=dt.UTC),
        "transaction_id": "tx-1",
        "sequence": "0001",
        "position": '{"lsn": "0/1A", "sequence": 3}',
        "key": [("id", "1")],
        "before": {"id": "1", "active": "false"},
        "after": [
            ("id", "1"),
            ("active", "true"),
            ("amount", "12345678901234567890.123456789"),
            ("rate", "0.5"),
            ("name", "Ann"),
            ("nothing", None),
        ],
        "metadata": {"database": "prod"},
        "types": [
            ("id", "bigint"),
            ("active", "boolean"),
            ("amount", "decimal(38,9)"),
            ("rate", "double"),
            ("name", "string"),
            ("nothing", "int"),
        ],
        "_fp": 42,
    }
    row.update(over)
    return row


# --------------------------------------------------------------------------- rendering


def test_render_unified_typed_values() -> None:
    doc = render_unified(_row())
    assert doc["id"] == "evt-1"
    assert doc["timestamp"] == "2025-01-15T10:30:00.123456Z"
    assert doc["position"] == {"lsn": "0/1A", "sequence": 3}
    assert doc["before"] == {"id": 1, "active": False}
    assert doc["after"]["amount"] == Decimal("12345678901234567890.123456789")
    assert doc["metadata"] == {"database": "prod"}
    text = dumps(doc)
    assert b'"amount":12345678901234567890.123456789' in text  # exact JSON number
    back = orjson.loads(text)
    assert back["after"] == {
        "id": 1,
        "active": True,
        "amount": pytest.approx(12345678901234567890.123456789),
        "rate": 0.5,
        "name": "Ann",
        "nothing": None,
    }


def test_render_unified_stable_ids() -> None:
    a = render_unified(_row(id=None))
    b = render_unified(_row(id=""))
    assert a["id"] == b["id"] and a["id"].startswith("cdc-")
    assert render_unified(_row(id=None, _fp=43))["id"] != a["id"]
    assert render_unified(_row(id=None, sequence="0002"))["id"] != a["id"]


def test_unreadable_value_kept_as_text() -> None:
    doc = render_unified(_row(after={"id": "x"}, types={"id": "bigint"}))
    assert doc["after"] == {"id": "x"}


# --------------------------------------------------------------------------- delivery


def _post(url: str, attempts: int = 4, backoff: float = 0.01, timeout: float = 2) -> Any:
    return post(
        url,
        b'{"id":"evt-1"}',
        "evt-1",
        SecretStr(SECRET),
        max_attempts=attempts,
        timeout=timeout,
        backoff=backoff,
    )


def _gaps(srv: Server) -> list[float]:
    return [b - a for a, b in itertools.pairwise(srv.arrived)]


def test_retry_5xx_then_ok_and_signature(server: Callable[..., Server]) -> None:
    srv = server([500, 503, 502, 200])
    result = _post(srv.url)
    assert result == Delivery(True, 200, "ok", 4)
    assert len(srv.requests) == 4
    for headers, body in srv.requests:
        assert body == b'{"id":"evt-1"}'
        assert headers["X-Savegress-Event-ID"] == "evt-1"
        assert verify(body, headers["X-Savegress-Signature"], SECRET)
        assert not verify(body, headers["X-Savegress-Signature"], "other")
        assert abs(int(headers["X-Savegress-Timestamp"]) - time.time()) < 60
        assert headers["Content-Type"] == "application/json"


def test_backoff_waits_from_the_first_retry(server: Callable[..., Server]) -> None:
    """``backoff × 2^(retry−1)`` × 0.5..1.5: the first retry waits too (urllib3's own
    formula would not) and the second waits longer."""
    srv = server([500, 500, 200])
    assert _post(srv.url, backoff=0.2).ok
    first, second = _gaps(srv)
    assert first >= 0.1 and second >= 0.2
    assert first < 1.5 and second < 2.0


def test_backoff_grows_with_jitter_and_a_cap() -> None:
    assert backoff_delay(1, 1.0, rng=lambda: 0.0) == 0.5
    assert backoff_delay(3, 1.0, rng=lambda: 1.0) == 6.0
    assert backoff_delay(20, 1.0, rng=lambda: 1.0) == MAX_BACKOFF
    assert backoff_delay(2, 1.0, cap=1.5, rng=lambda: 0.5) == 1.5


def test_429_honours_retry_after_seconds(server: Callable[..., Server]) -> None:
    srv = server([(429, {"Retry-After": "1"}), 200])
    assert _post(srv.url) == Delivery(True, 200, "ok", 2)
    [gap] = _gaps(srv)
    assert 0.95 <= gap < 3


def test_503_honours_retry_after_http_date(server: Callable[..., Server]) -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    srv = server([(503, {"Retry-After": when}), 200])
    assert _post(srv.url).ok
    [gap] = _gaps(srv)
    assert 0.9 <= gap < 4  # the date has whole seconds: one to two seconds from now


def test_retry_after_only_on_429_and_503_and_unreadable_is_ignored(
    server: Callable[..., Server],
) -> None:
    srv = server([(500, {"Retry-After": "5"}), (429, {"Retry-After": "soon"}), 200])
    assert _post(srv.url) == Delivery(True, 200, "ok", 3)
    assert all(gap < 1 for gap in _gaps(srv))


def test_retry_after_is_capped() -> None:
    policy = retry_policy(3, 0.5)
    answer = urllib3.HTTPResponse(status=429, headers={"Retry-After": "86400"})
    assert policy.get_retry_after(answer) == MAX_RETRY_AFTER
    assert policy.get_retry_after(urllib3.HTTPResponse(status=429)) is None


def test_400_not_retried(server: Callable[..., Server]) -> None:
    srv = server([400, 200])
    result = _post(srv.url)
    assert result == Delivery(False, 400, "HTTP 400", 1)
    assert len(srv.requests) == 1


def test_redirect_is_final_not_followed(server: Callable[..., Server]) -> None:
    """A redirected POST would arrive without its body (or not at all): never delivered."""
    srv = server([(302, {"Location": "/elsewhere"}), 200])
    assert _post(srv.url) == Delivery(False, 302, "HTTP 302", 1)
    assert len(srv.requests) == 1


def test_failure_after_max_attempts(server: Callable[..., Server]) -> None:
    srv = server([500] * 10)
    result = _post(srv.url, attempts=3)
    assert result == Delivery(False, 500, "HTTP 500", 3)
    assert len(srv.requests) == 3


def test_timeout_is_retried(server: Callable[..., Server]) -> None:
    srv = server([(200, {}, 1.0), 200])
    assert _post(srv.url, timeout=0.3) == Delivery(True, 200, "ok", 2)
    srv = server([(200, {}, 1.0), 200])
    assert _post(srv.url, attempts=1, timeout=0.3) == Delivery(False, None, "timeout", 1)


def test_connection_refused_is_retried() -> None:
    srv = Server()
    url = srv.url
    srv.close()
    started = time.monotonic()
    result = _post(url, attempts=2, backoff=0.2)
    assert not result.ok and result.status is None and result.attempts == 2
    assert result.reason == "connection: [Errno 111] Connection refused"
    assert time.monotonic() - started >= 0.1  # one backoff between the two attempts


def test_one_pool_keeps_the_connection(server: Callable[..., Server]) -> None:
    srv = server([200, 200])
    with connection_pool() as pool:
        for _ in range(2):
            delivery = post(
                srv.url, b"{}", "e", None, max_attempts=1, timeout=2, backoff=0, pool=pool
            )
            assert delivery.ok
    assert len(set(srv.ports)) == 1  # both requests on one connection
    headers = [h for h, _ in srv.requests]
    assert all("X-Savegress-Signature" not in h for h in headers)  # unsigned: the id only
    assert [h["X-Savegress-Event-ID"] for h in headers] == ["e", "e"]


def test_secret_never_in_repr_or_reasons(
    server: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDCFLOW_TEST_SECRET", SECRET)
    cfg = _cfg(
        [
            {
                "type": "webhook",
                "name": "hook",
                "url": "http://h/x",
                "secret": {"env": "CDCFLOW_TEST_SECRET"},
            }
        ]
    )
    secret = load_secret(cfg.outputs[0])
    assert secret is not None and secret.get_secret_value() == SECRET
    assert SECRET not in repr(secret) and SECRET not in str(secret)
    srv = server([500, 500])
    result = post(srv.url, b"{}", "e", secret, max_attempts=2, timeout=2, backoff=0.01)
    assert SECRET not in repr(result)


# --------------------------------------------------------------------------- flaky receiver

CLIENT_TIMEOUT = 0.3


def spec_verify_signature() -> Callable[[bytes, str, str], bool]:
    """The unified format spec's own ``verify_signature`` (section "Webhook Delivery"),
    executed from the spec text, not copied into the project."""
    text = shared_path("specs", "unified-cdc-event-format.txt").read_text()
    section = text.split("## Webhook Delivery", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match and "def verify_signature" in match.group(1), "no verify_signature in the spec"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), "unified-cdc-event-format.txt", "exec"), namespace)
    fn: Callable[[bytes, str, str], bool] = namespace["verify_signature"]
    return fn


class FlakyServer:
    """A loopback receiver failing at random (seeded): ~30% 500, ~20% 429 with
    ``Retry-After: 0``, ~10% answering only after the client's timeout, else 200. Records
    every request and the event ids of the bodies it answered 200 to (a late 200 counts:
    the receiver has the body even though the client gave up on it)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.requests: list[tuple[Any, bytes, str]] = []
        self.accepted: list[str] = []
        self.pending = 0
        self.cond = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with owner.cond:
                    roll = owner.rng.random()
                    kind = (
                        "500"
                        if roll < 0.3
                        else "429"
                        if roll < 0.5
                        else "slow"
                        if roll < 0.6
                        else "200"
                    )
                    owner.requests.append((self.headers, body, kind))
                    if kind == "slow":
                        owner.pending += 1
                try:
                    if kind == "slow":
                        time.sleep(CLIENT_TIMEOUT * 2)
                    if kind in ("200", "slow"):
                        doc = orjson.loads(body)
                        ids = [e["id"] for e in doc["events"]] if "events" in doc else [doc["id"]]
                        with owner.cond:
                            owner.accepted.extend(ids)
                    status = {"500": 500, "429": 429}.get(kind, 200)
                    self.send_response(status)
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client timed out and closed the connection
                finally:
                    if kind == "slow":
                        with owner.cond:
                            owner.pending -= 1
                            owner.cond.notify_all()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/events"

    def settle(self, timeout: float) -> None:
        """Wait for the slow answers still sleeping."""
        with self.cond:
            assert self.cond.wait_for(lambda: self.pending == 0, timeout)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_outbound_against_randomly_failing_receiver() -> None:
    """Timeouts, 500 and 429 at random: every event delivered, each id accepted at least
    once, the receiver's deduplicated set equals the events, and every request's signature
    verifies with the spec's own ``verify_signature``."""
    verify_signature = spec_verify_signature()
    events = [render_unified(_row(id=f"evt-{i:03d}", sequence=f"{i:04d}")) for i in range(60)]
    sent = {e["id"] for e in events}
    srv = FlakyServer(seed=7)
    try:
        started = time.monotonic()
        now = dt.datetime(2025, 1, 15, tzinfo=dt.UTC)
        sizes = [1, 5, 8]  # single events and batches, as the sink sends them
        start, chunk = 0, 0
        while start < len(events):
            part = events[start : start + sizes[chunk % len(sizes)]]
            if len(part) == 1:
                body, eid = dumps(part[0]), str(part[0]["id"])
            else:
                eid = f"pipe-1-0.{chunk}"
                body = dumps(envelope(eid, part, now))
            result = post(
                srv.url,
                body,
                eid,
                SecretStr(SECRET),
                max_attempts=12,
                timeout=CLIENT_TIMEOUT,
                backoff=0.001,
            )
            assert result.ok and result.status == 200, (eid, result)
            start += len(part)
            chunk += 1
        srv.settle(5)
        elapsed = time.monotonic() - started
    finally:
        srv.close()

    kinds = [kind for _, _, kind in srv.requests]
    # the seed really exercised every failure kind, and retries were needed
    assert {"500", "429", "slow", "200"} <= set(kinds)
    assert len(srv.requests) > chunk
    assert elapsed < 10
    assert set(srv.accepted) == sent  # each id at least once, nothing else
    assert all(srv.accepted.count(i) >= 1 for i in sent)
    for headers, body, _ in srv.requests:
        signature = headers["X-Savegress-Signature"]
        assert verify_signature(body, signature, SECRET)
        assert not verify_signature(body, signature, "wrong-secret")
        assert not verify_signature(body + b" ", signature, SECRET)
        doc = orjson.loads(body)
        assert headers["X-Savegress-Event-ID"] == doc.get("batch_id", doc.get("id"))
        assert headers["X-Savegress-Timestamp"].isdigit()


# --------------------------------------------------------------------------- configuration


def _cfg(outputs: list[dict[str, Any]]) -> Any:
    return load_config({"sources": [{"name": "s", "path": "/x"}], "outputs": outputs})


def test_output_config_validation() -> None:
    cfg = _cfg([{"type": "webhook", "name": "hook", "url": "http://h/x", "secret": {"env": "S"}}])
    assert cfg.outputs[0].batch_size == 100 and cfg.outputs[0].max_attempts == 5
    with pytest.raises(ConfigError, match="needs 'path'"):
        _cfg([{"type": "files", "name": "f"}])
    with pytest.raises(ConfigError, match="needs 'url'"):
        _cfg([{"type": "webhook", "name": "w"}])
    with pytest.raises(ConfigError, match=r"outputs\.0\.secret: give exactly one of env or file"):
        _cfg(
            [
                {
                    "type": "webhook",
                    "name": "w",
                    "url": "http://h",
                    "secret": {"env": "A", "file": "B"},
                }
            ]
        )
    with pytest.raises(ConfigError, match="'secret' is for webhook outputs"):
        _cfg([{"type": "files", "name": "f", "path": "/a", "secret": {"env": "A"}}])
    with pytest.raises(ConfigError, match="unique"):
        _cfg(
            [
                {"type": "files", "name": "f", "path": "/a"},
                {"type": "files", "name": "f", "path": "/b"},
            ]
        )
    with pytest.raises(ConfigError, match="batch_size"):
        _cfg([{"type": "files", "name": "f", "path": "/a", "batch_size": 0}])


# --------------------------------------------------------------------------- pipeline


def _decode_dir(directory: Path) -> list[dict[str, Any]]:
    from cdcflow.decode.decoder import Decoder
    from cdcflow.transports.message import RawMessage

    decoder = Decoder("savegress")
    events: list[dict[str, Any]] = []
    files = sorted(directory.glob("part-*"))
    assert files, f"no files in {directory}"
    for f in files:
        for line in f.read_bytes().splitlines():
            outcome = decoder.decode(RawMessage(data=line, origin=str(f)))
            assert not outcome.rejections, outcome.rejections
            events.extend(outcome.events)
    return events


@pytest.mark.spark
def test_pipeline_outputs(
    spark: Any,
    tmp_path: Path,
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.scenario import config, ev, land, run

    monkeypatch.setenv("CDCFLOW_TEST_SECRET", SECRET)
    good = server()
    bad = server()
    bad.fail_all = 500
    messages = [
        ev("INSERT", "users", 1, after={"id": 1, "amount": 10.25, "name": "a"}, id="e1"),
        ev("INSERT", "users", 2, after={"id": 2, "amount": 3.5, "name": "b"}, id="e2"),
        ev(
            "UPDATE",
            "users",
            3,
            before={"id": 1},
            after={"id": 1, "amount": 11.0, "name": "a"},
            id="e3",
        ),
        ev("DELETE", "users", 4, before={"id": 2}, id="e4"),
        ev("INSERT", "orders", 5, after={"oid": 7, "user": 1}, id="e5"),
    ]
    land(tmp_path / "landing", messages)
    out = tmp_path / "out"
    cfg = config(
        tmp_path,
        "outputs_e2e",
        keys={"users": ["id"], "orders": ["oid"]},
        outputs=[
            {"type": "files", "name": "uni", "path": str(out / "uni"), "batch_size": 2},
            {"type": "files", "name": "kafka", "path": str(out / "kafka"), "format": "kafka"},
            {
                "type": "webhook",
                "name": "hook",
                "url": good.url,
                "secret": {"env": "CDCFLOW_TEST_SECRET"},
                "batch_size": 2,
                "backoff": 0.01,
            },
            {
                "type": "webhook",
                "name": "down",
                "url": bad.url,
                "batch_size": 1,
                "max_attempts": 2,
                "backoff": 0.01,
            },
        ],
    )
    run(spark, cfg)
    want = {m["id"]: m for m in messages}

    batch_dirs = sorted((out / "uni").glob("batch=*"))
    assert batch_dirs
    for fmt in ("uni", "kafka"):
        got = [e for d in sorted((out / fmt).glob("batch=*")) for e in _decode_dir(d)]
        assert sorted(e["id"] for e in got) == sorted(want)
        for e in got:
            m = want[e["id"]]
            assert (e["operation"], e["table"]) == (m["operation"], m["table"])
            if "after" in m:
                assert {k: str(v) for k, v in e["after"].items()} == {
                    k: str(v) for k, v in m["after"].items()
                }

    delivered: set[str] = set()
    for headers, body in good.requests:
        assert verify(body, headers["X-Savegress-Signature"], SECRET)
        doc = orjson.loads(body)
        assert headers["X-Savegress-Event-ID"] == doc["batch_id"]
        assert doc["batch_size"] == len(doc["events"]) <= 2
        delivered |= {e["id"] for e in doc["events"]}
    assert delivered == set(want)
    amounts = {
        e["id"]: e["after"]["amount"]
        for _, body in good.requests
        for e in orjson.loads(body)["events"]
        if e["table"] == "users" and e["after"]
    }
    assert amounts == {"e1": 10.25, "e2": 3.5, "e3": 11.0}

    assert len(bad.requests) == 2 * len(want)  # every event tried max_attempts times
    dead = spark.sql(
        "SELECT error_code, error_message, raw FROM cdc.outputs_e2e__cdcflow.dead_letters"
    ).collect()
    assert len(dead) == len(want)
    assert {r["error_code"] for r in dead} == {"DELIVERY_FAILED"}
    assert all("output down" in r["error_message"] and "500" in r["error_message"] for r in dead)
    assert {orjson.loads(r["raw"])["id"] for r in dead} == set(want)
    # the replicas were still written
    users = spark.sql("SELECT id FROM cdc.outputs_e2e.users").collect()
    assert [r["id"] for r in users] == [1]
