"""``make bench``: throughput and scaling as ratios against baselines run in the same process.

(a) decode: savegress JSON lines → canonical events (binaryFile + mapInArrow) vs
    ``spark.read.text`` + ``from_json`` with an explicit schema, same files.
(b) end to end: events/s into an Iceberg replica vs a hand-written minimal pipeline
    (``from_json`` + ``row_number`` dedup + one ``MERGE INTO``, no guards), same workload.
(c) growth: time of one fixed batch of changes against a replica of S rows and of 100×S rows.

Results: ``bench/results/bench.json`` and ``bench/results/bench.png``. Sizes scale with the
environment variable ``BENCH_SCALE`` (default 1.0).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

RESULTS = Path(__file__).parent / "results"
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))


def _lsn(n: int) -> str:
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
        row = {
            "id": k,
            "name": f"item-{k}-{i}",
            "qty": rng.randrange(1000),
            "price": f"{rng.randrange(100000) / 100:.2f}",
            "updated_at": "2025-01-15T10:30:00.123456Z",
        }
        doc: dict[str, Any] = {
            "id": f"e{lsn}",
            "operation": op,
            "table": "items",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": _lsn(lsn), "sequence": 0},
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


def bench_decode(spark: Any, root: Path, n: int) -> dict[str, float]:
    from cdcflow.dialects.base import DialectOptions
    from cdcflow.spark.arrow import decode_dataframe, read_raw

    folder = root / "decode"
    write_events(folder, n, keys=n // 4, files=8)

    def baseline() -> None:
        df = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
        df.selectExpr("sum(xxhash64(e.*)) AS h").collect()

    def ours() -> None:
        opts = DialectOptions(table_keys={"items": ("id",)}, column_types=TYPES)
        df = decode_dataframe(read_raw(spark, str(folder), streaming=False), "savegress", opts)
        df.selectExpr(
            "sum(xxhash64(id, sequence, operation, to_json(after), to_json(before), "
            "timestamp)) AS h"
        ).collect()

    baseline()  # warm up both paths once
    ours()
    t_base = _best(baseline)
    t_ours = _best(ours)
    return {
        "events": n,
        "baseline_events_per_s": n / t_base,
        "ours_events_per_s": n / t_ours,
        "ratio": t_base / t_ours,
    }


def _best(fn: Any, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _pipeline_cfg(root: Path, name: str, landing: Path) -> Any:
    from cdcflow.config import load_config

    return load_config(
        {
            "pipeline": name,
            "checkpoint": str(root / f"ck_{name}"),
            "namespace": name,
            "catalog": {"name": "cdc", "type": "hadoop", "warehouse": str(root / "warehouse")},
            "sources": [
                {
                    "name": "s",
                    "path": str(landing),
                    "dialect": "savegress",
                    "keys": {"items": ["id"]},
                    "types": TYPES,
                }
            ],
        }
    )


def handwritten(spark: Any, folder: Path, table: str) -> None:
    """The minimal pipeline people write by hand: dedup by row_number, one MERGE, no guards."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} (id bigint, name string, qty bigint, "
        "price decimal(10,2), updated_at timestamp) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
    )
    src = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
    src.createOrReplaceTempView("bench_raw")
    spark.sql("""
        SELECT coalesce(e.after.id, e.before.id) AS id, e.operation AS op, e.after.name AS name,
               e.after.qty AS qty, CAST(e.after.price AS decimal(10,2)) AS price,
               CAST(e.after.updated_at AS timestamp) AS updated_at,
               row_number() OVER (PARTITION BY coalesce(e.after.id, e.before.id)
                                  ORDER BY e.position.lsn DESC) AS rn
        FROM bench_raw
    """).where("rn = 1").createOrReplaceTempView("bench_latest")
    spark.sql(f"""
        MERGE INTO {table} t USING bench_latest s ON t.id = s.id
        WHEN MATCHED AND s.op = 'DELETE' THEN DELETE
        WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, price = s.price,
             updated_at = s.updated_at
        WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT (id, name, qty, price, updated_at)
             VALUES (s.id, s.name, s.qty, s.price, s.updated_at)
    """)


