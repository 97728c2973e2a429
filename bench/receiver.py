"""(d) the receiver: signed webhook requests and gRPC calls against a minimal receiver that
only writes what it is sent, durably."""

from __future__ import annotations

import http.client
import itertools
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from bench.common import SCALE, lsn_text

if TYPE_CHECKING:
    import grpc

RECEIVER_SECRET = "bench-receiver-secret"


def _signed_requests(
    clients: int, per_client: int, events: int, prefix: str
) -> list[list[tuple[bytes, dict[str, str]]]]:
    """Per client, ``per_client`` signed unified batches of ``events`` events each, with
    distinct batch ids (the receiver deduplicates on them)."""
    from cdcflow.signing import signature_headers

    out: list[list[tuple[bytes, dict[str, str]]]] = []
    lsn = 1
    for c in range(clients):
        reqs: list[tuple[bytes, dict[str, str]]] = []
        for r in range(per_client):
            docs = []
            for _ in range(events):
                docs.append(
                    {
                        "id": f"{prefix}-e{lsn}",
                        "operation": "INSERT",
                        "table": "items",
                        "source": "postgres",
                        "timestamp": "2025-01-15T10:30:00Z",
                        "position": {"lsn": lsn_text(lsn), "sequence": 0},
                        "after": {"id": lsn, "name": f"item-{lsn}", "qty": lsn % 1000},
                    }
                )
                lsn += 1
            batch_id = f"{prefix}-{c}-{r}"
            body = orjson.dumps(
                {
                    "batch_id": batch_id,
                    "batch_size": len(docs),
                    "batch_timestamp": "2025-01-15T10:30:00Z",
                    "events": docs,
                }
            )
            headers = {"Content-Type": "application/json"}
            headers.update(signature_headers(body, RECEIVER_SECRET, batch_id))
            reqs.append((body, headers))
        out.append(reqs)
    return out


