"""The debezium dialect: one test per conformance file (fixed dialect and auto-detection),
goldens of the documentation examples through ``cdcflow inspect``, envelopes, operations,
ordering per connector, Connect types, partial rows, bad input, and the renderer against the
oracle."""

from __future__ import annotations

import base64
import datetime as dt
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow import sequence
from cdcflow.decode.columns import SKIPPED, SKIPPED_WHY, Columns
from cdcflow.decode.decoder import Decoder
from cdcflow.dialects import get_dialect, renderer, renderer_features
from cdcflow.dialects.model import Skipped
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import generate
from cdcflow.transports.message import KafkaCoordinates, RawMessage
from cdcflow.types import to_wire
from tests.conftest_shared import shared_path
from tests.dialect_harness import DialectHarness, inspect, options, replay
from tests.golden import check_golden

render = renderer("debezium")

DIALECT = "debezium"
#: The Apache license header some fixture files start with (not part of any message).
LICENSE = re.compile(rb"\A\s*/\*.*?\*/\s*", re.S)
dbz = DialectHarness(DIALECT)


def conf(name: str) -> bytes:
    return LICENSE.sub(b"", shared_path("conformance", "debezium", name).read_bytes())


def as_kafka_records(data: bytes, topic: str = "server.db.t") -> bytes:
    """Alternating key and value lines (as the fixtures print a topic) → Kafka records."""
    lines = [line for line in data.splitlines() if line.strip()]
    records = [
        orjson.dumps({"topic": topic, "partition": 0, "offset": i, "key": k.decode(), "value": v})
        for i, (k, v) in enumerate(
            zip(lines[::2], [orjson.loads(v) for v in lines[1::2]], strict=True)
        )
    ]
    return b"\n".join(records)


# ---------------------------------------------------------------- conformance, one per file

#: file → (operations, table, rejection codes): every file decodes, or is rejected for a reason
#: of its own.
CONFORMANCE: dict[str, tuple[list[str], str | None, list[str]]] = {
    "dbz_serde_mysql_unknown_property.json": (["UPDATE"], "customers", []),
    "dbz_serde_mysql_update.json": (["UPDATE"], "customers", []),
    "dbz_serde_mysql_with_schema.json": (["INSERT"], "customers", []),
    "dbz_serde_mysql_without_schema.json": (["INSERT"], "customers", []),
    # a row without any metadata is no Debezium event (unless the source option operation
    # says its rows are flattened)
    "dbz_serde_unwrapped_row.json": ([], None, ["NOT_AN_EVENT"]),
    "docs_oracle_create_with_schema.json": (["INSERT"], "CUSTOMERS", []),
    "docs_postgresql_create_with_schema.json": (["INSERT"], "customers", []),
    "docs_postgresql_transaction_begin_end.txt": (["BEGIN", "COMMIT"], None, []),
    "docs_sqlserver_create_with_schema.json": (["INSERT"], "customers", []),
    # a key message alone carries no change
    "docs_sqlserver_key_with_schema.json": ([], None, []),
    "docs_sqlserver_transaction_begin_end.txt": (["BEGIN", "COMMIT"], None, []),
    # REPLICA IDENTITY DEFAULT: the delete names its row only in the Kafka key, absent here
    "flink_postgres_replica_identity_default.ndjson": (
        ["SNAPSHOT"] * 9 + ["UPDATE", "UPDATE", "INSERT", "INSERT", "UPDATE", "UPDATE"],
        "products",
        ["DELETE_WITHOUT_KEY"],
    ),
    "flinkcdc_pipeline_debezium_json_minimal_source.txt": (
        ["INSERT"] * 13 + ["UPDATE"] * 2 + ["INSERT"] * 2 + ["UPDATE"] * 2 + ["DELETE"],
        None,
        [],
    ),
    # key lines read alone are objects without anything of Debezium's (see the Kafka tests)
    "paimon_mongodb_delete_keyed.txt": (
        ["DELETE"],
        "sync_test_table",
        [
            "NOT_AN_EVENT",
            "DELETE_WITHOUT_KEY",
            "NOT_AN_EVENT",
            "DELETE_WITHOUT_KEY",
            "NOT_AN_EVENT",
        ],
    ),
    "paimon_mongodb_insert_keyed.txt": (["INSERT"], "sync_test_table", ["NOT_AN_EVENT"]),
    "paimon_mongodb_update_keyed.txt": (
        ["UPDATE", "UPDATE"],
        "sync_test_table",
        ["NOT_AN_EVENT"] * 2,
    ),
    "paimon_mysql_alltypes_avro_keyvalue_json.txt": (["INSERT", "INSERT"], "all_types_table", []),
    "paimon_mysql_alltypes_with_schema.txt": (["SNAPSHOT"], "all_types_table", []),
    "paimon_mysql_multi_table_topic.txt": (["INSERT"] * 4, None, []),
    "paimon_mysql_nested_row.txt": (["INSERT"], "product", []),
    "paimon_mysql_schema_change_history_record.json": (["DDL"], "t1", []),
    "paimon_mysql_schema_null_delete.txt": (["DELETE"], "product", []),
    "paimon_mysql_schemaevolution_partial_before.txt": (
        ["INSERT", "DELETE", "UPDATE", "INSERT"],
        "product",
        [],
    ),
}


