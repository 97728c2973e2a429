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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cdcflow.config import PipelineConfig, load_config, load_config_file, relative_to
from cdcflow.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.simulation.workload import Workload

#: The demo keeps this table of the unified format's workload as an scd2 history.
HISTORY_DEMO = ("savegress", "orders")


def demo_settings(
    workdir: Path,
    dialect: str,
    options: Any,
    tables: Mapping[str, Any] | None = None,
    kafka: Mapping[str, Any] | None = None,
    catalog: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The configuration the demo writes for one dialect's landing zone, or for its topics
    (``kafka``: the source's ``kafka:`` section; ``tables``: the ``tables:`` section), as the
    YAML file holds it: paths relative to ``workdir`` (the file's folder); ``catalog``: the
    ``catalog:`` section (default: the embedded catalog in ``<workdir>/warehouse``)."""
    keys = {t: list(k) for t, k in options.table_keys.items()}
    types = {t: dict(c) for t, c in options.column_types.items()}
    source: dict[str, Any] = {"name": dialect}
    source.update({"kafka": dict(kafka)} if kafka else {"path": f"landing/{dialect}"})
    source.update({"dialect": dialect, "keys": keys, "types": types})
    if options.extra:
        source["options"] = dict(options.extra)
    doc: dict[str, Any] = {
        "pipeline": f"demo_{dialect}",
        "checkpoint": f"checkpoints/{dialect}",
        "namespace": f"demo_{dialect}",
        "catalog": dict(catalog or {"name": "cdc", "warehouse": "warehouse"}),
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
        "sources": [source],
    }
    if tables:
        doc["tables"] = dict(tables)
    return doc


def demo_config(
    workdir: Path,
    dialect: str,
    options: Any,
    tables: Mapping[str, Any] | None = None,
    kafka: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """The configuration of :func:`demo_settings`, its paths under ``workdir``."""
    return relative_to(
        load_config(demo_settings(workdir, dialect, options, tables, kafka)), workdir
    )


def write_config(workdir: Path, doc: Mapping[str, Any]) -> tuple[Path, PipelineConfig]:
    """Write a pipeline's configuration to ``<workdir>/<source>.yaml``; the file and the
    configuration read back from it (what the demo runs)."""
    path = workdir / f"{doc['sources'][0]['name']}.yaml"
    path.write_text(_HEADER + yaml.safe_dump(dict(doc), sort_keys=False))
    return path, load_config_file(path)


_HEADER = (
    "# written by `cdcflow demo`: the pipeline it ran (paths relative to this file); look with\n"
    "# `cdcflow tables FILE`, `cdcflow show FILE TABLE`, `cdcflow history FILE`\n"
)


def _session_catalog(spark: SparkSession) -> dict[str, Any] | None:
    """The ``catalog:`` section naming the running session's catalog ``cdc``, which the demo
    then writes its replicas into (``None`` when it has none)."""
    conf = "spark.sql.catalog.cdc"
    warehouse = spark.conf.get(f"{conf}.warehouse", None)
    if warehouse is None:
        return None
    found: dict[str, Any] = {"name": "cdc", "warehouse": warehouse}
    kind = spark.conf.get(f"{conf}.type", None)
    if kind:
        found["type"] = kind
    uri = spark.conf.get(f"{conf}.uri", None)
    if uri:
        found["uri"] = uri
    return found


def _chosen(dialects: Sequence[str] | None, known: Sequence[str]) -> list[str]:
    """The dialects a demo runs: ``dialects`` (each one it can run), else all it knows."""
    for name in dialects or ():
        if name not in known:
            raise ConfigError(
                f"the demo has no dialect {name!r}{did_you_mean(name, known)}",
                hint="dialects: " + ", ".join(known),
            )
    return list(dialects or known)


def how_to_look(echo: Callable[[str], None], files: list[Path]) -> None:
    """The demo's last lines: the configuration files it wrote and the read commands over
    them."""
    if not files:
        return
    echo("")
    echo("the pipelines' configurations: " + ", ".join(str(f) for f in files))
    first = next((f for f in files if f.stem == "debezium"), files[0])
    echo("look at the replicas with the read commands, e.g.:")
    echo(f"  cdcflow tables {first}")
    echo(f"  cdcflow show {first} orders")
    echo(f"  cdcflow history {first}")


def run_demo(
    workdir: Path,
    *,
    seed: int = 7,
    transactions: int = 150,
    echo: Callable[[str], None] = print,
    dialects: Sequence[str] | None = None,
) -> bool:
    """Run the demo (every dialect with a renderer, or ``dialects``); returns whether every
    replica equals the oracle. Each dialect's pipeline configuration is written to
    ``<workdir>/<dialect>.yaml`` and run from there; a session already running in this
    process is used, and the files name its catalog ``cdc``."""
    from cdcflow.dialects import dialect_names, renderer, renderer_features
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.report import format_report
    from cdcflow.pipeline.session import bind_catalog, open_session
    from cdcflow.simulation.workload import generate
    from cdcflow.spark.session import session_running

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    spark = None
    own_session = not session_running()
    if not own_session:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    catalog = _session_catalog(spark) if spark is not None else None
    all_ok = True
    files: list[Path] = []
    for dialect in _chosen(dialects, dialect_names()):
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
        doc = demo_settings(workdir, dialect, first.options, tables, catalog=catalog)
        path, cfg = write_config(workdir, doc)
        files.append(path)
        if spark is None:
            spark = open_session(cfg)
        bind_catalog(spark, cfg)
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
        ok = print_replicas(spark, workload, cfg.namespace, history, echo, label)
        all_ok = ok and all_ok
    if spark is not None and own_session:
        spark.stop()  # as `cdcflow run` does
    echo("")
    echo("every replica equals the oracle" if all_ok else "SOME REPLICAS DIFFER FROM THE ORACLE")
    how_to_look(echo, files)
    return all_ok


def print_replicas(
    spark: SparkSession,
    workload: Workload,
    namespace: str,
    history: str | None,
    echo: Callable[[str], None],
    label: str = "",
) -> bool:
    """Print each replica of ``namespace`` against the oracle (``history``: the table kept as
    an scd2 history; ``label`` leads the first line); whether all are equal."""
    from cdcflow.testing.compare import compare_replicas

    found = compare_replicas(spark, workload, namespace, histories=[history] if history else ())
    echo(f"{label}replicas in cdc.{namespace}:")
    for d in found.tables:
        if d.table == history:
            mark = "equals the oracle's history" if d.equal else "DIFFERS from the oracle"
            echo(f"  {d.table:<12} {d.actual:>6} versions (scd2)  {mark}")
        else:
            mark = "equals the oracle" if d.equal else "DIFFERS from the oracle"
            echo(f"  {d.table:<12} {d.actual:>6} rows  {mark}")
        if not d.equal:
            echo(f"    first difference: {d.first_difference()}")
            for row in d.missing[:3]:
                echo(f"    missing:    {row}")
            for row in d.unexpected[:3]:
                echo(f"    unexpected: {row}")
    return found.equal


def run_kafka_demo(
    workdir: Path,
    *,
    seed: int = 7,
    transactions: int = 150,
    echo: Callable[[str], None] = print,
    dialects: Sequence[str] | None = None,
) -> bool:
    """The demo over Kafka: a broker of its own (stopped at the end), each dialect with a
    Kafka form (or those of ``dialects``) produced into topics as its producer would and read
    by a ``kafka:`` source, its configuration written to ``<workdir>/<dialect>.yaml``; returns
    whether every replica equals the oracle."""
    from cdcflow.dialects import kafka_delivery, kafka_dialects, renderer_features
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.pipeline.report import format_report
    from cdcflow.pipeline.session import open_session
    from cdcflow.simulation.workload import generate
    from cdcflow.spark.session import session_running
    from cdcflow.testing.kafka import produce
    from cdcflow.testing.services.kafka import KafkaBroker

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    own_session = not session_running()
    spark = None
    all_ok = True
    files: list[Path] = []
    broker = KafkaBroker(workdir / "kafka")
    echo("starting a Kafka broker (KRaft, from its Maven artifacts) ...")
    bootstrap = broker.start()
    echo(f"broker at {bootstrap}")
    try:
        for dialect in _chosen(dialects, kafka_dialects()):
            workload = generate(
                seed, tables=3, transactions=transactions, features=renderer_features(dialect)
            )
            sent = kafka_delivery(dialect, workload, seed=seed, prefix=f"demo_{dialect}")
            stored = produce(bootstrap, sent.records)
            parts = {(t, p) for t, p, _ in stored}
            echo(
                f"\n[{dialect}] {len(stored)} records into {len(sent.topics)} topic(s), "
                f"{len(parts)} partitions (with duplicates and a producer restart's resend)"
            )
            kafka = {"bootstrap_servers": bootstrap, "topics": sent.topics}
            doc = demo_settings(workdir, dialect, sent.options, kafka=kafka)
            path, cfg = write_config(workdir, doc)
            files.append(path)
            if spark is None:
                spark = open_session(cfg)
            Pipeline(cfg, spark).run(on_report=lambda r: echo("  " + format_report(r)))
            ok = print_replicas(spark, workload, cfg.namespace, None, echo, f"[{dialect}] ")
            all_ok = ok and all_ok
    finally:
        if spark is not None and own_session:
            spark.stop()
        broker.stop()
        echo("broker stopped")
    echo("")
    echo("every replica equals the oracle" if all_ok else "SOME REPLICAS DIFFER FROM THE ORACLE")
    how_to_look(echo, files)
    return all_ok
