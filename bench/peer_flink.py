"""The peer of ``python -m bench peer``: Flink SQL reading Debezium's topics (``debezium-json``)
into Iceberg tables with a primary key and ``write.upsert.enabled`` (equality deletes), as a
PyFlink Table API job on a local mini-cluster.

Run by the peer's own interpreter (``python bench/peer_flink.py SPEC.json``): PyFlink pins
older numpy, pyarrow and protobuf than cdcflow, so it lives in a venv of its own
(:mod:`bench.peer_setup`) and this module imports nothing of cdcflow or of the bench. The
functions that build the job's settings and SQL are plain Python, importable without PyFlink.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: PostgreSQL column types of the bench's table set → Flink SQL types reading Debezium's
#: default JSON encoding of them (``timestamptz`` arrives as an ISO-8601 string).
FLINK_TYPES: dict[str, str] = {
    "bigint": "BIGINT",
    "integer": "INT",
    "text": "STRING",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamptz": "TIMESTAMP_LTZ(6)",
}


def job_settings(spec: Mapping[str, Any]) -> dict[str, str]:
    """The job's Flink configuration: each key is one the Flink or Iceberg documentation names
    for this job (streaming, checkpoints with exactly-once, retained on cancellation so a
    killed job resumes from its latest checkpoint, duplicate CDC events normalized by key)."""
    out = {
        "execution.runtime-mode": "streaming",
        "parallelism.default": str(spec["parallelism"]),
        "execution.checkpointing.interval": spec["checkpoint_interval"],
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": Path(spec["checkpoints"]).resolve().as_uri(),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        # Flink's debezium-json documentation: Debezium delivers at least once after a failure
        # and duplicates give wrong results unless this is on and the source has a key
        "table.exec.source.cdc-events-duplicate": "true",
        "pipeline.name": "peer-flink",
    }
    if spec.get("restore"):
        out["execution.state-recovery.path"] = Path(spec["restore"]).resolve().as_uri()
    return out


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _options(options: Mapping[str, str]) -> str:
    return ",\n  ".join(f"'{k}' = '{v}'" for k, v in options.items())


def _columns(table: Mapping[str, Any]) -> str:
    cols = [f"{_quote(name)} {FLINK_TYPES[pg]}" for name, pg in table["columns"]]
    key = ", ".join(_quote(k) for k in table["key"])
    return ",\n  ".join([*cols, f"PRIMARY KEY ({key}) NOT ENFORCED"])


def catalog_options(spec: Mapping[str, Any]) -> dict[str, str]:
    """Iceberg's JDBC catalog on the SQLite file cdcflow's embedded catalog uses (schema V1,
    writers of one file waiting for each other)."""
    cat = spec["catalog"]
    return {
        "type": "iceberg",
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": cat["uri"],
        "warehouse": Path(cat["warehouse"]).resolve().as_uri(),
        "jdbc.schema-version": "V1",
        "jdbc.busy_timeout": "60000",
    }


def source_options(spec: Mapping[str, Any], topic: str) -> dict[str, str]:
    """A Kafka table over one Debezium topic: JSON with Kafka Connect's schemas, timestamps
    as ISO-8601, read from the earliest offset (a restored job resumes from its state), the
    consumer group committing offsets at each checkpoint."""
    return {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": spec["bootstrap"],
        "properties.group.id": spec["group"],
        "scan.startup.mode": "earliest-offset",
        "format": "debezium-json",
        "debezium-json.schema-include": "true",
        "debezium-json.timestamp-format.standard": "ISO-8601",
    }


#: Iceberg's table properties for Flink's upsert: format 2, equality deletes by the key.
SINK_PROPERTIES = {"format-version": "2", "write.upsert.enabled": "true"}


def statements(spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(DDL run first, the ``INSERT`` statements of the one job)."""
    catalog = _quote(spec["catalog"]["name"])
    ns = f"{catalog}.{_quote(spec['namespace'])}"
    ddl = [
        f"CREATE CATALOG {catalog} WITH (\n  {_options(catalog_options(spec))}\n)",
        f"CREATE DATABASE IF NOT EXISTS {ns}",
    ]
    inserts = []
    for table in spec["tables"]:
        name = _quote(table["name"])
        src = _quote("src_" + table["name"])
        ddl.append(
            f"CREATE TEMPORARY TABLE {src} (\n  {_columns(table)}\n) WITH (\n  "
            f"{_options(source_options(spec, table['topic']))}\n)"
        )
        ddl.append(
            f"CREATE TABLE IF NOT EXISTS {ns}.{name} (\n  {_columns(table)}\n) WITH (\n  "
            f"{_options(SINK_PROPERTIES)}\n)"
        )
        cols = ", ".join(_quote(c) for c, _ in table["columns"])
        inserts.append(f"INSERT INTO {ns}.{name} SELECT {cols} FROM {src}")
    return ddl, inserts


def run(spec: Mapping[str, Any]) -> None:
    """Submit the job to a local mini-cluster and wait while it runs (until killed)."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    for k, v in job_settings(spec).items():
        conf.set_string(k, v)
    env = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    tables = TableEnvironment.create(env)
    ddl, inserts = statements(spec)
    for sql in ddl:
        tables.execute_sql(sql)
    job = tables.create_statement_set()
    for sql in inserts:
        job.add_insert_sql(sql)
    result = job.execute()
    client = result.get_job_client()
    print(f"job {client.get_job_id() if client else '?'} running", flush=True)
    result.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """``peer_flink.py SPEC.json``: run the job the spec describes."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: peer_flink.py SPEC.json", file=sys.stderr)
        return 2
    run(json.loads(Path(args[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