def test_conformance_list_is_complete() -> None:
    folder = shared_path("conformance", "debezium")
    assert {p.name for p in folder.iterdir()} == set(CONFORMANCE)


@pytest.mark.parametrize("dialect", [DIALECT, "auto"])
@pytest.mark.parametrize("name", sorted(CONFORMANCE))
def test_conformance_file(name: str, dialect: str) -> None:
    ops, table, codes = CONFORMANCE[name]
    events, rejections = dbz.decode_file(conf(name), name, dialect)
    if dialect == "auto":
        # auto-detection leaves alone what no dialect claims (a row without metadata)
        codes = [c.replace("NOT_AN_EVENT", "DIALECT_UNDETECTED") for c in codes]
    assert [e["operation"] for e in events] == ops
    assert [r.code for r in rejections] == codes
    assert {e["dialect"] for e in events} <= {DIALECT}
    if table is not None:
        assert {e["table"] for e in events} == {table}
    for e in events:
        if e["operation"] not in ("BEGIN", "COMMIT"):
            assert e["sequence"] and e["metadata"]["sequence_source"]


def test_mysql_fixture_fields() -> None:
    (e,) = dbz.decode_file(conf("dbz_serde_mysql_update.json"), "u.json")[0]
    assert (e["source"], e["database"], e["table"]) == ("mysql", "inventory", "customers")
    assert e["before"]["first_name"] == "Anne-Marie" and e["after"]["first_name"] == "Anne"
    assert e["position"] == {"file": "mysql-bin.000003", "pos": 154, "row": 0, "server_id": 0}
    assert sequence.decode(e["sequence"]) == (1, 3, 154, 0)
    (typed,) = dbz.decode_file(conf("dbz_serde_mysql_with_schema.json"), "w.json")[0]
    assert typed["types"] == dict.fromkeys(("first_name", "last_name", "email"), "string") | {
        "id": "int"
    }
    (untyped,) = dbz.decode_file(conf("dbz_serde_mysql_without_schema.json"), "w.json")[0]
    assert untyped["after"] == typed["after"] and untyped["types"]["id"] == "bigint"


def test_postgres_sequence_is_commit_then_change_lsn_and_snapshot_sorts_first() -> None:
    (e,) = dbz.decode_file(conf("docs_postgresql_create_with_schema.json"), "p.json")[0]
    assert sequence.decode(e["sequence"]) == (0, 24023119, 24023128)  # a snapshot read
    assert e["position"]["sequence"] == '["24023119","24023128"]'
    assert e["timestamp"].isoformat() == "2019-05-28T08:58:24.863000+00:00"
    events, _ = dbz.decode_file(conf("flink_postgres_replica_identity_default.ndjson"))
    seqs = [e["sequence"] for e in events]
    snapshots = [s for e, s in zip(events, seqs, strict=True) if e["operation"] == "SNAPSHOT"]
    assert max(snapshots) < min(s for s in seqs if s not in snapshots)
    update = events[9]
    assert update["before"] is None and update["after"]["id"] == 106  # REPLICA IDENTITY DEFAULT


def test_sqlserver_oracle_mongodb_order_fields() -> None:
    (ms,) = dbz.decode_file(conf("docs_sqlserver_create_with_schema.json"), "s.json")[0]
    _, commit, change, serial = sequence.decode(ms["sequence"])
    assert (commit - change, serial) == (2, 1)  # ...:0005 then ...:0003, event_serial_no "1"
    assert ms["timestamp"].isoformat() == "2019-06-05T10:11:08.470000+00:00"
    (ora,) = dbz.decode_file(conf("docs_oracle_create_with_schema.json"), "o.json")[0]
    assert (ora["source"], ora["schema"], ora["table"]) == ("oracle", "DEBEZIUM", "CUSTOMERS")
    assert sequence.decode(ora["sequence"]) == (1, 2122185, 2122185, 0x1234, 0x12345, 0x124, 1)
    (mongo,) = dbz.decode_file(as_kafka_records(conf("paimon_mongodb_insert_keyed.txt")))[0]
    assert sequence.decode(mongo["sequence"]) == (1, 1739321992000, 28)


def test_transaction_metadata_markers() -> None:
    events, _ = dbz.decode_file(conf("docs_sqlserver_transaction_begin_end.txt"))
    begin, commit = events
    assert begin["transaction_id"] == commit["transaction_id"] == "00000025:00000d08:0025"
    assert commit["metadata"]["event_count"] == 2
    assert commit["metadata"]["data_collections"] == {
        "testDB.dbo.testDB.tablea": 1,
        "testDB.dbo.testDB.tableb": 1,
    }


