"""Messages captured from the real Debezium PostgreSQL connector (``tests/data/debezium/
postgresql``, provenance in its ``PROVENANCE.md``): they decode to what the database holds,
under the type mapping of ``docs/dialects/debezium.md``; through a real broker and the
pipeline, every replica equals its table. Each difference found between the connector's
messages and what cdcflow expected has its test here."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.simulation.workload import TableDef
from cdcflow.testing.live import oracle
from cdcflow.testing.live.capture import decode as decode_value
from tests.dialect_harness import DialectHarness, replay

DATA = Path(__file__).parent / "data" / "debezium" / "postgresql"
#: Declared so the unconstrained numeric beyond decimal(38,18) keeps every digit.
LOOSE_AS_TEXT = {"loose": {"n": "text"}}
_prefixes = itertools.count()
dbz = DialectHarness("debezium")


@cache
def _decoded(declare: bool = False) -> tuple[list[dict[str, Any]], list[Any]]:
    types = {"column_types": LOOSE_AS_TEXT} if declare else {}
    return dbz.decode_file(DATA / "messages.jsonl", "messages.jsonl", **types)


def events(declare: bool = False) -> list[dict[str, Any]]:
    return _decoded(declare)[0]


def tables() -> dict[str, tuple[list[oracle.Column], tuple[int, ...], list[oracle.Row]]]:
    """The database's tables at the end: columns, key positions, rows (comparable form)."""
    out = {}
    for name, t in orjson.loads((DATA / "tables.json").read_bytes()).items():
        cols = [oracle.Column(n, pg, k) for n, pg, k in t["columns"]]
        key = tuple(i for i, c in enumerate(cols) if c.name in t["key"])
        out[name] = (cols, key, [decode_value(r) for r in t["rows"]])
    return out


def table_defs() -> dict[str, TableDef]:
    """The database's tables: key and column names (with their PostgreSQL types)."""
    return {
        name: TableDef(name, tuple(t["key"]), {n: pg for n, pg, _ in t["columns"]})
        for name, t in orjson.loads((DATA / "tables.json").read_bytes()).items()
    }


