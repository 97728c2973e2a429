"""What a live run is asked to do (:class:`Plan`: its minutes, rates and faults) and what it
found (:class:`Report`: every replica against its table, snapshots at transaction boundaries,
dead letters, end-to-end lag)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.testing.live.workload import Settings

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Plan:
    """What a run does: seconds of workload, faults of each kind (spread over the run),
    the workload's settings, the pipeline's consistency mode."""

    duration: float = 180.0
    connect_kills: int = 2
    cdcflow_kills: int = 2
    broker_restarts: int = 1
    settings: Settings = field(default_factory=Settings)
    consistency: str = "transactions"
    follow_interval: str = "2s"

    def faults(self) -> list[tuple[float, str]]:
        """(second of the run, fault) in time order."""
        out: list[tuple[float, str]] = []
        kinds = (
            ("connect", self.connect_kills, 0.2),
            ("cdcflow", self.cdcflow_kills, 0.3),
            ("broker", self.broker_restarts, 0.45),
        )
        for name, n, first in kinds:
            for i in range(n):
                share = first + i * (0.85 - first) / max(n, 1) + (0.05 if i else 0.0)
                out.append((share * self.duration, name))
        return sorted(out)


@dataclass
class Fault:
    """A fault injected: when (seconds into the run), what, and what it took to recover."""

    at: float
    kind: str
    outcome: str = ""


@dataclass
class TableResult:
    """One table: rows in the source and the replica, whether they are equal (or the first
    difference), and how its snapshots matched transaction boundaries."""

    table: str
    source_rows: int
    replica_rows: int
    difference: str
    snapshots: int = 0
    snapshots_matched: int = 0
    snapshot_failures: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """Whether the replica equals the table and every snapshot matched a boundary."""
        return not self.difference and self.snapshots_matched == self.snapshots


@dataclass
class Report:
    """What a live run found."""

    tables: list[TableResult] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    #: when each transaction of :attr:`lags` committed in the source, in the same order
    lag_commits: list[dt.datetime] = field(default_factory=list)
    connector_catch_up: float = 0.0
    connector_lag_bytes: list[int] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)
    committed: dict[str, int] = field(default_factory=dict)
    rolled_back: dict[str, int] = field(default_factory=dict)
    cdcflow_runs: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every replica equal, every snapshot at a boundary, no dead letters."""
        return bool(self.tables) and all(t.equal for t in self.tables) and not self.dead_letters

    def lag(self, q: float) -> float:
        """A quantile of the end-to-end lag, in seconds."""
        if not self.lags:
            return float("nan")
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def lines(self) -> list[str]:
        """The report as text."""
        out = [f"{'table':<12}{'source':>8}{'replica':>9}  snapshots  result"]
        for t in self.tables:
            result = "equal" if not t.difference else f"differs: {t.difference}"
            snaps = f"{t.snapshots_matched}/{t.snapshots}"
            out.append(f"{t.table:<12}{t.source_rows:>8}{t.replica_rows:>9}  {snaps:>9}  {result}")
            out.extend(
                f"    snapshot not at a transaction boundary: {f}" for f in t.snapshot_failures
            )
        out.append(
            "transactions: "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.committed.items()))
            + (
                f"; rolled back: {sum(self.rolled_back.values())} (deadlocks, key conflicts)"
                if self.rolled_back
                else ""
            )
        )
        out.append("faults injected:")
        out.extend(f"  {f.at:7.1f}s  {f.kind:<8} {f.outcome}" for f in self.faults)
        out.append("cdcflow runs: " + "; ".join(self.cdcflow_runs))
        if self.lags:
            out.append(
                f"end-to-end lag (commit in PostgreSQL → visible in the replica) over "
                f"{len(self.lags)} transactions: median {self.lag(0.5):.1f}s, "
                f"p95 {self.lag(0.95):.1f}s, max {max(self.lags):.1f}s"
            )
        if self.connector_lag_bytes:
            out.append(
                f"connector lag behind the WAL: max {max(self.connector_lag_bytes):,} bytes; "
                f"caught up {self.connector_catch_up:.1f}s after the last commit"
            )
        out.append(f"dead letters: {len(self.dead_letters)}")
        out.extend(f"  {d}" for d in self.dead_letters[:5])
        out.append("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in self.seconds.items()))
        out.append("every replica equals its table" if self.ok else "REPLICAS DIFFER")
        return out