def test_row_events_carry_the_transaction_block_id() -> None:
    doc = orjson.loads(conf("dbz_serde_mysql_without_schema.json"))
    doc["transaction"] = {"id": "file=mysql-bin.000003,pos=154", "total_order": 1}
    (e,), _ = dbz.decode_file(doc)
    assert e["transaction_id"] == "file=mysql-bin.000003,pos=154"
    assert "debezium_transaction" not in e["metadata"]


def test_a_postgresql_transaction_id_is_its_xid() -> None:
    """The PostgreSQL connector writes ``<xid>:<the last LSN it saw>``: the LSN differs
    between BEGIN, each event and END (the captured messages show it), the xid does not."""
    doc = orjson.loads(conf("dbz_serde_mysql_without_schema.json"))
    doc["transaction"] = {"id": "571:53195832", "total_order": 1, "data_collection_order": 1}
    (e,), _ = dbz.decode_file(doc)
    assert e["transaction_id"] == "571"
    assert e["metadata"]["debezium_transaction"] == "571:53195832"


def test_schema_change_history_record_is_ddl_with_column_types() -> None:
    (e,) = dbz.decode_file(conf("paimon_mysql_schema_change_history_record.json"))[0]
    assert (e["operation"], e["database"], e["table"]) == ("DDL", "tinyint1_not_bool_test", "t1")
    assert e["ddl_type"] == "ALTER_TABLE"
    assert e["ddl_command"].startswith("ALTER TABLE t1 ADD COLUMN _new_tinyint1")
    assert "_new_tinyint1" in e["types"]


def test_schema_change_without_a_table_is_skipped_and_counted() -> None:
    d = get_dialect(DIALECT)
    doc = {
        "source": {"connector": "mysql", "file": "b.000001", "pos": 4},
        "ddl": "CREATE DATABASE x",
    }
    assert d.decode(RawMessage(orjson.dumps(doc))) == [Skipped("schema_change", DIALECT)]
    ddl = {**doc, "ddl": "DROP TABLE IF EXISTS `inv`.`orders`", "databaseName": "inv"}
    (e,) = d.decode(RawMessage(orjson.dumps(ddl)))
    assert (e["operation"], e["database"], e["table"], e["ddl_type"]) == (
        "DDL",
        "inv",
        "orders",
        "DROP_TABLE",
    )


# ---------------------------------------------------------------- Kafka records and keys


def test_mongodb_keyed_fixtures_as_kafka_records() -> None:
    events, rej = dbz.decode_file(as_kafka_records(conf("paimon_mongodb_delete_keyed.txt")))
    assert not rej
    assert [e["key"] for e in events] == [{"_id": "67ab25755c0d5ac87eb8c632"}] * 3
    assert [e["operation"] for e in events] == ["DELETE"] * 3
    ins, _ = dbz.decode_file(as_kafka_records(conf("paimon_mongodb_insert_keyed.txt")))
    after = ins[0]["after"]
    assert after["_id"] == "67ab25755c0d5ac87eb8c632" and after["created_at"] == 1736207571013
    assert after["tags"] == '["pending"]' and after["updated_at"].year == 2025
    assert ins[0]["metadata"]["kafka_topic"] == "server.db.t"
    upd, rej = dbz.decode_file(as_kafka_records(conf("paimon_mongodb_update_keyed.txt")))
    assert not rej and [e["before"] is None for e in upd] == [True, False]


def test_alltypes_key_and_value_pairs_as_kafka_records() -> None:
    events, rej = dbz.decode_file(
        as_kafka_records(conf("paimon_mysql_alltypes_avro_keyvalue_json.txt"))
    )
    assert not rej and [e["key"] for e in events] == [{"_id": 1}, {"_id": 2}]
    e = events[0]
    assert e["metadata"]["sequence_source"] == "source.mysql"
    assert e["position"]["gtid"].startswith("b8642e5a")
    # decimal.handling.mode=string: the source column type says DECIMAL
    assert e["types"]["_numeric_unsigned"] == "decimal(8,3)"
    assert e["after"]["_numeric_unsigned"] == Decimal("12345.220")


def test_replica_identity_default_delete_takes_its_key_from_the_kafka_key() -> None:
    lines = conf("flink_postgres_replica_identity_default.ndjson").splitlines()
    record = {
        "topic": "fullfillment.inventory.products",
        "key": {"id": 111},
        "value": lines[-1].decode(),
    }
    (e,), rej = dbz.decode_file(orjson.dumps(record))
    assert not rej and (e["operation"], e["key"], e["before"]) == ("DELETE", {"id": 111}, None)