def comparable(value: Any, kind: str) -> Any:
    """A decoded event's value in the oracle's comparable form."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f").rjust(26, "0")
    if isinstance(value, dt.date):
        return value.isoformat().rjust(10, "0")
    return oracle.normal(value, kind, "replica")


# ---------------------------------------------------------------- decoding


def test_only_the_documented_rejection() -> None:
    """One value is beyond the type mapping: an unconstrained numeric with 50 fractional
    digits does not fit decimal(38,18), and says so (every digit shown, none rounded)."""
    _, rejections = _decoded()
    message = (
        "column 'n' (decimal(38,18)): Decimal('3.14159265358979323846264338327950288419716939"
        "93751') has more than 18 fractional digits for decimal(38,18)"
    )
    # the message and its copy sent again after the connector's restart
    assert [(r.code, r.message) for r in rejections] == [("BAD_VALUE", message)] * 2


def test_declared_text_keeps_an_unconstrained_numeric_whole() -> None:
    evs, rejections = _decoded(declare=True)
    assert rejections == []
    loose, again = [e for e in evs if e["table"] == "loose" and e["key"] == {"id": 2}]
    assert again["after"] == loose["after"]  # sent again after the connector's restart
    assert loose["types"]["n"] == "string"
    assert loose["after"]["n"] == "3.1415926535897932384626433832795028841971693993751"


@pytest.mark.parametrize("table", ["kinds", "wide", "pairs", "loose"])
def test_replayed_events_equal_the_database(table: str) -> None:
    """Every value of every type as the database holds it: decimals of 38 digits, infinities,
    24:00:00, intervals (Debezium's microseconds), JSON text, bytes, arrays with NULL,
    enums, floats; primary-key changes, delete then reinsert, a TRUNCATE with an insert, a
    widened key, updates that leave TOASTed text out, all after a connector restart that
    sent part of the stream twice."""
    cols, key, expected = tables()[table]
    state = replay(events(declare=True), table_defs())[table]
    got = [tuple(comparable(row.get(c.name), c.kind) for c in cols) for row in state.values()]
    d = oracle.compare(expected, got)
    assert d.equal, oracle.first_difference(cols, d, key)


def test_a_transactions_events_and_markers_share_its_xid() -> None:
    """The connector's transaction ids are ``<xid>:<last LSN it saw>``: BEGIN, each event
    and END of a transaction carry different ones; decoded, they all name the xid."""
    evs = events()
    commits = {e["transaction_id"] for e in evs if e["operation"] == "COMMIT"}
    streamed = [e for e in evs if e["operation"] in ("INSERT", "UPDATE", "DELETE", "TRUNCATE")]
    assert streamed and {e["transaction_id"] for e in streamed} <= commits
    raw: dict[str, set[str]] = {}
    for e in evs:
        if not e["metadata"].get("snapshot") and e["operation"] != "SNAPSHOT":
            raw.setdefault(e["transaction_id"], set()).add(e["metadata"]["debezium_transaction"])
    assert all(t.isdigit() for t in raw)
    # the multi-table transaction: three events at three LSNs (BEGIN names the first), END
    assert max(len(ids) for ids in raw.values()) == 4


def test_the_initial_snapshot_is_one_transaction_its_last_read_commits() -> None:
    evs = events()
    reads = [e for e in evs if e["operation"] == "SNAPSHOT"]
    (snapshot,) = {e["transaction_id"] for e in reads}
    assert snapshot.startswith("snapshot:")
    commits = [e for e in evs if e["operation"] == "COMMIT" and e["transaction_id"] == snapshot]
    assert len(commits) == 1 and commits[0]["metadata"]["snapshot"] is True
    assert len(reads) == 6  # kinds 1 and 2, wide 1, pairs (1,1) and (1,2), loose 1


def test_an_update_that_leaves_toasted_text_out_is_partial() -> None:
    evs = events()
    (update,) = {
        e["id"]: e
        for e in evs
        if e["table"] == "kinds"
        and e["operation"] == "UPDATE"
        and e["after"]["price"] == Decimal("99.99")
        and e["after"]["flag"] is True
    }.values()
    assert update["partial"] is True
    assert "big" not in update["after"] and update["metadata"]["unavailable_columns"] == ["big"]
    # under REPLICA IDENTITY FULL the connector sends the unchanged text itself
    (full,) = {
        e["id"]: e for e in evs if e["table"] == "wide" and e["operation"] == "UPDATE"
    }.values()
    assert full["partial"] is False and len(full["after"]["body"]) == 12_800


def test_a_delete_under_replica_identity_default_has_its_key_and_nulls() -> None:
    (delete,) = {
        e["id"]: e
        for e in events()
        if e["table"] == "kinds" and e["operation"] == "DELETE" and e["key"] == {"id": 3}
    }.values()
    assert delete["before"]["id"] == 3 and delete["before"]["price"] is None


def test_a_redelivered_stream_decodes_to_the_same_events() -> None:
    """Kafka Connect killed before its offset flush sends again what it sent since: the
    copies are the same events (id, sequence, contents)."""
    rows = [e for e in events() if e["operation"] in ("INSERT", "UPDATE", "DELETE")]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for e in rows:
        by_id.setdefault(e["id"], []).append(e)
    twice = [copies for copies in by_id.values() if len(copies) == 2]
    assert len(twice) == len(by_id) - 1  # all but the update after the restart
    for a, b in twice:  # repr: NaN equals itself
        assert repr({**a, "metadata": None}) == repr({**b, "metadata": None})
        assert a["metadata"]["kafka_offset"] != b["metadata"]["kafka_offset"]


def test_a_widened_key_is_bigint() -> None:
    (wide,) = [e for e in events() if e["key"] == {"id": 5_000_000_000}][:1]
    assert wide["types"]["id"] == "bigint"


def test_sequences_follow_the_commit_order() -> None:
    """The first transaction a new connector streams has no last-commit LSN: its events
    still sort after the snapshot and before the next transaction's."""
    evs = [e for e in events() if e["table"] == "kinds" and e["key"] == {"id": 1}]
    ordered = [e["operation"] for e in sorted(evs, key=lambda e: e["sequence"])]
    assert ordered == ["SNAPSHOT", "UPDATE", "UPDATE", "UPDATE"]
    first = [
        e
        for e in events()
        if e["transaction_id"]
        == min(e["transaction_id"] for e in events() if e["operation"] == "INSERT")
    ]
    assert orjson.loads(first[0]["position"]["sequence"])[0] is None


# ---------------------------------------------------------------- through a broker


@pytest.mark.spark
def test_captured_messages_through_a_real_broker_equal_the_database(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """The captured records produced again to a real broker, read by a ``kafka:`` source with
    ``consistency: transactions`` in batches of a few records each: every replica equals its
    table, nothing is dead-lettered, nothing is left held."""
    from cdcflow.config import load_config
    from cdcflow.dialects.rendering import KafkaRecord
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.testing.kafka import produce

    prefix = f"cap{next(_prefixes)}x"
    records = []
    for line in (DATA / "messages.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        topic = prefix + r["topic"].removeprefix("cap")
        key, value = r["key"], r["value"]
        records.append(
            KafkaRecord(
                topic,
                None if key is None else key.encode(),
                None if value is None else value.encode(),
                partition=r["partition"],
            )
        )
    assert len(produce(kafka.bootstrap, records)) == len(records)
    namespace = f"captured_{prefix}"
    cfg = load_config(
        {
            "pipeline": namespace,
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": namespace,
            "consistency": "transactions",
            "sources": [
                {
                    "name": "pg",
                    "dialect": "debezium",
                    "types": LOOSE_AS_TEXT,
                    "kafka": {
                        "bootstrap_servers": kafka.bootstrap,
                        "pattern": prefix + "\\..*",
                        "max_offsets_per_trigger": 20,
                    },
                }
            ],
        }
    )
    reports = Pipeline(cfg, spark).run().reports
    assert len(reports) > 2 and sum(r.dead_lettered for r in reports) == 0
    for name, (cols, key, expected) in tables().items():
        got = oracle.replica_rows(spark, f"cdc.{namespace}.{name}", cols, frozenset())
        d = oracle.compare(expected, got)
        assert d.equal, f"{name}: {oracle.first_difference(cols, d, key)}"
    held = spark.sql(
        f"SELECT count(*) FROM cdc.{namespace}__cdcflow.held WHERE released_batch IS NULL"
    ).collect()[0][0]
    assert held == 0


def test_the_documented_type_mapping_is_the_oracles() -> None:
    """``docs/dialects/debezium.md`` lists the type mapping the live checks apply."""
    doc = (Path(__file__).parents[1] / "docs" / "dialects" / "debezium.md").read_text()
    table = doc.split("### PostgreSQL type mapping", 1)[1].split("\n## ", 1)[0]
    rows = [
        tuple(cell.strip().strip("`") for cell in line.strip("|").split("|"))
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| PostgreSQL |")
    ]
    assert rows == [(r.postgres, r.replica, r.rule) for r in oracle.TYPE_MAPPING]