def _drive(port: int, path: str, work: list[list[tuple[bytes, dict[str, str]]]]) -> dict[str, Any]:
    """Send every client's requests from its own thread over one keep-alive connection
    (reopened if the server closes it); acknowledged = answered 200."""
    latencies: list[list[float]] = [[] for _ in work]
    errors = [0] * len(work)
    barrier = threading.Barrier(len(work) + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        barrier.wait()
        for body, headers in work[i]:
            t = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
                if resp.will_close:
                    conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
            if ok:
                latencies[i].append(time.perf_counter() - t)
            else:
                errors[i] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    barrier.wait()
    started = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    lat = sorted(x for xs in latencies for x in xs)
    cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
    return {
        "acknowledged": len(lat),
        "errors": sum(errors),
        "seconds": elapsed,
        "requests_per_s": len(lat) / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
    }


def _durable_write(final: Path, data: bytes) -> None:
    """The durable write of one body, alone: a temp file, fsync, rename, folder fsync."""
    tmp = final.with_name(f"_{final.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median requests/s, with the errors and the rounds' rates of all."""
    ranked = sorted(rounds, key=lambda r: r["requests_per_s"])
    found = dict(ranked[len(ranked) // 2])
    found["errors"] = sum(r["errors"] for r in rounds)
    found["rounds_requests_per_s"] = [round(r["requests_per_s"], 1) for r in rounds]
    return found


def _minimal_receiver(folder: Path) -> ThreadingHTTPServer:
    """The baseline: read the body, write it durably to a new file (:func:`_durable_write`),
    answer 200; a thread per connection."""
    folder.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out as two writes: without TCP_NODELAY the second waits for
        # the client's delayed ACK (~40 ms on Linux) on a keep-alive connection
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                n = next(counter)
            _durable_write(folder / f"{n:08d}.json", body)
            payload = b'{"status":"accepted"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _serving(server: Any) -> Callable[[], None]:
    """Serve in a daemon thread; returns the function that stops it."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop


RECEIVER_TOKEN = "bench-receiver-token"


def _grpc_calls(clients: int, per_client: int, events: int, prefix: str) -> list[list[list[bytes]]]:
    """Per client, ``per_client`` calls of ``events`` serialized ``CDCEvent`` messages."""
    from cdcflow.dialects.savegress.proto import event_to_proto

    out: list[list[list[bytes]]] = []
    lsn = 1
    for _ in range(clients):
        calls: list[list[bytes]] = []
        for _ in range(per_client):
            call = []
            for _ in range(events):
                doc = {
                    "id": f"{prefix}-e{lsn}",
                    "operation": "INSERT",
                    "table": "items",
                    "source": "postgres",
                    "timestamp": "2025-01-15T10:30:00Z",
                    "position": {"lsn": lsn_text(lsn), "sequence": 0},
                    "after": {"id": lsn, "name": f"item-{lsn}", "qty": lsn % 1000},
                }
                call.append(event_to_proto(doc))
                lsn += 1
            calls.append(call)
        out.append(calls)
    return out


def _drive_grpc(port: int, work: list[list[list[bytes]]]) -> dict[str, Any]:
    """Each client streams its calls from its own thread over its own channel; acknowledged =
    answered OK."""
    import grpc

    metadata = (("authorization", f"Bearer {RECEIVER_TOKEN}"),)
    latencies: list[list[float]] = [[] for _ in work]
    errors = [0] * len(work)
    barrier = threading.Barrier(len(work) + 1)

    def client(i: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = channel.stream_unary("/cdcflow.receiver.v1.Receiver/Stream")
            barrier.wait()
            for call in work[i]:
                t = time.perf_counter()
                try:
                    stream(iter(call), metadata=metadata, timeout=30)
                except grpc.RpcError:
                    errors[i] += 1
                    continue
                latencies[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    barrier.wait()
    started = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    lat = sorted(x for xs in latencies for x in xs)
    cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
    per_call = len(work[0][0]) if work and work[0] else 0
    return {
        "acknowledged": len(lat),
        "errors": sum(errors),
        "seconds": elapsed,
        "calls_per_s": len(lat) / elapsed,
        "events_per_s": len(lat) * per_call / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
    }


def _minimal_grpc(folder: Path) -> tuple[grpc.Server, int]:
    """The baseline: a grpcio server whose ``Stream`` writes the call's messages to a new file
    (length-delimited, no fsync) and answers an empty ``Ack``."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from cdcflow.transports.protobuf import write_delimited

    folder.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    lock = threading.Lock()

    def stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        data = write_delimited(list(requests))
        with lock:
            n = next(counter)
        (folder / f"{n:08d}.pb").write_bytes(data)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "cdcflow.receiver.v1.Receiver", {"Stream": grpc.stream_unary_rpc_method_handler(stream)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=72), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    return server, port


def bench_receiver(
    root: Path, clients: int = 8, per_client: int = 200, events: int = 10
) -> dict[str, Any]:
    from cdcflow.serve.config import load_serve_config
    from cdcflow.serve.grpc_server import make_grpc_server
    from cdcflow.serve.server import make_server

    (root / "receiver_secret").write_text(RECEIVER_SECRET)
    (root / "receiver_token").write_text(RECEIVER_TOKEN)
    settings = load_serve_config(
        {
            "listen": {"host": "127.0.0.1", "port": 0},
            "landing": str(root / "receiver_landing"),
            "endpoints": [
                {
                    "path": "/events",
                    "dialect": "savegress",
                    "landing": "savegress",
                    "auth": {
                        "signature": {
                            "secret": {"file": str(root / "receiver_secret")},
                            "timestamp_tolerance": "1h",
                        }
                    },
                }
            ],
            "grpc": {
                "listen": {"host": "127.0.0.1", "port": 0},
                "endpoints": [
                    {
                        "name": "events",
                        "landing": "grpc",
                        "auth": {"bearer": {"token": {"file": str(root / "receiver_token")}}},
                    }
                ],
            },
        },
        "(bench)",
        root,
    )
    ours = make_server(settings)
    base = _minimal_receiver(root / "receiver_minimal")
    stops = [_serving(ours), _serving(base)]
    ours_grpc = make_grpc_server(ours.receiver)
    assert ours_grpc is not None
    base_grpc, base_grpc_port = _minimal_grpc(root / "receiver_minimal_grpc")
    ours_grpc.start()
    base_grpc.start()
    try:
        warm = max(1, per_client // 10)
        for name, port in (
            ("warm-ours", ours.server_address[1]),
            ("warm-min", base.server_address[1]),
        ):
            _drive(port, "/events", _signed_requests(clients, warm, events, name))
        # side by side: rounds taken in turn, so that the load of a shared machine falls on
        # both alike; each side's figures are those of its median round
        rounds = 5
        size = max(1, per_client // rounds)
        mine: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for i in range(rounds):
            mine.append(
                _drive(
                    ours.server_address[1],
                    "/events",
                    _signed_requests(clients, size, events, f"o{i}"),
                )
            )
            theirs.append(
                _drive(
                    base.server_address[1],
                    "/events",
                    _signed_requests(clients, size, events, f"m{i}"),
                )
            )
        r_ours = _median_round(mine)
        r_base = _median_round(theirs)
        for name, port in (("warm-ours", ours_grpc.port), ("warm-min", base_grpc_port)):
            _drive_grpc(port, _grpc_calls(clients, warm, events, name))
        g_ours = _drive_grpc(ours_grpc.port, _grpc_calls(clients, per_client, events, "go"))
        g_base = _drive_grpc(base_grpc_port, _grpc_calls(clients, per_client, events, "gm"))
        # longer streams: the same events in a tenth of the calls
        long = max(1, per_client // 10)
        g_ours_long = _drive_grpc(ours_grpc.port, _grpc_calls(clients, long, events * 10, "gol"))
        g_base_long = _drive_grpc(base_grpc_port, _grpc_calls(clients, long, events * 10, "gml"))
    finally:
        for stop in stops:
            stop()
        ours_grpc.stop(5).wait(10)
        base_grpc.stop(5).wait(10)
    landed = sorted((root / "receiver_landing" / "savegress").glob("*"))
    landed_grpc = sorted((root / "receiver_landing" / "grpc").glob("*.pb"))
    r_ours["events_per_s"] = r_ours["requests_per_s"] * events
    r_base["events_per_s"] = r_base["requests_per_s"] * events
    return {
        "clients": clients,
        "requests_per_client": per_client,
        "events_per_request": events,
        "ours": r_ours,
        "baseline": r_base,
        # every acknowledged request (warm-up included) is one landed file
        "landed_files": len([p for p in landed if p.is_file()]),
        "ratio": r_ours["requests_per_s"] / r_base["requests_per_s"],
        "grpc": {
            "ours": g_ours,
            "baseline": g_base,
            # every acknowledged call (warm-up included) is one landed file
            "landed_files": len(landed_grpc),
            "ratio": g_ours["events_per_s"] / g_base["events_per_s"],
            "long_streams": {
                "events_per_call": events * 10,
                "ours": g_ours_long,
                "baseline": g_base_long,
                "ratio": g_ours_long["events_per_s"] / g_base_long["events_per_s"],
            },
        },
    }


def receiver_line(r: dict[str, Any]) -> str:
    o, b = r["ours"], r["baseline"]
    return (
        f"(d) receiver: cdcflow {o['requests_per_s']:,.0f} req/s (p50 {o['p50_ms']:.1f} ms, "
        f"p99 {o['p99_ms']:.1f} ms), minimal {b['requests_per_s']:,.0f} req/s "
        f"(p50 {b['p50_ms']:.1f} ms, p99 {b['p99_ms']:.1f} ms), ratio {r['ratio']:.2f}× "
        f"({r['clients']} clients, errors {o['errors']}/{b['errors']})"
        + (
            f"\n(d) receiver, events/s durable: webhook {o['events_per_s']:,.0f} "
            f"(minimal {b['events_per_s']:,.0f}); gRPC {g['ours']['events_per_s']:,.0f} "
            f"(p50 {g['ours']['p50_ms']:.1f} ms, p99 {g['ours']['p99_ms']:.1f} ms), minimal "
            f"gRPC server {g['baseline']['events_per_s']:,.0f}, ratio {g['ratio']:.2f}× "
            f"({r['events_per_request']} events a call, errors "
            f"{g['ours']['errors']}/{g['baseline']['errors']}); "
            f"{g['long_streams']['events_per_call']} events a call: gRPC "
            f"{g['long_streams']['ours']['events_per_s']:,.0f}, minimal "
            f"{g['long_streams']['baseline']['events_per_s']:,.0f}, ratio "
            f"{g['long_streams']['ratio']:.2f}×"
            if (g := r.get("grpc")) and "long_streams" in g
            else ""
        )
    )


def receiver_only() -> dict[str, Any]:
    """(d) alone, no Spark."""
    root = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    try:
        r = bench_receiver(root, per_client=max(10, int(200 * SCALE)))
        print(receiver_line(r), flush=True)
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)