def test_tombstones_keys_heartbeats_and_messages_are_skipped_with_counts() -> None:
    d = get_dialect(DIALECT)
    kafka = KafkaCoordinates(topic="server.db.t", partition=0, offset=1)
    beat = {"schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat"}}
    doc = orjson.loads(conf("dbz_serde_mysql_without_schema.json"))
    found = {
        "tombstone": d.decode(RawMessage(b"", key=b'{"id": 1}', kafka=kafka)),
        "key": d.decode(RawMessage(conf("docs_sqlserver_key_with_schema.json"))),
        "heartbeat": d.decode(RawMessage(orjson.dumps({**beat, "payload": {"ts_ms": 1}}))),
        "message": d.decode(RawMessage(orjson.dumps({**doc, "op": "m"}))),
        "schemaless tombstone": d.decode(RawMessage(b'{"schema": null, "payload": null}')),
    }
    assert {k: [s.why for s in v] for k, v in found.items()} == {
        "tombstone": ["tombstone"],
        "key": ["key"],
        "heartbeat": ["heartbeat"],
        "message": ["message"],
        "schemaless tombstone": ["tombstone"],
    }
    # the decoder gives them apart from events, and a batch's columns count them
    outcome = Decoder(DIALECT, wire=True).decode(RawMessage(b"", kafka=kafka))
    assert (outcome.events, outcome.rejections, outcome.skipped) == (
        [],
        [],
        [Skipped("tombstone", DIALECT)],
    )
    cols = Columns(wire=True)
    cols.add_outcome(outcome)
    (row,) = cols.to_batch().to_pylist()
    assert (row["operation"], row["metadata"], row["error_code"]) == (
        SKIPPED,
        [(SKIPPED_WHY, "tombstone")],
        None,
    )


# ---------------------------------------------------------------- envelopes and operations


def _mysql(**changes: Any) -> dict[str, Any]:
    doc = {
        "op": "c",
        "before": None,
        "after": {"id": 1, "name": "a"},
        "source": {"connector": "mysql", "db": "inv", "table": "t", "file": "bin.000002"},
    }
    doc["source"] = {**doc["source"], "pos": changes.pop("pos", 10), "row": changes.pop("row", 0)}
    return {**doc, **changes}


def test_truncate_snapshot_and_unknown_operations() -> None:
    (t,), _ = dbz.decode_file(_mysql(op="t", after=None))
    assert (t["operation"], t["table"], t["key"]) == ("TRUNCATE", "t", None)
    (r,), _ = dbz.decode_file(
        {**_mysql(op="r"), "source": {**_mysql()["source"], "snapshot": "true"}}
    )
    assert r["operation"] == "SNAPSHOT" and sequence.decode(r["sequence"])[0] == 0
    _, (rej,) = dbz.decode_file(_mysql(op="x"))
    assert rej.code == "UNKNOWN_OPERATION" and "'x'" in rej.message


def test_a_unified_event_is_not_a_debezium_message_and_says_what_it_looks_like() -> None:
    unified = {
        "id": "evt-1",
        "source": "postgres",
        "schema": "public",
        "table": "users",
        "timestamp": "2025-01-01T00:00:00Z",
        "position": {"lsn": "0/16B3748"},
        "operation": "INSERT",
        "after": {"id": 1},
    }
    _, (rej,) = dbz.decode_file(unified)
    assert (rej.code, rej.message) == (
        "OTHER_DIALECT",
        "not a debezium message: it looks like a savegress message; set the source's dialect "
        "to 'savegress' (or 'auto' to detect each message's)",
    )


def test_mysql_binlog_order_is_numeric_and_file_first() -> None:
    (a,), _ = dbz.decode_file(_mysql(pos=999, row=3))
    later = _mysql(pos=4)
    later["source"]["file"] = "bin.000010"
    (b,), _ = dbz.decode_file(later)
    assert a["sequence"] < b["sequence"]


def test_flattened_rows() -> None:
    row = {"id": 7, "name": "x", "__op": "u", "__table": "t", "__db": "inv", "__source_ts_ms": 5}
    (e,), _ = dbz.decode_file(row)
    assert (e["operation"], e["table"], e["after"]) == ("UPDATE", "t", {"id": 7, "name": "x"})
    assert e["metadata"]["flattened"] is True and e["metadata"]["sequence_source"] == "delivery"
    (d,), _ = dbz.decode_file(
        {"id": 7, "__deleted": "true", "__table": "t"}, table_keys={"t": ("id",)}
    )
    assert (d["operation"], d["key"], d["before"]) == ("DELETE", {"id": 7}, {"id": 7})
    (u,), _ = dbz.decode_file({"id": 7, "__deleted": "false", "__table": "t"})
    assert u["operation"] == "UPSERT"
    (p,), _ = dbz.decode_file({"id": 7, "__lsn": 1234, "__table": "t", "__op": "c"})
    assert sequence.decode(p["sequence"]) == (1, 1234, 1234)
    _, (rej,) = dbz.decode_file({"id": 1, "__table": "t"})
    assert rej.code == "OPERATION_UNKNOWN" and "operation" in rej.message
    value = {"type": "struct", "name": "srv.inv.t.Value", "fields": []}
    _, (rej,) = dbz.decode_file({"schema": value, "payload": {"id": 1}}, extra={"table": "t"})
    assert rej.code == "OPERATION_UNKNOWN"
    (c,), _ = dbz.decode_file({"id": 1}, extra={"table": "t", "operation": "UPSERT"})
    assert (c["operation"], c["table"]) == ("UPSERT", "t")


