"""(i) the soak: many small batches over many tables, with maintenance on (or off), the
replicas' files and snapshots followed, and the tables against the hand-written job's."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.baselines import LSN_NUMBER
from bench.common import BASELINE_SCHEMA, write_tables
from bench.runner import Follow, copier, multi_cfg

if TYPE_CHECKING:
    pass


def _soak_state(spark: Any, root: Path, batch: int) -> dict[str, Any]:
    """One replica of the soak (``t000``) and the warehouse after ``batch`` batches: data and
    delete files, snapshots, its metadata and storage bytes, and a full read of it (timed)."""
    ident = "cdc.bench_soak.t000"
    counts = spark.sql(
        f"SELECT content, count(*) AS n FROM {ident}.files GROUP BY content"
    ).collect()
    by_content = {int(r["content"]): int(r["n"]) for r in counts}
    snapshots = spark.sql(f"SELECT count(*) AS n FROM {ident}.snapshots").collect()[0]["n"]
    t = time.perf_counter()
    read = spark.sql(f"SELECT * FROM {ident}").toPandas()
    read_s = time.perf_counter() - t

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    table = root / "warehouse" / "bench_soak" / "t000"
    return {
        "batch": batch,
        "table_rows": len(read),
        "data_files": by_content.get(0, 0),
        "delete_files": by_content.get(1, 0) + by_content.get(2, 0),
        "snapshots": int(snapshots),
        "metadata_bytes": size(table / "metadata"),
        "table_bytes": size(table),
        "warehouse_bytes": size(root / "warehouse"),
        "read_seconds": read_s,
    }


def _soak_state_line(s: dict[str, Any], seconds: list[float]) -> str:
    recent = statistics.median(seconds[-10:]) if seconds else 0.0
    return (
        f"    soak at batch {s['batch']}: median of the last 10 batches {recent:.1f}s; t000 "
        f"{s['table_rows']:,} rows in {s['data_files']} data + {s['delete_files']} delete "
        f"files, {s['snapshots']} snapshots, metadata {s['metadata_bytes'] / 1e6:.1f} MB, "
        f"table {s['table_bytes'] / 1e6:.1f} MB, full read {s['read_seconds']:.2f}s; "
        f"warehouse {s['warehouse_bytes'] / 1e6:.0f} MB"
    )


def _maintenance_seconds(report: Any) -> dict[str, float]:
    """Seconds of each kind of maintenance action after a batch, from its progress lines
    (``rewrite_data_files t000 (41 → 1 files, 0.9s)``)."""
    out: dict[str, float] = {}
    for line in getattr(report, "maintenance", ()) or ():
        action = line.split(" ", 1)[0]
        took = line.rsplit(", ", 1)[-1].rstrip(")s")
        out[action] = out.get(action, 0.0) + float(took)
    return out


def _soak_differing(spark: Any, files: list[Path], tables: int) -> int:
    """Rows in which the replicas and the oracle differ, both ways, over all tables. The
    oracle: every soak file at once, the newest event per key by its LSN read as a number
    (the files hold each key's events in LSN order), deletes dropped."""
    lsn = LSN_NUMBER
    spark.read.text([str(f) for f in files]).selectExpr(
        f"from_json(value, '{BASELINE_SCHEMA}') AS e"
    ).selectExpr(
        "e.`table` AS tbl",
        "coalesce(e.after.id, e.before.id) AS id",
        "e.operation AS op",
        "e.after.name AS name",
        "e.after.qty AS qty",
        "CAST(e.after.price AS decimal(10,2)) AS price",
        "CAST(e.after.updated_at AS timestamp) AS updated_at",
        f"row_number() OVER (PARTITION BY e.`table`, coalesce(e.after.id, e.before.id) "
        f"ORDER BY {lsn} DESC) AS rn",
    ).where("rn = 1 AND op <> 'DELETE'").createOrReplaceTempView("bench_soak_oracle")
    columns = "id, name, qty, price, updated_at"
    differing = 0
    for t in range(tables):
        ours = f"SELECT {columns} FROM cdc.bench_soak.t{t:03d}"
        oracle = f"SELECT {columns} FROM bench_soak_oracle WHERE tbl = 't{t:03d}'"
        for one, other in ((ours, oracle), (oracle, ours)):
            query = f"SELECT count(*) AS n FROM ({one} EXCEPT ALL {other})"
            differing += spark.sql(query).collect()[0]["n"]
    return int(differing)


def bench_soak(spark: Any, root: Path, batches: int, tables: int, events: int) -> dict[str, Any]:
    """(m) months in miniature: ``batches`` batches of ``events`` events over ``tables`` tables
    in one ``--follow`` run. Batch times (each batch's trigger, maintenance included); every
    tenth of the run (at most every 100 batches) what one replica and the warehouse are (see
    :func:`_soak_state`); at the end the median of the last ``window`` batches over the first
    ``window`` after a warm-up of 10 (``window`` = 100, or a tenth of a shorter run), and the
    replicas against the oracle."""
    files = root / "soak_files"
    landing = root / "soak_landing"
    landing.mkdir(parents=True)
    keys = 200
    lsn = write_tables(files / "0000.jsonl", tables * keys, tables, keys, 1, 1, inserts_only=True)
    paths = [files / "0000.jsonl"]
    cfg = multi_cfg(root, "bench_soak", landing, tables)
    every = max(1, min(100, batches // 10))
    warmup = min(10, batches // 10)
    follow = Follow(spark, cfg)
    seconds: list[float] = []
    rounds: list[dict[str, float]] = []  # per batch: seconds of each maintenance action
    states: list[dict[str, Any]] = []
    try:
        follow.batch(copier(paths[0], landing))
        for b in range(1, batches + 1):
            paths.append(files / f"{b:04d}.jsonl")
            lsn = write_tables(paths[-1], events, tables, keys, seed=100 + b, first_lsn=lsn)
            took, report = follow.batch(copier(paths[-1], landing))
            seconds.append(took)
            rounds.append(_maintenance_seconds(report))
            if b % every == 0 or b == batches:
                states.append(_soak_state(spark, root, b))
                recent = [r for r in rounds[-every:] if r]
                print(_soak_state_line(states[-1], seconds), flush=True)
                if recent:
                    print(f"      maintenance rounds since the last line: {recent}", flush=True)
    finally:
        follow.stop()
    window = every
    first = statistics.median(seconds[warmup : warmup + window])
    last = statistics.median(seconds[-window:])
    medians = [statistics.median(seconds[i : i + every]) for i in range(0, len(seconds), every)]
    return {
        "batches": batches,
        "tables": tables,
        "events_per_batch": events,
        "maintenance": os.environ.get("BENCH_MAINTENANCE", "on"),
        "window": window,
        "first_window_median_seconds": first,
        "last_window_median_seconds": last,
        "growth": last / first if first else None,
        "first_window_mean_seconds": statistics.mean(seconds[warmup : warmup + window]),
        "last_window_mean_seconds": statistics.mean(seconds[-window:]),
        "median_seconds_per_window": medians,
        "states": states,
        "total_seconds": sum(seconds),
        "maintenance_rounds": [{"batch": b + 1, **r} for b, r in enumerate(rounds) if r],
        "rows_differing_from_oracle": _soak_differing(spark, paths, tables),
    }


def soak_line(r: dict[str, Any]) -> str:
    windows = ", ".join(f"{m:.1f}" for m in r["median_seconds_per_window"])
    start, end = r["states"][0], r["states"][-1]
    return (
        f"(m) soak, {r['batches']} batches of {r['events_per_batch']:,} events over "
        f"{r['tables']} tables, maintenance {r['maintenance']}: median s/batch of the last "
        f"{r['window']} over the first {r['window']} {r['last_window_median_seconds']:.1f}/"
        f"{r['first_window_median_seconds']:.1f}s = {r['growth']:.2f}× (means "
        f"{r['last_window_mean_seconds']:.1f}/{r['first_window_mean_seconds']:.1f}s; medians per "
        f"{r['window']}: "
        f"[{windows}]); t000 at batch {start['batch']} → {end['batch']}: files "
        f"{start['data_files']}+{start['delete_files']} → {end['data_files']}+"
        f"{end['delete_files']}, snapshots {start['snapshots']} → {end['snapshots']}, metadata "
        f"{start['metadata_bytes'] / 1e6:.1f} → {end['metadata_bytes'] / 1e6:.1f} MB, full read "
        f"{start['read_seconds']:.2f} → {end['read_seconds']:.2f}s; warehouse "
        f"{start['warehouse_bytes'] / 1e6:.0f} → {end['warehouse_bytes'] / 1e6:.0f} MB; rows "
        f"differing from the oracle: {r['rows_differing_from_oracle']}"
    )
