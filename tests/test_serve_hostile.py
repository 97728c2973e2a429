"""The receiver under hostile input: every body the decoder rejects is a 400 kept under
``_rejected/`` with its reason, a client too slow to send its body a 408, never a 500 for
client input; slow clients cannot hold the in-flight slots for long."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.test_serve import SECRET, TOKEN, Running, base_config, start

#: Endpoints of :func:`tests.test_serve.base_config` that decode without a signature.
OPEN = ["/crdb", "/ces", "/auto", "/datastream"]
DS = b'{"source_metadata":{"table":"t"},"payload":{"id":%s}}'

HOSTILE: list[tuple[str, bytes]] = [
    ("deep array", b"[" * 1000 + b"]" * 1000),
    ("deep value", DS % (b"[" * 300 + b"]" * 300)),
    ("array with a deep element", b"[" + DS % b"1" + b"," + b"[" * 300 + b"]" * 300 + b"]"),
    ("huge integer", DS % (b"9" * 5000)),
    ("huge exponent", DS % b"1.0e999999999"),
    ("resolved object", b'{"resolved":{}}'),
    ("resolved float", b'{"resolved":1e38}'),
    (
        "segment count",
        b'{"specversion":"1.0","type":"com.microsoft.SQL.CES.DML.V1","id":"x",'
        b'"source":"/","logicalid":"g","splitindex":1,"splittotalcnt":50000000,"data":"{"}',
    ),
    ("bad utf-8", b'{"a":"\xff\xfe"}'),
    ("not json", b"garbage"),
    ("empty array", b"[]"),
    ("byte-order mark only", b"\xef\xbb\xbf"),
]


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setenv("TEST_SG_SECRET", SECRET)
    (tmp_path / "token.txt").write_text(TOKEN + "\n")
    cfg = base_config(tmp_path, max_in_flight=4, body_timeout="1s")
    server, _ = start(cfg, tmp_path)
    try:
        yield Running(server, tmp_path / "landing", server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("path", OPEN)
def test_every_rejected_body_is_400_and_kept_with_its_reason(hostile: Running, path: str) -> None:
    sub = path.strip("/")
    for n, (what, body) in enumerate(HOSTILE, 1):
        status, doc = hostile.post(path, body)
        assert status == 400, (what, status, doc)
        assert doc["code"] != "DECODER_ERROR", (what, doc)
        kept = [p for p in hostile.rejected(sub) if not p.name.endswith(".reason.json")]
        reasons = [p for p in hostile.rejected(sub) if p.name.endswith(".reason.json")]
        assert len(kept) == len(reasons) == n, what
    assert hostile.landed(sub) == []
    last = orjson.loads(sorted(reasons, key=lambda p: p.stat().st_mtime_ns)[-1].read_bytes())
    assert last["code"] and last["message"]


def test_a_failure_nobody_foresaw_is_a_400_decoder_error_kept_with_its_reason(
    hostile: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = hostile.server.receiver.endpoints["/datastream"].decoder.dialects[0]

    def decode(msg: object) -> list[object]:
        raise RecursionError("a decoder bug")

    monkeypatch.setattr(dialect, "decode", decode)
    status, doc = hostile.post("/datastream", DS % b"1")
    assert status == 400 and doc["code"] == "DECODER_ERROR"
    assert "RecursionError: a decoder bug" in doc["message"]
    (reason,) = [p for p in hostile.rejected("datastream") if p.name.endswith(".reason.json")]
    assert orjson.loads(reason.read_bytes())["code"] == "DECODER_ERROR"


def _stall(port: int, path: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{".encode()
    )
    return s


def test_a_client_too_slow_to_send_its_body_is_408(hostile: Running) -> None:
    s = _stall(hostile.port, "/datastream")
    try:
        s.settimeout(10)
        started = time.monotonic()
        answer = b""
        while piece := s.recv(65536):
            answer += piece
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert b"BODY_TIMEOUT" in answer
        assert time.monotonic() - started < 5
    finally:
        s.close()
    assert hostile.rejected("datastream") == []


def test_slow_clients_hold_the_slots_only_until_the_body_deadline(hostile: Running) -> None:
    stalled = [_stall(hostile.port, "/datastream") for _ in range(4)]  # every slot
    try:
        time.sleep(0.3)
        status, doc = hostile.post("/datastream", DS % b"1")
        assert status == 503 and doc["code"] == "OVERLOADED"
        time.sleep(1.5)  # past the body deadline: the slots are free again
        status, doc = hostile.post("/datastream", DS % b"1")
        assert status == 200, doc
    finally:
        for s in stalled:
            s.close()