def test_an_object_with_nothing_of_debeziums_is_not_an_event() -> None:
    """``{"hello": "world"}`` is no flattened row that lacks its operation: it says nothing a
    Debezium message says (no ``op``, no ``__`` field, no ``….Value`` schema)."""
    _, (rej,) = dbz.decode_file({"hello": "world"}, extra={"table": "t"})
    assert (rej.code, rej.message) == (
        "NOT_AN_EVENT",
        "not a change event of debezium: an object without 'op' and without the '__' fields "
        "of a flattened row (fields ['hello']); rows flattened by ExtractNewRecordState "
        "without add.fields are read with the source option operation (INSERT, UPSERT or "
        "SNAPSHOT)",
    )


def test_toast_marker_makes_a_partial_event_and_keys_stay() -> None:
    doc = {
        "op": "u",
        "before": None,
        "after": {
            "id": 1,
            "note": "__debezium_unavailable_value",
            "blob": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",
            "tags": ["__debezium_unavailable_value"],
            "n": 2,
        },
        "source": {"connector": "postgresql", "table": "t", "schema": "public", "lsn": 100},
    }
    (e,), _ = dbz.decode_file(doc, table_keys={"t": ("id",)})
    assert e["partial"] is True and e["after"] == {"id": 1, "n": 2}
    assert e["metadata"]["unavailable_columns"] == ["blob", "note", "tags"]


def test_mongodb_update_description_is_a_partial_patch() -> None:
    doc = {
        "op": "u",
        "after": None,
        "updateDescription": {
            "updatedFields": '{"n": {"$numberLong": "5"}}',
            "removedFields": ["x"],
        },
        "source": {"connector": "mongodb", "db": "d", "collection": "c", "ts_ms": 1000, "ord": 2},
    }
    record = {"topic": "s.d.c", "key": {"id": '{"$oid": "abc"}'}, "value": doc}
    (e,), rej = dbz.decode_file(orjson.dumps(record))
    assert not rej and e["partial"] is True
    assert (e["key"], e["after"]) == ({"_id": "abc"}, {"_id": "abc", "n": 5, "x": None})


def _with_schema(after_fields: list[dict[str, Any]], after: dict[str, Any]) -> dict[str, Any]:
    row = {"type": "struct", "fields": after_fields, "optional": True, "field": "after"}
    schema = {"type": "struct", "fields": [row], "name": "s.db.t.Envelope"}
    source = {"connector": "postgresql", "table": "t", "lsn": 1}
    return {"schema": schema, "payload": {"op": "c", "after": after, "source": source}}


