"""(s) Spark Connect: the same batches of change rows applied by ``cdc.apply_changes`` on a
classic session and over a Spark Connect server, paired batch by batch.

Both sessions have the same settings (``local[2]``, 2 shuffle partitions, a 1 GiB driver, the
embedded catalog in a warehouse of their own); the server is the one the tests start
(:class:`cdcflow.testing.services.spark_connect.SparkConnectServer`, from the installed
PySpark 4). Each batch is ``BENCH_CONNECT_ROWS`` (1,000) change rows of one table — updates of
the same keys, every 50th a delete — and the figure is the median of the steady batches (the
first two, which create the tables and warm both JVMs, left out); the replicas are compared at
the end. Then the same batches as a stream (a folder of parquet files, one more each run)
applied by ``cdc.apply_changes`` of a streaming DataFrame, one run (``availableNow``) per
batch: the batch's own seconds (its report: the ``foreachBatch`` function's time, on the
server over Connect) and the run's wall time from start to its end (the query's start, the
batch, and over Connect the batch's report read back from the history). Runs in a process
of its own (it starts its own classic session), skipped with one line on PySpark 3.5, whose
package carries no Connect server.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as RemoteSession

BATCHES = int(os.environ.get("BENCH_CONNECT_BATCHES", "8"))
ROWS = int(os.environ.get("BENCH_CONNECT_ROWS", "1000"))
SCHEMA = "userId bigint, name string, city string, operation string, sequenceNum bigint"


def rows(batch: int) -> list[tuple[int, str, str, str, int]]:
    """One batch of change rows: every key updated, every 50th deleted (after the first)."""
    return [
        (
            k,
            f"n{batch}",
            f"c{(k + batch) % 7}",
            "DELETE" if batch and k % 50 == 0 else "UPSERT",
            batch * 100_000 + k,
        )
        for k in range(ROWS)
    ]


def apply(session: SparkSession | RemoteSession, checkpoint: Path, batch: int) -> float:
    """Seconds of one ``apply_changes`` of a batch."""
    import cdcflow.api as cdc

    frame = session.createDataFrame(rows(batch), SCHEMA)
    started = time.perf_counter()
    result = cdc.apply_changes(
        target="users",
        source=frame,
        keys=["userId"],
        sequence_by="sequenceNum",
        apply_as_deletes="operation = 'DELETE'",
        except_column_list=["operation"],
        namespace="bench_connect",
        checkpoint=str(checkpoint),
    )
    if getattr(result, "exit_status", 1) != 0:
        raise RuntimeError(f"batch {batch} ended with {result!r}")
    return time.perf_counter() - started


def stream(
    session: SparkSession | RemoteSession, home: Path, kind: str, batch: int
) -> tuple[float, float]:
    """One run of ``apply_changes`` over a stream holding one more batch: its wall seconds
    and the batch's own."""
    import cdcflow.api as cdc

    feed = home / f"feed-{kind}"
    session.createDataFrame(rows(batch), SCHEMA).write.parquet(str(feed / str(batch)))
    started = time.perf_counter()
    pipe = cdc.apply_changes(
        target="users",
        source=session.readStream.schema(SCHEMA).parquet(f"{feed}/*"),
        keys=["userId"],
        sequence_by="sequenceNum",
        apply_as_deletes="operation = 'DELETE'",
        except_column_list=["operation"],
        namespace="bench_connect_stream",
        checkpoint=str(home / f"chk-stream-{kind}"),
    )
    result = pipe.wait()  # type: ignore[union-attr]
    wall = time.perf_counter() - started
    if result.exit_status != 0 or len(result.reports) != 1:
        raise RuntimeError(f"stream batch {batch} ended with {result!r}")
    return wall, result.reports[-1].seconds


