"""Debezium's Kafka form: the PostgreSQL connector.

A topic per table (``<prefix>.public.<table>``), the key message as the Kafka key (so a key
stays on one partition), null-value tombstones after deletes and key changes, the transaction
metadata topic (``<prefix>.transaction``) and the schema change topic (``<prefix>``) where a
column is added.
"""

from __future__ import annotations

import orjson

from cdcflow.dialects.debezium.render import decode_options, render_records
from cdcflow.dialects.rendering import KafkaDelivery, KafkaRecord
from cdcflow.simulation.workload import Workload

#: The connector's topic prefix.
PREFIX = "app"


def records(
    workload: Workload, *, seed: int, faults: bool, partitions: int, prefix: str
) -> KafkaDelivery:
    """The connector's records in commit order; with ``faults``, the schema change record
    before the first row with an added column."""
    added = {(c.table, c.column) for c in workload.changes() if c.kind == "add_column"}
    out: list[KafkaRecord] = []
    announced: set[tuple[str, str]] = set()
    for topic, key, value in render_records(workload, faults=faults, seed=seed):
        if faults and value is not None and topic.startswith("app.public."):
            table = topic.rsplit(".", 1)[-1]
            after = (value.get("payload") or value).get("after") or {}
            for column in [c for c in after if (table, c) in added and (table, c) not in announced]:
                announced.add((table, column))
                out.append(_schema_change(prefix, table, column))
        out.append(
            KafkaRecord(
                prefix + topic.removeprefix("app"),
                None if key is None else orjson.dumps(key),
                None if value is None else orjson.dumps(value),
            )
        )
    topics = sorted({r.topic for r in out})
    return KafkaDelivery("debezium", out, decode_options(workload), topics)


def _schema_change(prefix: str, table: str, column: str) -> KafkaRecord:
    """The connector's schema change record for a column added to ``table``."""
    change = {
        "source": {"connector": "postgresql", "db": "app", "table": table},
        "databaseName": "app",
        "schemaName": "public",
        "ddl": f"ALTER TABLE public.{table} ADD COLUMN {column} text",
        "tableChanges": [{"type": "ALTER", "id": f'"app"."public"."{table}"'}],
    }
    return KafkaRecord(prefix, orjson.dumps({"databaseName": "app"}), orjson.dumps(change))