def test_connect_semantic_types() -> None:
    dec = "org.apache.kafka.connect.data.Decimal"
    fields = [
        {"field": "d", "type": "bytes", "name": dec, "parameters": {"scale": "2"}},
        {"field": "v", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        {"field": "day", "type": "int32", "name": "io.debezium.time.Date"},
        {"field": "t", "type": "int64", "name": "io.debezium.time.MicroTime"},
        {"field": "ts", "type": "int64", "name": "io.debezium.time.Timestamp"},
        {"field": "zt", "type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"field": "u", "type": "string", "name": "io.debezium.data.Uuid"},
        {"field": "j", "type": "string", "name": "io.debezium.data.Json"},
        {"field": "b", "type": "bytes"},
        {"field": "f", "type": "float"},
    ]
    after = {
        "d": base64.b64encode((-12345).to_bytes(2, "big", signed=True)).decode(),
        "v": {"scale": 3, "value": base64.b64encode(b"\x01\x00").decode()},
        "day": 19439,
        "t": 36_000_500_000,
        "ts": 1_700_000_000_123,
        "zt": "2023-03-23T22:00:10.123456Z",
        "u": "6D3D3C1B-0000-4000-8000-000000000001",
        "j": '{"a": 1}',
        "b": base64.b64encode(b"\x00\xff").decode(),
        "f": 1.5,
    }
    (e,), rej = dbz.decode_file(_with_schema(fields, after))
    assert not rej
    a, types = e["after"], e["types"]
    assert (a["d"], types["d"]) == (Decimal("-123.45"), "decimal(38,2)")
    assert a["v"] == Decimal("0.256")
    assert a["day"].isoformat() == "2023-03-23" and types["day"] == "date"
    assert a["t"] == "10:00:00.500000" and types["t"] == "time"
    assert a["ts"].isoformat() == "2023-11-14T22:13:20.123000" and types["ts"] == "timestamp_ntz"
    assert a["zt"].isoformat() == "2023-03-23T22:00:10.123456+00:00"
    assert a["u"] == "6d3d3c1b-0000-4000-8000-000000000001" and types["u"] == "uuid"
    assert (a["j"], types["j"]) == ('{"a": 1}', "json")
    assert a["b"] == b"\x00\xff" and types["f"] == "float"


def _schemaless(after: dict[str, Any]) -> dict[str, Any]:
    """A PostgreSQL insert as the JSON converter writes it with ``schemas.enable=false``."""
    source = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "orders"}
    return {"before": None, "after": after, "source": {**source, "lsn": 100}, "op": "c"}


_UNSCALED = base64.b64encode((-12345).to_bytes(2, "big", signed=True)).decode()

#: declared type → (the value Debezium sends without a schema, canonical type, typed value)
SCHEMALESS: dict[str, tuple[Any, str, Any]] = {
    "io.debezium.time.MicroTimestamp": (
        1_704_186_000_000_000,
        "timestamp_ntz",
        dt.datetime(2024, 1, 2, 9),
    ),
    "io.debezium.time.NanoTimestamp": (
        1_704_186_000_123_456_789,
        "timestamp_ntz",
        dt.datetime(2024, 1, 2, 9, 0, 0, 123456),
    ),
    "io.debezium.time.Timestamp": (
        1_704_186_000_123,
        "timestamp_ntz",
        dt.datetime(2024, 1, 2, 9, 0, 0, 123000),
    ),
    "io.debezium.time.Date": (19_724, "date", dt.date(2024, 1, 2)),
    "io.debezium.time.MicroTime": (34_200_000_001, "time", "09:30:00.000001"),
    "io.debezium.time.ZonedTimestamp": (
        "2024-01-02T10:00:00+01:00",
        "timestamp",
        dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC),
    ),
    "org.apache.kafka.connect.data.Decimal(10,2)": (_UNSCALED, "decimal(10,2)", Decimal("-123.45")),
    "io.debezium.data.VariableScaleDecimal": (
        {"scale": 3, "value": _UNSCALED},
        "decimal(38,18)",
        Decimal("-12.345000000000000000"),
    ),
    "timestamp_micros": (
        1_704_186_000_000_000,
        "timestamp",
        dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC),
    ),
    "timestamp_millis": (1_704_186_000_000, "timestamp", dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC)),
    "timestamp_seconds": (1_704_186_000, "timestamp", dt.datetime(2024, 1, 2, 9, tzinfo=dt.UTC)),
    "timestamp_nanos": (
        1_704_186_000_000_001_000,
        "timestamp",
        dt.datetime(2024, 1, 2, 9, 0, 0, 1, dt.UTC),
    ),
}


@pytest.mark.parametrize("declared", sorted(SCHEMALESS))
def test_values_sent_without_a_schema_read_as_their_declared_type(declared: str) -> None:
    """Debezium's JSON converter without schemas sends its semantic types' encodings (epoch
    counts, base64 unscaled decimals): a column declared by its semantic type, or an epoch
    count by its unit, reads them — typed, and as the same wire string inside Spark."""
    sent, canonical, expected = SCHEMALESS[declared]
    types = {"orders": {"c": declared}}
    (e,), rej = dbz.decode_file(_schemaless({"id": 1, "c": sent}), column_types=types)
    assert not rej
    assert (e["after"]["c"], e["types"]["c"]) == (expected, canonical)
    msg = RawMessage(orjson.dumps(_schemaless({"id": 1, "c": sent})), origin="m.json")
    (wire,) = Decoder(DIALECT, options(column_types=types), wire=True).decode(msg).events
    assert wire["after"]["c"] == to_wire(expected)


@pytest.mark.parametrize(
    ("declared", "sent", "hint"),
    [
        ("timestamp", 1_704_186_000_000_000, "io.debezium.time.MicroTimestamp"),
        ("timestamp_ntz", 1_704_186_000_000_000, "timestamp_micros"),
        ("date", 19_724, "io.debezium.time.Date"),
        ("numeric(10,2)", _UNSCALED, "org.apache.kafka.connect.data.Decimal(p,s)"),
        ("org.apache.kafka.connect.data.Decimal(10,2)", "12.50", "base64 text"),
    ],
)
def test_a_value_its_declared_type_cannot_read_says_what_to_declare(
    declared: str, sent: Any, hint: str
) -> None:
    """A number is never guessed to be an instant (its unit depends on the column), nor text
    to be base64: the dead letter names what to declare."""
    types = {"orders": {"c": declared}}
    _, (rej,) = dbz.decode_file(_schemaless({"id": 1, "c": sent}), column_types=types)
    assert rej.code == "BAD_VALUE" and hint in rej.message, rej.message


def test_payload_that_disagrees_with_its_schema_is_taken_as_written() -> None:
    (e,) = dbz.decode_file(conf("paimon_mysql_alltypes_with_schema.txt"))[0]
    assert e["types"]["_decimal"] == "decimal(8,0)" and e["after"]["_decimal"] == Decimal("11111")
    assert "_decimal" in e["metadata"]["payload_disagrees_with_schema"]
    assert e["after"]["_date"].isoformat() == "2023-03-23"
    assert e["after"]["_point"].startswith('{"x":1.0,"y":1.0,"wkb"')


