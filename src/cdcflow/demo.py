"""``cdcflow demo``: the embedded default, end to end, with zero configuration.

For every dialect with a renderer: render a generated workload into a landing zone with
delivery faults, run the pipeline on the first part, then run it again on the rest plus a
redelivered overlap, and compare every replica with the oracle (one table of the unified
format is kept as an scd2 history and compared with the oracle's history).

``cdcflow demo --kafka``: a Kafka broker started for the demo; every dialect with a Kafka form
produces its workload into topics as its producer would (with duplicates and a producer
restart), and ``kafka:`` sources read them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineConfig, load_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.testing.workload import Workload

#: The demo keeps this table of the unified format's workload as an scd2 history.
HISTORY_DEMO = ("savegress", "orders")


def demo_config(
    workdir: Path,
    dialect: str,
    options: Any,
    tables: Mapping[str, Any] | None = None,
    kafka: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """The configuration the demo writes for one dialect's landing zone, or for its topics
    (``kafka``: the source's ``kafka:`` section; ``tables``: the ``tables:`` section)."""
    keys = {t: list(k) for t, k in options.table_keys.items()}
    types = {t: dict(c) for t, c in options.column_types.items()}
    extra = dict(options.extra)
    return load_config(
        {
            "pipeline": f"demo_{dialect}",
            "checkpoint": str(workdir / "checkpoints" / dialect),
            "namespace": f"demo_{dialect}",
            "catalog": {"name": "cdc", "warehouse": str(workdir / "warehouse")},
            "spark": {"master": "local[2]", "shuffle_partitions": 2},
            "sources": [
                {
                    "name": dialect,
                    **(
                        {"kafka": dict(kafka)}
                        if kafka
                        else {"path": str(workdir / "landing" / dialect)}
                    ),
                    "dialect": dialect,
                    "keys": keys,
                    "types": types,
                    "options": extra,
                }
            ],
            "tables": dict(tables or {}),
        },
        "(demo)",
    )


def run_demo(
    workdir: Path, *, seed: int = 7, transactions: int = 150, echo: Callable[[str], None] = print
) -> bool:
    """Run the demo; returns whether every replica equals the oracle."""
    from cdcflow.pipeline.query import Pipeline, open_session
    from cdcflow.pipeline.report import format_report
    from cdcflow.spark.session import session_running
    from cdcflow.testing.renderers import renderer, renderer_features, renderer_names
    from cdcflow.testing.workload import generate

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    spark = None
    own_session = not session_running()
    all_ok = True
    for dialect in renderer_names():
        render = renderer(dialect)
        # one workload per dialect: the same seed, limited to what the format can express
        workload = generate(
            seed, tables=3, transactions=transactions, features=renderer_features(dialect)
        )
        n_changes = sum(len(t.changes) for t in workload.transactions)
        echo(
            f"\n[{dialect}] workload: {len(workload.tables)} tables, "
            f"{len(workload.transactions)} transactions, {n_changes} changes (seed {seed}; "
            f"{', '.join(sorted(renderer_features(dialect)))})"
        )
        split = int(len(workload.transactions) * 0.6)
        overlap = int(len(workload.transactions) * 0.4)
        landing = workdir / "landing" / dialect
        first = render(workload, landing, seed=seed, transactions=slice(0, split))
        history = HISTORY_DEMO[1] if dialect == HISTORY_DEMO[0] else None
        tables = {history: {"mode": "scd2"}} if history else {}
        cfg = demo_config(workdir, dialect, first.options, tables)
        if spark is None:
            spark = open_session(cfg)
        pipe = Pipeline(cfg, spark)
        echo(f"[{dialect}] run 1: {len(first.files)} file(s) in {landing}")
        pipe.run(on_report=lambda r: echo("  " + format_report(r)))
        second = render(
            workload,
            landing,
            seed=seed + 1,
            transactions=slice(overlap, len(workload.transactions)),
        )
        echo(
            f"[{dialect}] run 2: {len(second.files)} more file(s), transactions "
            f"{overlap}..{split} delivered again"
        )
        pipe.run(on_report=lambda r: echo("  " + format_report(r)))
        label = f"[{dialect}] "
        ok = compare_replicas(spark, workload, cfg.namespace, history, echo, label)
        all_ok = ok and all_ok
    if spark is not None and own_session:
        spark.stop()  # as `cdcflow run` does
    echo("")
    echo("every replica equals the oracle" if all_ok else "SOME REPLICAS DIFFER FROM THE ORACLE")
    return all_ok


def compare_replicas(
    spark: SparkSession,
    workload: Workload,
    namespace: str,
    history: str | None,
    echo: Callable[[str], None],
    label: str = "",
) -> bool:
    """Print each replica of ``namespace`` against the oracle (``history``: the table kept as
    an scd2 history; ``label`` leads the first line); whether all are equal."""
    from cdcflow.testing import oracle
    from cdcflow.testing.compare import diff_table, history_shape, read_replica

    expected = oracle.apply(workload)
    all_ok = True
    echo(f"{label}replicas in cdc.{namespace}:")
    for name, table in sorted(workload.tables.items()):
        cols = [*table.key, *[c for c in table.columns if c not in table.key]]
        ident = f"cdc.{namespace}.{name}"
        if name == history:
            validity = ["__START_AT", "__END_AT"]
            actual = history_shape(read_replica(spark, ident, [*cols, *validity]), table.key)
            shape = [*cols, oracle.VERSION, oracle.ENDS]
            d = diff_table(name, oracle.history(workload)[name], actual, shape)
            mark = "equals the oracle's history" if d.equal else "DIFFERS from the oracle"
            echo(f"  {name:<12} {d.actual:>6} versions (scd2)  {mark}")
        else:
            actual = read_replica(spark, ident, cols)
            rows = list(expected.get(name, {}).values())
            d = diff_table(name, rows, actual, cols)
            mark = "equals the oracle" if d.equal else "DIFFERS from the oracle"
            echo(f"  {name:<12} {d.actual:>6} rows  {mark}")
        if not d.equal:
            all_ok = False
            for row in d.missing[:3]:
                echo(f"    missing:    {row}")
            for row in d.unexpected[:3]:
                echo(f"    unexpected: {row}")
    return all_ok


def run_kafka_demo(
    workdir: Path, *, seed: int = 7, transactions: int = 150, echo: Callable[[str], None] = print
) -> bool:
    """The demo over Kafka: a broker of its own (stopped at the end), each dialect with a
    Kafka form produced into topics as its producer would and read by a ``kafka:`` source;
    returns whether every replica equals the oracle."""
    from cdcflow.pipeline.query import Pipeline, open_session
    from cdcflow.pipeline.report import format_report
    from cdcflow.spark.session import session_running
    from cdcflow.testing.kafka import KAFKA_DIALECTS, delivery, produce
    from cdcflow.testing.renderers import renderer_features
    from cdcflow.testing.services.kafka import KafkaBroker
    from cdcflow.testing.workload import generate

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    own_session = not session_running()
    spark = None
    all_ok = True
    broker = KafkaBroker(workdir / "kafka")
    echo("starting a Kafka broker (KRaft, from its Maven artifacts) ...")
    bootstrap = broker.start()
    echo(f"broker at {bootstrap}")
    try:
        for dialect in KAFKA_DIALECTS:
            workload = generate(
                seed, tables=3, transactions=transactions, features=renderer_features(dialect)
            )
            sent = delivery(dialect, workload, seed=seed, prefix=f"demo_{dialect}")
            stored = produce(bootstrap, sent.records)
            parts = {(t, p) for t, p, _ in stored}
            echo(
                f"\n[{dialect}] {len(stored)} records into {len(sent.topics)} topic(s), "
                f"{len(parts)} partitions (with duplicates and a producer restart's resend)"
            )
            kafka = {"bootstrap_servers": bootstrap, "topics": sent.topics}
            cfg = demo_config(workdir, dialect, sent.options, kafka=kafka)
            if spark is None:
                spark = open_session(cfg)
            Pipeline(cfg, spark).run(on_report=lambda r: echo("  " + format_report(r)))
            ok = compare_replicas(spark, workload, cfg.namespace, None, echo, f"[{dialect}] ")
            all_ok = ok and all_ok
    finally:
        if spark is not None and own_session:
            spark.stop()
        broker.stop()
        echo("broker stopped")
    echo("")
    echo("every replica equals the oracle" if all_ok else "SOME REPLICAS DIFFER FROM THE ORACLE")
    return all_ok
