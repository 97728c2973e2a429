"""``bench/results/bench.png``: one panel per case present in the results."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


def chart(results: dict[str, Any], path: Path) -> None:
    """One panel per case present in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[list[str], list[float], str]] = []
    if "decode" in results:
        d = results["decode"]
        panels.append(
            (
                ["from_json", "cdcflow"],
                [d["baseline_events_per_s"], d["ours_events_per_s"]],
                f"(a) decode events/s (×{d['ratio']:.2f})",
            )
        )
    if "end_to_end" in results:
        e = results["end_to_end"]
        panels.append(
            (
                ["hand-written", "cdcflow"],
                [e["baseline_events_per_s"], e["ours_events_per_s"]],
                f"(b) end-to-end events/s (×{e['ratio']:.2f})",
            )
        )
    if "growth" in results:
        g = results["growth"]
        panels.append(
            (
                [f"{g['small_rows']:,} rows", f"{g['large_rows']:,} rows"],
                [g["small_seconds"], g["large_seconds"]],
                f"(c) fixed batch seconds (×{g['cost_ratio_100x']:.2f})",
            )
        )
    if "receiver" in results:
        r = results["receiver"]
        panels.append(
            (
                ["minimal", "cdcflow serve"],
                [r["baseline"]["requests_per_s"], r["ours"]["requests_per_s"]],
                f"(d) receiver acked req/s (×{r['ratio']:.2f})",
            )
        )
        if "grpc" in r:
            g = r["grpc"]
            panels.append(
                (
                    ["minimal grpcio", "cdcflow serve"],
                    [g["baseline"]["events_per_s"], g["ours"]["events_per_s"]],
                    f"(d) gRPC durable events/s (×{g['ratio']:.2f})",
                )
            )
    for key, tag in (("many_tables", "e"), ("small_batches", "f")):
        if key in results:
            m = results[key]
            panels.append(
                (
                    ["hand-written", "steady", "new run"],
                    [
                        m["hand_written_seconds"],
                        m["ours_steady_seconds"],
                        m["ours_new_run_seconds"],
                    ],
                    f"({tag}) {m['tables']} table(s) batch seconds (×{m['ratio_steady']:.2f})",
                )
            )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (labels, values, title) in zip(axes[0], panels, strict=True):
        ax.bar(labels, values)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