# ---------------------------------------------------------------- detection and bad input


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        ("cockroachdb", "docs_enriched_schema.json"),
        ("cockroachdb", "docs_enriched_source.json"),
        ("other", "savegress_ddl_alter_table.json"),
    ],
)
def test_auto_detection_leaves_look_alikes_to_their_dialect(folder: str, name: str) -> None:
    data = shared_path("conformance", folder, name).read_bytes()
    events, rejections = dbz.decode_file(data, name, "auto")
    claimed = {e["dialect"] for e in events} | {r.dialect for r in rejections}
    assert claimed and DIALECT not in claimed


def _bad(ctype: str, name: str, value: Any) -> dict[str, Any]:
    """A create whose column ``v``, declared as Connect ``ctype``/``name``, holds ``value``."""
    params = {"scale": "2"} if name.endswith("Decimal") else None
    field = {"field": "v", "type": ctype, "name": name, "parameters": params}
    return _with_schema([{"field": "id", "type": "int64"}, field], {"id": 1, "v": value})


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"op": "c", "after": {"id": 1}, "source": "mysql"}, "BAD_SOURCE"),
        ({"op": [], "source": {}}, "UNKNOWN_OPERATION"),
        ({"op": "c", "after": [1], "source": {"table": "t"}}, "BAD_IMAGE"),
        ({"op": "c", "after": {"id": 1}, "source": {"connector": "x"}}, "MISSING_TABLE"),
        (
            {"op": "c", "after": {}, "source": {"connector": "mysql", "table": "t", "file": "b"}},
            "BAD_POSITION",
        ),
        ({"schema": None, "payload": [1]}, "NOT_AN_EVENT"),
        ({"source": {}, "historyRecord": "{"}, "BAD_DDL"),
        ({"source": {"table": "t"}, "tableChanges": 5}, "BAD_FIELD"),
        (_bad("int64", "io.debezium.time.MicroTimestamp", 2**64 - 1), "BAD_VALUE"),
        (_bad("int32", "io.debezium.time.Date", 10**9), "BAD_VALUE"),
        (_bad("bytes", "org.apache.kafka.connect.data.Decimal", "abc"), "BAD_VALUE"),
        (
            {"op": "c", "after": {"id": 1}, "source": {"table": "t"}, "ts_ms": 9 * 10**14},
            "BAD_TIMESTAMP",
        ),
        (
            {
                "op": "c",
                "after": '{"_id": 1, "at": {"$date": 99999999999999999}}',
                "source": {
                    "connector": "mongodb",
                    "db": "d",
                    "collection": "c",
                    "ts_ms": 1,
                    "ord": 1,
                },
            },
            "BAD_IMAGE",
        ),
    ],
)
def test_bad_input_codes(doc: Any, code: str) -> None:
    events, rejections = dbz.decode_file(doc)
    assert not events and [r.code for r in rejections] == [code]


def _bad_schema(schema: dict[str, Any]) -> dict[str, Any]:
    payload = {"op": "c", "after": {"id": 1}, "source": {"table": "t"}}
    return {"schema": schema, "payload": payload}


@pytest.mark.parametrize(
    ("doc", "codes"),
    [
        # fields of the wrong JSON type read as absent: the row decodes without schema types
        (_bad_schema({"type": "struct", "fields": 5}), []),
        (_bad_schema({"type": "struct", "fields": [{"field": "after", "fields": "x"}]}), []),
        (
            _with_schema(
                [
                    {"field": "id", "type": "int64"},
                    {
                        "field": "v",
                        "type": "string",
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": {"nested": 1}},
                    },
                ],
                {"id": 1, "v": "1.5"},
            ),
            [],
        ),
        ({"status": "BEGIN", "id": "571:" + "9" * 5000, "data_collections": []}, ["BAD_POSITION"]),
        (
            {
                "op": "u",
                "after": None,
                "source": {"connector": "mongodb", "collection": "c", "ord": 1, "ts_ms": 1},
                "updateDescription": {"removedFields": 7},
            },
            [],
        ),
    ],
)
def test_wrong_shapes_are_read_or_coded(doc: Any, codes: list[str]) -> None:
    """Fields of the wrong shape end as events or coded rejections, never a decoder error."""
    events, rejections = dbz.decode_file(doc)
    assert [r.code for r in rejections] == codes
    assert bool(events) == (not codes)


# ---------------------------------------------------------------- goldens


DOC_EXAMPLES = [
    "dbz_serde_mysql_with_schema.json",
    "docs_oracle_create_with_schema.json",
    "docs_postgresql_create_with_schema.json",
    "docs_postgresql_transaction_begin_end.txt",
    "docs_sqlserver_create_with_schema.json",
    "docs_sqlserver_transaction_begin_end.txt",
]