def measure(home: Path) -> dict[str, Any]:
    """Both kinds of session, batch by batch; their seconds and the steady medians."""
    from pyspark.sql.connect.session import SparkSession as Remote

    from cdcflow.spark.session import SparkSettings, build_session
    from cdcflow.testing.services.spark_connect import SparkConnectServer, default_settings

    settings = default_settings(home / "classic")
    classic = build_session(
        SparkSettings(
            master=settings.master,
            warehouse=settings.warehouse,
            shuffle_partitions=settings.shuffle_partitions,
            conf=dict(settings.conf),
        )
    )
    try:
        with SparkConnectServer(home / "server") as server:
            remote = Remote.builder.remote(server.url).create()
            try:
                seconds: dict[str, list[float]] = {"classic": [], "connect": []}
                for b in range(BATCHES):
                    seconds["classic"].append(apply(classic, home / "chk-classic", b))
                    seconds["connect"].append(apply(remote, home / "chk-connect", b))
                    print(
                        f"  (s) batch {b}: classic {seconds['classic'][-1]:.2f} s, "
                        f"connect {seconds['connect'][-1]:.2f} s",
                        flush=True,
                    )
                table = "cdc.bench_connect.users"
                ours = sorted(tuple(r) for r in classic.table(table).drop("_cdc").collect())
                theirs = sorted(tuple(r) for r in remote.table(table).drop("_cdc").collect())
                walls: dict[str, list[float]] = {"classic": [], "connect": []}
                own: dict[str, list[float]] = {"classic": [], "connect": []}
                for b in range(BATCHES):
                    for kind, session in (("classic", classic), ("connect", remote)):
                        wall, batch = stream(session, home, kind, b)
                        walls[kind].append(wall)
                        own[kind].append(batch)
                    print(
                        f"  (s) stream batch {b}: classic {own['classic'][-1]:.2f} s "
                        f"({walls['classic'][-1]:.2f} s run), connect {own['connect'][-1]:.2f} s "
                        f"({walls['connect'][-1]:.2f} s run)",
                        flush=True,
                    )
                table = "cdc.bench_connect_stream.users"
                streamed = sorted(tuple(r) for r in classic.table(table).drop("_cdc").collect())
                streamed_remote = sorted(
                    tuple(r) for r in remote.table(table).drop("_cdc").collect()
                )
            finally:
                remote.stop()
    finally:
        classic.stop()
    steady = {k: statistics.median(v[2:]) for k, v in seconds.items()}
    per_batch = {k: statistics.median(v[2:]) for k, v in own.items()}
    per_run = {k: statistics.median(v[2:]) for k, v in walls.items()}
    return {
        "stream": {
            "batch_seconds": own,
            "run_seconds": walls,
            "steady_batch_classic": per_batch["classic"],
            "steady_batch_connect": per_batch["connect"],
            "batch_ratio": per_batch["connect"] / per_batch["classic"],
            "steady_run_classic": per_run["classic"],
            "steady_run_connect": per_run["connect"],
            "run_ratio": per_run["connect"] / per_run["classic"],
            "equal": streamed == streamed_remote,
        },
        "rows_per_batch": ROWS,
        "batches": BATCHES,
        "seconds": seconds,
        "steady_classic": steady["classic"],
        "steady_connect": steady["connect"],
        "ratio": steady["connect"] / steady["classic"],
        "replica_rows": len(ours),
        "equal": ours == theirs,
    }


def run() -> dict[str, Any]:
    """The part in a child process (it starts its own classic session); its figures."""
    from cdcflow.testing.services.spark_connect import server_jar

    if server_jar() is None:
        import pyspark

        print(f"(s) connect: skipped: PySpark {pyspark.__version__} has no Connect server")
        return {"skipped": f"PySpark {pyspark.__version__} carries no Spark Connect server"}
    home = Path(tempfile.mkdtemp(prefix="cdcflow-connect-"))
    out = home / "result.json"
    cmd = [sys.executable, "-m", "bench.connect", str(home), str(out)]
    done = subprocess.run(cmd, cwd=Path(__file__).parent.parent, check=False)
    if done.returncode != 0 or not out.exists():
        print(f"(s) connect: failed ({done.returncode})", flush=True)
        return {"failed": done.returncode}
    found: dict[str, Any] = json.loads(out.read_text())
    print(line(found), flush=True)
    return found


def line(r: dict[str, Any]) -> str:
    """The part's figures as a line."""
    s = r["stream"]
    return (
        f"(s) a batch of {r['rows_per_batch']:,} change rows into one table, median of "
        f"{r['batches'] - 2}: classic {r['steady_classic']:.2f} s, Spark Connect "
        f"{r['steady_connect']:.2f} s ({r['ratio']:.2f}x); replicas "
        f"{'equal' if r['equal'] else 'DIFFER'} ({r['replica_rows']:,} rows); as a stream, "
        f"the batch {s['steady_batch_classic']:.2f} s against {s['steady_batch_connect']:.2f} s "
        f"({s['batch_ratio']:.2f}x), a run {s['steady_run_classic']:.2f} s against "
        f"{s['steady_run_connect']:.2f} s ({s['run_ratio']:.2f}x); replicas "
        f"{'equal' if s['equal'] else 'DIFFER'}"
    )


if __name__ == "__main__":
    home, result = Path(sys.argv[1]), Path(sys.argv[2])
    result.write_text(json.dumps(measure(home)))
