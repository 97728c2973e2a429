"""(a) decode: cdcflow's decoding against Spark's ``from_json`` on the same files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import BASELINE_SCHEMA, TYPES, write_events
from bench.runner import best_of

if TYPE_CHECKING:
    pass


def bench_decode(spark: Any, root: Path, n: int) -> dict[str, float]:
    """Decoded events/s against ``from_json``'s parsed rows/s on the same files. Both sides
    hash every parsed field; our row images are maps, which Spark hashes as their entries
    (``map_entries``). ``ratio_to_json`` is the same run hashing ``to_json`` of the maps
    instead, the consumer of earlier versions (it adds JSON writing to our side only)."""
    from cdcflow.decode.spark import decode_dataframe
    from cdcflow.dialects.model import DialectOptions
    from cdcflow.sources.landing import read_raw

    folder = root / "decode"
    write_events(folder, n, keys=n // 4, files=8)

    def baseline() -> None:
        df = spark.read.text(str(folder)).selectExpr(f"from_json(value, '{BASELINE_SCHEMA}') AS e")
        df.selectExpr("bit_xor(xxhash64(e.*)) AS h").collect()

    def ours(image: str) -> None:
        opts = DialectOptions(table_keys={"items": ("id",)}, column_types=TYPES)
        df = decode_dataframe(read_raw(spark, str(folder), streaming=False), "savegress", opts)
        df.selectExpr(
            f"bit_xor(xxhash64(id, sequence, operation, {image}(after), {image}(before), "
            "timestamp)) AS h"
        ).collect()

    baseline()  # warm up every path once
    ours("map_entries")
    t_base = best_of(baseline)
    t_ours = best_of(lambda: ours("map_entries"))
    t_json = best_of(lambda: ours("to_json"))
    return {
        "events": n,
        "baseline_events_per_s": n / t_base,
        "ours_events_per_s": n / t_ours,
        "ratio": t_base / t_ours,
        "ours_to_json_events_per_s": n / t_json,
        "ratio_to_json": t_base / t_json,
    }


def decode_line(d: dict[str, Any]) -> str:
    return (
        f"(a) decode: cdcflow {d['ours_events_per_s']:,.0f} events/s, "
        f"from_json {d['baseline_events_per_s']:,.0f} events/s, ratio {d['ratio']:.2f}× "
        f"(hashing to_json of the maps: {d['ours_to_json_events_per_s']:,.0f} events/s, "
        f"{d['ratio_to_json']:.2f}×)"
    )