@pytest.mark.services
@pytest.mark.parametrize("name", DOC_EXAMPLES)
def test_documentation_example_golden(tmp_path: Path, name: str) -> None:
    rc, lines, err = inspect(tmp_path, name, conf(name), "--dialect", DIALECT)
    assert rc == 0, err
    check_golden(DIALECT, "docs_" + name.rsplit(".", 1)[0].removeprefix("docs_"), lines)


# ---------------------------------------------------------------- renderer vs oracle


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rendered_faults_replay_to_the_oracle(tmp_path: Path, seed: int) -> None:
    w = generate(seed, tables=3, transactions=60, features=renderer_features(DIALECT))
    n = len(w.transactions)
    events: list[dict[str, Any]] = []
    for i, part in enumerate((slice(0, n // 2), slice(max(0, n // 2 - 5), n))):
        res = render(w, tmp_path, seed=seed + i, transactions=part)
        for f in res.files:
            evs, rej = dbz.decode_file(
                f.read_bytes(),
                str(f),
                **{"table_keys": res.options.table_keys, "column_types": res.options.column_types},
            )
            assert not rej, rej[:2]
            events.extend(e for e in evs if e["table"] is not None)
    ops = {e["operation"] for e in events}
    assert ops >= {"SNAPSHOT", "INSERT", "UPDATE", "DELETE"}
    assert any(e["partial"] for e in events), "TOAST markers make partial updates"
    expected = oracle.apply(w)
    actual = replay(events, w.tables)
    for name in w.tables:
        assert actual[name] == expected[name], name


@pytest.mark.line("3.5")  # tests/crashing.py
@pytest.mark.services
@pytest.mark.spark
def test_transactions_consistency_crash_then_rerun_equals_oracle(
    spark: Any, tmp_path: Path
) -> None:
    """Rendered with every fault (snapshot overlap, transaction metadata, tombstones, TOAST
    markers, redelivery, shuffled files), applied with ``consistency: transactions``: the
    process dies after a merge of batch 2; the rerun converges
    to the oracle with nothing left held. (Crashes after the hold commit itself are proven
    dialect-independently in tests/test_crash.py.)"""
    from tests.processes import pipeline_config as _config
    from tests.test_crash import _check, _rerun, _run

    w = generate(17, tables=3, transactions=50, features=renderer_features(DIALECT))
    res = render(w, tmp_path / "landing", seed=17)
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    config = _config(
        tmp_path, warehouse, res.options, "crash_dbz", DIALECT, consistency="transactions"
    )
    rc, lines = _run(config, None, crash_after="merge@2")
    assert rc == 137, lines
    assert _rerun(spark, config) == 0
    _check(spark, w, "crash_dbz")
    waiting = spark.sql(
        "SELECT count(*) AS n FROM cdc.crash_dbz__cdcflow.held WHERE released_batch IS NULL"
    ).collect()[0]["n"]
    assert waiting == 0


def test_avro_values_take_types_from_the_connect_names(tmp_path: Path) -> None:
    """A Confluent-framed Avro value as Debezium's Avro converter writes it: the
    ``connect.name`` of each field gives its type."""
    import io

    import fastavro

    dec = {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 10,
        "scale": 2,
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
    }
    row = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "price", "type": ["null", dec]},
            {"name": "day", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
            {"name": "w", "type": "double"},
        ],
    }
    source = {
        "type": "record",
        "name": "Source",
        "fields": [{"name": n, "type": "string"} for n in ("connector", "db", "table", "file")]
        + [{"name": "pos", "type": "long"}],
    }
    schema = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", row]},
            {"name": "after", "type": ["null", "Value"]},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
        ],
    }
    value = {
        "before": None,
        "after": {"id": 1, "price": Decimal("12.50"), "day": 19439, "w": 0.5},
        "source": {"connector": "mysql", "db": "inv", "table": "t", "file": "b.000003", "pos": 7},
        "op": "c",
    }
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "5.avsc").write_bytes(orjson.dumps(schema))
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), value)
    framed = b"\x00" + (5).to_bytes(4, "big") + body.getvalue()
    record = {"topic": "inv.t", "offset": 1, "value_base64": base64.b64encode(framed).decode()}
    (e,), rej = dbz.decode_file(
        orjson.dumps(record), extra={"schema_dir": str(tmp_path / "schemas")}
    )
    assert not rej
    assert e["types"] == {"id": "int", "price": "decimal(10,2)", "day": "date", "w": "double"}
    assert e["after"]["price"] == Decimal("12.50") and e["after"]["day"].isoformat() == "2023-03-23"
    assert e["metadata"]["schema_id"] == 5 and "payload_disagrees_with_schema" not in e["metadata"]


@pytest.mark.services
def test_inspect_counts_skipped_messages(tmp_path: Path) -> None:
    data = conf("docs_sqlserver_key_with_schema.json") + b"\n" + conf("dbz_serde_mysql_update.json")
    rc, lines, err = inspect(tmp_path, "k.json", data, "--dialect", DIALECT)
    assert rc == 0 and len(lines) == 1
    assert "skipped messages that carry no change: key=1" in err
