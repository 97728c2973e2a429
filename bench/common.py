"""What every case of the benchmarks shares: where results go, the scale, the tables' format
version, the steady batches timed, and the Debezium-shaped events the cases write."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    pass

RESULTS = Path(__file__).parent / "results"
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
#: The tables' Iceberg format version, cdcflow's and the hand-written jobs' alike
#: (``BENCH_FORMAT=3``: deletion vectors).
FORMAT = os.environ.get("BENCH_FORMAT", "2")
#: Steady batches timed per shape (the median counts), after a first load and
#: :data:`WARM_BATCHES` batches: both sides get faster over their first few batches as the JVM
#: compiles (cdcflow, 20,000 events into one table: 4.7, 4.1, 3.2 s over its 2nd to 4th batch).
STEADY_BATCHES = int(os.environ.get("BENCH_STEADY_BATCHES", "3"))
WARM_BATCHES = 2


def lsn_text(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def write_events(
    folder: Path,
    n: int,
    keys: int,
    files: int,
    seed: int = 1,
    first_lsn: int = 1,
    inserts_only: bool = False,
) -> None:
    """Savegress events over one table ``items`` (id, name, qty, price, updated_at)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_file = max(1, n // files)
    lsn = first_lsn
    alive: set[int] = set()
    out: list[bytes] = []
    file_no = 0
    for i in range(n):
        if inserts_only:
            k = keys + i
            op = "INSERT"
        else:
            k = rng.randrange(keys)
            op = "UPDATE" if k in alive else "INSERT"
            if k in alive and rng.random() < 0.1:
                op = "DELETE"
        row = _row(k, i, rng)
        doc: dict[str, Any] = {
            "id": f"e{lsn}",
            "operation": op,
            "table": "items",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": lsn_text(lsn), "sequence": 0},
        }
        if op == "DELETE":
            doc["before"] = row
            alive.discard(k)
        else:
            doc["after"] = row
            alive.add(k)
        lsn += 1
        out.append(orjson.dumps(doc))
        if len(out) >= per_file:
            (folder / f"{file_no:05d}.jsonl").write_bytes(b"\n".join(out) + b"\n")
            file_no += 1
            out = []
    if out:
        (folder / f"{file_no:05d}.jsonl").write_bytes(b"\n".join(out) + b"\n")


BASELINE_SCHEMA = (
    "id string, operation string, `table` string, source string, `timestamp` string, "
    "position struct<lsn:string, sequence:bigint>, "
    "before struct<id:bigint, name:string, qty:bigint, price:string, updated_at:string>, "
    "after struct<id:bigint, name:string, qty:bigint, price:string, updated_at:string>"
)
TYPES = {"items": {"price": "numeric(10,2)", "updated_at": "timestamptz"}}


MULTI_COLUMNS = "id bigint, name string, qty bigint, price decimal(10,2), updated_at timestamp"


def write_tables(
    path: Path,
    n: int,
    tables: int,
    keys: int,
    seed: int,
    first_lsn: int,
    inserts_only: bool = False,
) -> int:
    """One JSON-lines file of ``n`` savegress events over tables ``t000``.. (10 % deletes of
    live keys); returns the next LSN."""
    rng = random.Random(seed)
    alive: set[tuple[int, int]] = set()
    if not inserts_only:
        alive = {(t, k) for t in range(tables) for k in range(keys)}
    out: list[bytes] = []
    lsn = first_lsn
    for i in range(n):
        if inserts_only:
            t, k = i % tables, i // tables
            op = "INSERT"
        else:
            t, k = rng.randrange(tables), rng.randrange(keys * 2)
            op = "UPDATE" if (t, k) in alive else "INSERT"
            if (t, k) in alive and rng.random() < 0.1:
                op = "DELETE"
        row = _row(k, i, rng)
        doc: dict[str, Any] = {
            "id": f"m{lsn}",
            "operation": op,
            "table": f"t{t:03d}",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": lsn_text(lsn), "sequence": 0},
        }
        if op == "DELETE":
            doc["before"] = row
            alive.discard((t, k))
        else:
            doc["after"] = row
            alive.add((t, k))
        lsn += 1
        out.append(orjson.dumps(doc))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("_" + path.name)
    tmp.write_bytes(b"\n".join(out) + b"\n")
    tmp.rename(path)
    return lsn


def _row(k: int, i: int, rng: random.Random) -> dict[str, Any]:
    """The row image of key ``k`` in the ``i``-th event."""
    return {
        "id": k,
        "name": f"item-{k}-{i}",
        "qty": rng.randrange(1000),
        "price": f"{rng.randrange(100000) / 100:.2f}",
        "updated_at": "2025-01-15T10:30:00.123456Z",
    }