def bench_end_to_end(spark: Any, root: Path, n: int) -> dict[str, float]:
    from cdcflow.engine.pipeline import Pipeline

    folder = root / "e2e"
    write_events(folder, n, keys=max(1, n // 5), files=8)
    t = time.perf_counter()
    handwritten(spark, folder, "cdc.bench_hand.items")
    t_base = time.perf_counter() - t
    cfg = _pipeline_cfg(root, "bench_e2e", folder)
    t = time.perf_counter()
    Pipeline(cfg, spark).run()
    t_ours = time.perf_counter() - t
    same = spark.sql(
        "SELECT count(*) AS n FROM (SELECT id, name, qty, price, updated_at FROM "
        "cdc.bench_e2e.items EXCEPT SELECT * FROM cdc.bench_hand.items)"
    ).collect()[0]["n"]
    return {
        "events": n,
        "baseline_events_per_s": n / t_base,
        "ours_events_per_s": n / t_ours,
        "ratio": t_base / t_ours,
        "rows_differing_from_baseline": int(same),
    }


def bench_growth(spark: Any, root: Path, base_rows: int, batch: int) -> dict[str, float]:
    from cdcflow.engine.pipeline import Pipeline

    out: dict[str, float] = {}
    for label, rows in (("small", base_rows), ("large", base_rows * 100)):
        landing = root / f"growth_{label}"
        write_events(landing / "load", rows, keys=0, files=16, inserts_only=True)
        cfg = _pipeline_cfg(root, f"bench_growth_{label}", landing)
        Pipeline(cfg, spark).run()
        # the fixed batch: updates of random existing keys and new inserts
        write_events(landing / "batch", batch, keys=rows, files=2, seed=9, first_lsn=rows + 10)
        t = time.perf_counter()
        Pipeline(cfg, spark).run()
        out[f"{label}_rows"] = rows
        out[f"{label}_seconds"] = time.perf_counter() - t
    out["cost_ratio_100x"] = out["large_seconds"] / out["small_seconds"]
    return out


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    d, e, g = results["decode"], results["end_to_end"], results["growth"]
    axes[0].bar(["from_json", "cdcflow"], [d["baseline_events_per_s"], d["ours_events_per_s"]])
    axes[0].set_title(f"decode events/s (×{d['ratio']:.2f})")
    axes[1].bar(["hand-written", "cdcflow"], [e["baseline_events_per_s"], e["ours_events_per_s"]])
    axes[1].set_title(f"end-to-end events/s (×{e['ratio']:.2f})")
    axes[2].bar(
        [f"{g['small_rows']:,} rows", f"{g['large_rows']:,} rows"],
        [g["small_seconds"], g["large_seconds"]],
    )
    axes[2].set_title(f"fixed batch seconds (×{g['cost_ratio_100x']:.2f})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    from cdcflow.spark.session import SparkSettings, build_session

    root = Path(tempfile.mkdtemp(prefix="cdcflow-bench-"))
    try:
        spark = build_session(
            SparkSettings(warehouse=str(root / "warehouse"), shuffle_partitions=4)
        )
        results: dict[str, Any] = {"machine": {"cores": os.cpu_count()}, "scale": SCALE}
        results["decode"] = bench_decode(spark, root, int(400_000 * SCALE))
        print(
            f"(a) decode: cdcflow {results['decode']['ours_events_per_s']:,.0f} events/s, "
            f"from_json {results['decode']['baseline_events_per_s']:,.0f} events/s, "
            f"ratio {results['decode']['ratio']:.2f}×",
            flush=True,
        )
        results["end_to_end"] = bench_end_to_end(spark, root, int(200_000 * SCALE))
        e = results["end_to_end"]
        print(
            f"(b) end to end: cdcflow {e['ours_events_per_s']:,.0f} events/s, hand-written "
            f"{e['baseline_events_per_s']:,.0f} events/s, ratio {e['ratio']:.2f}× "
            f"(rows differing: {e['rows_differing_from_baseline']})",
            flush=True,
        )
        results["growth"] = bench_growth(spark, root, int(10_000 * SCALE), int(10_000 * SCALE))
        g = results["growth"]
        print(
            f"(c) growth: fixed batch {g['small_seconds']:.1f}s at {g['small_rows']:,} rows, "
            f"{g['large_seconds']:.1f}s at {g['large_rows']:,} rows, "
            f"ratio {g['cost_ratio_100x']:.2f}×",
            flush=True,
        )
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "bench.json").write_text(json.dumps(results, indent=2))
        chart(results, RESULTS / "bench.png")
        print(f"results: {RESULTS / 'bench.json'}, {RESULTS / 'bench.png'}")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
