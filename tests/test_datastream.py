"""The datastream dialect: the spec's example, one example per source, real files, ordering,
update pairs, backfill, bad input, and the renderer against the oracle."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
import yaml

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects import renderer
from cdcflow.dialects.datastream.sources import table_source
from cdcflow.event import dumps
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import ALL_FEATURES, generate
from cdcflow.transports.message import RawMessage
from tests.conftest_shared import shared_path
from tests.dialect_harness import DialectHarness, inspect, replay
from tests.golden import check_golden

render = renderer("datastream")

SPEC = "google-datastream-cdc-events.txt"
CONFORMANCE = "datastream"
ds = DialectHarness("datastream", origin="t.json")


def spec_example() -> dict[str, Any]:
    """The spec's ``oracle-insert`` example payload (from its AsyncAPI YAML)."""
    text = shared_path("specs", SPEC).read_text()
    doc = yaml.safe_load(text[text.index("asyncapi: 2.6.0") :])
    [example] = doc["components"]["messages"]["DatastreamCdcEventJson"]["examples"]
    assert example["name"] == "oracle-insert"
    payload: dict[str, Any] = example["payload"]
    return payload


def event(source_metadata: dict[str, Any], payload: dict[str, Any], **env: Any) -> dict:
    doc = {
        "uuid": "00000000-0000-4000-8000-000000000001",
        "read_timestamp": "2024-05-01T10:00:01.000Z",
        "source_timestamp": "2024-05-01T10:00:00.000Z",
        "object": "app_t",
        "read_method": "mysql-cdc-binlog",
        "stream_name": "projects/p/locations/l/streams/s",
        "schema_key": "k",
        "source_metadata": source_metadata,
        "payload": payload,
    }
    doc.update(env)
    return doc


def mysql(change: str, pos: int, file: str = "mysql-bin.000002", **payload: Any) -> dict:
    meta = {"table": "t", "database": "app", "primary_keys": ["id"], "log_file": file}
    meta.update(log_position=pos, change_type=change, is_deleted=change == "DELETE")
    return event(meta, {"id": 1, "v": "a", **payload}, sort_keys=[1714557600000, file, pos])


# ---------------------------------------------------------------- the spec's example


@pytest.mark.services
def test_spec_oracle_insert_golden(tmp_path: Path) -> None:
    rc, lines, err = inspect(tmp_path, "oracle-insert.json", orjson.dumps(spec_example()))
    assert rc == 0, err
    check_golden("datastream", "spec_oracle_insert", lines)
    [ev] = [orjson.loads(x) for x in lines]
    assert (ev["dialect"], ev["source"], ev["operation"]) == ("datastream", "oracle", "INSERT")
    assert (ev["database"], ev["schema"], ev["table"]) == ("DB1", "ROOT", "SAMPLE")
    assert ev["id"] == "d7989206-380f-0e81-8056-240501101100"
    assert ev["transaction_id"] == "12345"
    # no primary_keys and no configured keys: no key (the engine dead-letters KEY_UNKNOWN)
    assert ev["key"] is None
    assert ev["after"] == {"THIS_IS_MY_PK": "1231535353", "FIELD1": "foo", "FIELD2": "TLV"}
    assert ev["timestamp"] == "2019-11-07T02:15:39Z"
    assert ev["position"]["scn"] == 15869116216871


def test_spec_example_with_configured_keys() -> None:
    [ev], _ = ds.decode(spec_example(), table_keys={"ROOT.SAMPLE": ("THIS_IS_MY_PK",)})
    assert ev["key"] == {"THIS_IS_MY_PK": "1231535353"}


# ---------------------------------------------------------------- one example per source

SOURCE_EXAMPLES: dict[str, dict[str, Any]] = {
    "mysql": event(
        {
            "table": "users",
            "database": "shop",
            "primary_keys": ["id"],
            "log_file": "mysql-bin.000014",
            "log_position": 59424,
            "change_type": "UPDATE-INSERT",
            "is_deleted": False,
        },
        {"id": 7, "name": "Ann", "active": 1, "balance": 12.5},
        sort_keys=[1715237813000, "mysql-bin.000014", 59424],
    ),
    "oracle": event(
        {
            "schema": "HR",
            "table": "EMPLOYEES",
            "database": "XE",
            "row_id": "AAAE5XAAEAAAADMAAB",
            "scn": 7044930,
            "is_deleted": True,
            "change_type": "DELETE",
            "ssn": 0,
            "rs_id": " 0x0000d6.00000002.0010 ",
            "tx_id": "CAACAAUKAAA=",
            "log_file": "/arch/o1_mf_1_214_.arc",
            "primary_keys": ["EMPLOYEE_ID"],
        },
        {"EMPLOYEE_ID": 210, "LAST_NAME": "Zhou", "SALARY": 8888.0},
        read_method="oracle-cdc-logminer",
        object="HR_EMPLOYEES",
    ),
    "postgres": event(
        {
            "schema": "public",
            "table": "orders",
            "is_deleted": False,
            "change_type": "UPDATE",
            "tx_id": 363552,
            "lsn": "16/CB002DB0",
            "primary_keys": ["region", "order_no"],
        },
        {"region": "EU", "order_no": 5, "amount": "19.90", "placed": "2024-05-01T09:59:59.5"},
        read_method="postgresql-cdc",
        object="public_orders",
        sort_keys=[1714557600000, "16/CB002DB0"],
    ),
    "sqlserver": event(
        {
            "schema": "dbo",
            "table": "ITEMS",
            "database": "mydb",
            "lsn": "00000025:00000728:0003",
            "tx_id": "1234",
            "physical_location": "1:8:0",
            "replication_index": ["ITEM_ID"],
            "is_deleted": False,
            "change_type": "INSERT",
        },
        {"ITEM_ID": 101, "NAME": "lamp"},
        read_method="sqlserver-cdc",
        object="dbo_ITEMS",
    ),
    "salesforce": event(
        {
            "object_name": "Account",
            "domain": "acme.my.salesforce.com",
            "is_deleted": False,
            "change_type": "UPDATE",
            "primary_keys": ["Id"],
        },
        {"Id": "0015g00000AbCdE", "Name": "Acme"},
        read_method="salesforce-cdc",
        object="Account",
        sort_keys=[1714557600000, "0015g00000AbCdE", 3],
    ),
    "mongodb": event(
        {
            "database": "app",
            "collection": "carts",
            "change_type": "CREATE",
            "is_deleted": False,
            "primary_keys": ["_id"],
        },
        {"_id": "65f0c0ffee", "items": [{"sku": "a", "n": 2}]},
        read_method="mongodb-cdc",
        object="app_carts",
        sort_keys=[1714557600000, 12, 1],
    ),
    "spanner": event(
        {
            "commit_timestamp": "2024-05-01T10:00:00.123456789Z",
            "snapshot": False,
            "project_id": "p",
            "instance_id": "i",
            "database_id": "appdb",
            "change_stream_name": "cs",
            "table": "Singers",
            "server_transaction_id": "tx-77",
            "record_sequence": "00000002",
            "mod_index": 1,
            "transaction_tag": "",
            "system_transaction": False,
            "number_of_records_in_transaction": 1,
            "value_capture_type": "NEW_VALUES",
            "mod_type": "UPDATE",
            "primary_keys": ["SingerId"],
            "is_deleted": False,
        },
        {"SingerId": 1, "LastName": "Richards"},
        read_method="spanner-cdc",
        object="Singers",
    ),
}


@pytest.mark.services
@pytest.mark.parametrize("source", sorted(SOURCE_EXAMPLES))
def test_source_example_golden(tmp_path: Path, source: str) -> None:
    rc, lines, err = inspect(tmp_path, f"{source}.json", orjson.dumps(SOURCE_EXAMPLES[source]))
    assert rc == 0, err
    check_golden("datastream", f"source_{source}", lines)
    [ev], rej = ds.decode(SOURCE_EXAMPLES[source], origin=f"{source}.json")
    assert not rej
    assert orjson.loads(lines[0]) == orjson.loads(dumps(ev))
    assert ev["source"] == source


def test_source_examples_fields() -> None:
    ev = {s: ds.decode(doc)[0][0] for s, doc in SOURCE_EXAMPLES.items()}
    m, o, p, q = ev["mysql"], ev["oracle"], ev["postgres"], ev["sqlserver"]
    assert (m["database"], m["schema"], m["table"], m["operation"]) == (
        "shop",
        None,
        "users",
        "UPDATE",
    )
    assert m["key"] == {"id": 7} and m["before"] is None
    assert (o["database"], o["schema"], o["table"], o["operation"]) == (
        "XE",
        "HR",
        "EMPLOYEES",
        "DELETE",
    )
    assert o["before"]["LAST_NAME"] == "Zhou" and o["after"] is None
    assert o["transaction_id"] == "CAACAAUKAAA="
    assert (p["schema"], p["table"], p["key"]) == (
        "public",
        "orders",
        {"region": "EU", "order_no": 5},
    )
    assert p["transaction_id"] == "363552"
    # replication_index (column names) gives the key when primary_keys is absent
    assert q["key"] == {"ITEM_ID": 101} and q["transaction_id"] == "1234"
    sf, mg, sp = ev["salesforce"], ev["mongodb"], ev["spanner"]
    assert (sf["database"], sf["table"], sf["key"]) == (
        "acme.my.salesforce.com",
        "Account",
        {"Id": "0015g00000AbCdE"},
    )
    assert sf["metadata"]["sequence_source"] == "sort_keys"
    assert (mg["database"], mg["table"], mg["operation"]) == ("app", "carts", "INSERT")
    assert mg["types"]["items"] == "json"
    assert (sp["database"], sp["table"], sp["transaction_id"]) == ("appdb", "Singers", "tx-77")
    # NEW_VALUES: an update carries only the changed columns
    assert sp["partial"] is True and sp["after"] == {"SingerId": 1, "LastName": "Richards"}


# ---------------------------------------------------------------- real files


def _conf(name: str) -> Path:
    return shared_path("conformance", CONFORMANCE, name)


def test_badal_single_and_array_events() -> None:
    [ev], rej = ds.decode_file(_conf("badal_accounts_single_event.json"))
    assert not rej
    assert (ev["operation"], ev["key"], ev["after"]["balance"]) == (
        "INSERT",
        {"id": "915725144"},
        1000,
    )
    assert ev["types"] == {"id": "string", "type": "string", "balance": "bigint"}
    [ev], rej = ds.decode_file(_conf("badal_customers_array_event.json"))
    assert not rej and ev["after"]["address"] == "0552 Tony Viaduct\nWest Anita, NH 37063"


def test_badal_mysql_events() -> None:
    events, rej = ds.decode_file(_conf("badal_mysql_events_records1.json"))
    assert not rej
    ops = [e["operation"] for e in events]
    assert ops == ["INSERT", "INSERT", "UPDATE", "INSERT", "INSERT", "DELETE"]
    # a table name with a dot; object 'demo_inventory.voters'
    assert {(e["database"], e["table"]) for e in events} == {("demo", "inventory.voters")}
    assert events[-1]["before"]["id"] == "486570281" and events[-1]["key"] == {"id": "486570281"}
    seqs = [e["sequence"] for e in events]
    assert seqs == sorted(seqs)  # binlog positions increase through the file
    more, rej = ds.decode_file(_conf("badal_mysql_events_records2.json"))
    assert not rej and [e["operation"] for e in more] == ["INSERT"] * 4
    assert min(e["sequence"] for e in more) > max(seqs)


def test_dataflow_template_json_fixtures() -> None:
    [bf], _ = ds.decode_file(_conf("dft_java_oracle_backfill_json.json"))
    assert (bf["operation"], bf["source"], bf["key"]) == (
        "SNAPSHOT",
        "oracle",
        {"JOB_ID": "PR_REP"},
    )
    assert bf["timestamp"] == dt.datetime(2021, 12, 25, 5, 42, 4, 408000, tzinfo=dt.UTC)
    [nokeys], _ = ds.decode_file(_conf("dft_java_oracle_no_keys.json"))
    assert nokeys["key"] is None and nokeys["operation"] == "SNAPSHOT"
    [both], _ = ds.decode_file(_conf("dft_java_sqlserver_both_keys.json"))
    # primary_keys 'id' names the payload column 'ID' (case differs)
    assert both["key"] == {"ID": 1}
    [cdc], _ = ds.decode_file(_conf("dft_java_sqlserver_cdc_json.json"))
    assert cdc["key"] == {"EMPLOYEE_ID": 101} and cdc["position"]["lsn"] == "00000025:00000728:0003"
    [ri], _ = ds.decode_file(_conf("dft_java_sqlserver_replication_index.json"))
    assert ri["key"] == {"ORDER_ID": 1} and ri["metadata"]["sequence_source"] == "source_timestamp"


def test_oracle_avro_backfill_and_cdc() -> None:
    dump, rej = ds.decode_file(_conf("cdap_oracle_backfill_dump.avro"))
    assert not rej and len(dump) == 108
    assert {e["operation"] for e in dump} == {"SNAPSHOT"}
    root = [e for e in dump if e["after"]["MANAGER_ID"] is None]
    assert len(root) == 1 and root[0]["after"]["EMPLOYEE_ID"] == 100
    assert dump[0]["types"]["SALARY"] == "decimal(8,2)"
    assert dump[0]["types"]["HIRE_DATE"] == "timestamp"
    assert dump[0]["types"]["FIRST_NAME"] == "string"
    ins = ds.decode_file(_conf("cdap_oracle_cdc_insert.avro"))[0][0]
    upd = ds.decode_file(_conf("cdap_oracle_cdc_update.avro"))[0][0]
    dele = ds.decode_file(_conf("cdap_oracle_cdc_delete.avro"))[0][0]
    assert [e["operation"] for e in (ins, upd, dele)] == ["INSERT", "UPDATE", "DELETE"]
    assert ins["after"]["SALARY"] == Decimal("12131.00") and ins["after"]["COMMISSION_PCT"] is None
    assert upd["after"]["SALARY"] == Decimal("8888.00")
    assert dele["before"]["EMPLOYEE_ID"] == 210 and dele["after"] is None
    # SCN order; every streamed change after every backfill row
    assert ins["sequence"] < upd["sequence"] < dele["sequence"]
    assert max(e["sequence"] for e in dump) < ins["sequence"]


def test_oracle_avro_key_change_pair() -> None:
    (old, new), rej = ds.decode_file(_conf("cdap_oracle_cdc_update_pk.avro"))
    assert not rej
    assert (old["operation"], old["key"]) == ("DELETE", {"EMPLOYEE_ID": 210})
    assert (new["operation"], new["key"]) == ("UPDATE", {"EMPLOYEE_ID": 211})
    assert old["position"]["scn"] == new["position"]["scn"]
    assert old["sequence"] < new["sequence"]


def test_mysql_avro_files() -> None:
    numbers, _ = ds.decode_file(_conf("dft_mysql_cdc_numbers.avro"))
    assert [e["after"]["decimaler"] for e in numbers] == [Decimal("1.00"), Decimal("11.22")]
    assert numbers[1]["after"]["intyu"] == 4294967295
    assert numbers[0]["types"]["bigu"] == "decimal(38,18)" and numbers[1]["after"]["bigu"] == 0
    old, new = ds.decode_file(_conf("dft_mysql_cdc_pk_update_pair.avro"))[0]
    assert (old["operation"], new["operation"]) == ("DELETE", "UPDATE")
    assert old["key"]["int64_field"] == 1 and new["key"]["int64_field"] == 10
    assert len(new["key"]) == 8 and old["database"] == "ea-main"
    assert old["sequence"] < new["sequence"]
    # the file holds the DELETE (position 4634) before the UPDATE-INSERT (5167), of other keys
    dele, upd = ds.decode_file(_conf("dft_mysql_cdc_update_delete.avro"))[0]
    assert (dele["operation"], upd["operation"]) == ("DELETE", "UPDATE")
    assert (dele["key"]["int64_field"], upd["key"]["int64_field"]) == (3, 2)
    assert dele["sequence"] < upd["sequence"]
    mixed, _ = ds.decode_file(_conf("dft_mysql_cdc_users_mixed.avro"))
    assert [e["operation"] for e in mixed] == ["DELETE", "INSERT", "INSERT", "UPDATE"]
    assert [e["sequence"] for e in mixed] == sorted(e["sequence"] for e in mixed)
    alltypes, _ = ds.decode_file(_conf("dft_mysql_cdc_alltypes_update_delete.avro"))
    a = alltypes[0]["after"]
    assert a["time_column"] == "08:15:30" and alltypes[0]["types"]["time_column"] == "string"
    assert a["decimal_column"] == Decimal("456.12") and a["bit_column"] == 102
    # declared MySQL types: DATETIME is wall-clock time, BLOB hex text becomes bytes
    [typed, _], _ = ds.decode_file(
        _conf("dft_mysql_cdc_alltypes_update_delete.avro"),
        column_types={
            "l1.AllDatatypeColumns2": {"datetime_column": "datetime", "blob_column": "blob"}
        },
    )
    assert typed["after"]["datetime_column"] == dt.datetime(2024, 2, 8, 8, 15, 30)
    assert typed["after"]["blob_column"] == b"blob_data_1"


def test_mysql_avro_backfills() -> None:
    for name, n in (
        ("dft_mysql_backfill_alltypes.avro", 2),
        ("dft_mysql_backfill_people.avro", 1),
        ("dft_mysql_backfill_timezone.avro", 2),
    ):
        events, rej = ds.decode_file(_conf(name))
        assert not rej and len(events) == n
        assert {e["operation"] for e in events} == {"SNAPSHOT"}
        assert all(e["sequence"].startswith("p010!") for e in events)  # phase 0: backfill
    [people], _ = ds.decode_file(_conf("dft_mysql_backfill_people.avro"))
    assert people["after"]["timestamp_with_tz"] == dt.datetime(
        2020, 10, 13, 14, 30, 0, 56483, tzinfo=dt.UTC
    )
    assert people["after"]["_0col"] == 1


def test_early_oracle_dump_and_postgres_avro() -> None:
    rows, rej = ds.decode_file(_conf("dft_oracle_dump_hr_locations.avro"))
    assert not rej and len(rows) == 23
    assert {e["operation"] for e in rows} == {"SNAPSHOT"}
    first = rows[0]["after"]
    # Oracle VARCHAR as a {value, length} record; timestampTz record
    assert first["STREET_ADDRESS"] == "1297 Via Cola di Rie" and first["LOCATION_ID"] == 1000.0
    assert rows[0]["types"]["timestamp_with_tz"] == "timestamp"
    # field-level logicalType on payload columns is not an Avro logical type: plain longs
    assert rows[0]["types"]["update_timestamp_micros"] == "bigint"
    [pg], rej = ds.decode_file(_conf("dft_postgres_cdc_bytearray.avro"))
    assert (
        not rej
        and pg["source"] == "postgres"
        and pg["after"]["binary_content"] == b"\xde\xad\xbe\xef"
    )
    assert pg["types"]["json_column"] == "json" and pg["key"] is None  # primary_keys: []
    assert pg["transaction_id"] == "363552"


def test_bigquery_merge_row() -> None:
    [ev], rej = ds.decode_file(
        _conf("bq_connext_transfers_row_with_datastream_metadata.json"),
        table_keys={"transfers": ("transfer_id",)},
        extra={"table": "transfers", "source": "postgres"},
    )
    assert not rej
    assert (ev["table"], ev["operation"], ev["id"]) == (
        "transfers",
        "UPSERT",
        "f9545ad6-34ba-4d4b-9ec7-a8f511001010",
    )
    assert ev["timestamp"] == dt.datetime(2023, 7, 11, 19, 32, 26, 153000, tzinfo=dt.UTC)
    assert ev["after"]["origin_transacting_amount"] == "221159783502651317642"
    assert ev["key"] == {"transfer_id": ev["after"]["transfer_id"]}
    assert "datastream_metadata" not in ev["after"]


def test_bigquery_append_only_rows() -> None:
    rows = [
        {
            "id": 1,
            "v": "a",
            "datastream_metadata": {
                "UUID": "u1",
                "SOURCE_TIMESTAMP": 1000,
                "CHANGE_SEQUENCE_NUMBER": "2",
                "CHANGE_TYPE": "UPDATE-INSERT",
                "SORT_KEYS": ["1000", "mysql-bin.000001", "20"],
            },
        },
        {
            "id": 1,
            "v": "z",
            "datastream_metadata": {
                "UUID": "u0",
                "SOURCE_TIMESTAMP": 1000,
                "CHANGE_SEQUENCE_NUMBER": "1",
                "CHANGE_TYPE": "UPDATE-DELETE",
                "SORT_KEYS": ["1000", "mysql-bin.000001", "20"],
            },
        },
    ]
    events, rej = ds.decode(rows, origin="t.json", table_keys={"t": ("id",)}, extra={"table": "t"})
    assert not rej
    assert [e["operation"] for e in events] == ["UPDATE", "DELETE"]
    assert events[1]["sequence"] < events[0]["sequence"]


# ---------------------------------------------------------------- ordering


def test_mysql_order_follows_the_binlog_not_the_timestamp() -> None:
    # a statement that started earlier (older timestamp) but committed later (higher position)
    late = mysql("UPDATE-INSERT", 900, v="late")
    late["sort_keys"][0] -= 5000
    late["source_timestamp"] = "2024-05-01T09:59:55.000Z"
    early = mysql("UPDATE-INSERT", 500, v="early")
    (a,), (b,) = ds.decode(early)[0], ds.decode(late)[0]
    assert b["sequence"] > a["sequence"]
    # binlog files compare by number, positions as numbers
    next_file = mysql("INSERT", 4, file="mysql-bin.000010")
    assert ds.decode(next_file)[0][0]["sequence"] > b["sequence"]
    assert (
        ds.decode(mysql("INSERT", 10000))[0][0]["sequence"]
        > ds.decode(mysql("INSERT", 9999))[0][0]["sequence"]
    )


def _oracle(scn: int, rs_id: str, ssn: int) -> dict:
    meta = {"schema": "S", "table": "T", "database": "D", "scn": scn, "rs_id": rs_id, "ssn": ssn}
    meta.update(change_type="UPDATE", primary_keys=["ID"], tx_id="x")
    return event(meta, {"ID": 1}, read_method="oracle-cdc-logminer")


def test_oracle_order_scn_rs_id_ssn() -> None:
    order = [
        _oracle(99, " 0x0000ff.0000ffff.0010 ", 5),
        _oracle(100, " 0x000004.00000705.0010 ", 0),
        _oracle(100, " 0x000004.00000705.0010 ", 1),
        _oracle(100, " 0x000004.00000a00.0010 ", 0),
        _oracle(100, " 0x000005.00000001.0000 ", 0),
        _oracle(1000, "", 0),
    ]
    seqs = [ds.decode(d)[0][0]["sequence"] for d in order]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def _pg(lsn: str) -> dict:
    meta = {"schema": "public", "table": "t", "change_type": "UPDATE", "lsn": lsn, "tx_id": 1}
    return event({**meta, "primary_keys": ["id"]}, {"id": 1}, read_method="postgresql-cdc")


def test_postgres_and_sqlserver_order_by_lsn_as_numbers() -> None:
    pg = [ds.decode(_pg(x))[0][0]["sequence"] for x in ("0/A", "0/1000", "1/0", "16/CB002DB0")]
    assert pg == sorted(pg)
    lsns = ("00000025:00000728:0003", "00000025:00000728:0010", "00000026:00000001:0001")
    ss = []
    for lsn in lsns:
        meta = {"schema": "dbo", "table": "t", "database": "d", "lsn": lsn, "change_type": "UPDATE"}
        ss.append(
            ds.decode(
                event({**meta, "primary_keys": ["id"]}, {"id": 1}, read_method="sqlserver-cdc")
            )[0][0]["sequence"]
        )
    assert ss == sorted(ss)


def _spanner(commit: str, record: str, mod: int) -> dict:
    meta = {"commit_timestamp": commit, "record_sequence": record, "mod_index": mod}
    meta.update(table="T", mod_type="UPDATE", primary_keys=["id"], value_capture_type="NEW_ROW")
    return event(meta, {"id": 1, "v": 2}, read_method="spanner-cdc")


def test_spanner_order_commit_timestamp_record_sequence_mod_index() -> None:
    order = [
        _spanner("2024-05-01T10:00:00.000000001Z", "00000009", 3),
        _spanner("2024-05-01T10:00:00.000000002Z", "00000001", 0),
        _spanner("2024-05-01T10:00:00.000000002Z", "00000001", 1),
        _spanner("2024-05-01T10:00:00.000000002Z", "00000010", 0),
        _spanner("2024-05-01T10:00:01Z", "00000000", 0),
    ]
    seqs = [ds.decode(d)[0][0]["sequence"] for d in order]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    [full], _ = ds.decode(order[0])
    assert full["partial"] is False  # NEW_ROW carries the whole row


def test_update_pair_halves_share_position_insert_half_wins() -> None:
    [old], _ = ds.decode(mysql("UPDATE-DELETE", 700, v="old"))
    [new], _ = ds.decode(mysql("UPDATE-INSERT", 700, v="new"))
    assert old["operation"] == "DELETE" and new["operation"] == "UPDATE"
    assert old["key"] == new["key"] and old["sequence"] < new["sequence"]
    # the next change of the row orders after both halves
    [nxt], _ = ds.decode(mysql("DELETE", 701))
    assert nxt["sequence"] > new["sequence"]


def test_backfill_never_overrides_a_streamed_change() -> None:
    backfill = mysql("INSERT", 0, file="")
    backfill.update(read_method="mysql-backfill-fulldump", sort_keys=[1999999999999, "", 0])
    backfill["source_metadata"].update(log_file="", log_position=0)
    [bf], _ = ds.decode(backfill)
    [cdc], _ = ds.decode(mysql("INSERT", 4))
    assert bf["operation"] == "SNAPSHOT" and bf["sequence"] < cdc["sequence"]
    later = {**backfill, "sort_keys": [2000000000000, "", 0]}
    assert ds.decode(later)[0][0]["sequence"] > bf["sequence"]  # a later backfill read wins


def test_is_deleted_and_unknown_change_types() -> None:
    doc = mysql("INSERT", 5)
    doc["source_metadata"]["is_deleted"] = True
    [ev], _ = ds.decode(doc)
    assert ev["operation"] == "DELETE" and ev["before"]["id"] == 1
    doc = mysql("INSERT", 5)
    doc["source_metadata"].pop("change_type")
    assert ds.decode(doc)[0][0]["operation"] == "UPSERT"
    assert ds.codes(mysql("MERGE", 5)) == ["UNKNOWN_CHANGE_TYPE"]


# ---------------------------------------------------------------- bad input, layout


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"uuid": "x"}, "NOT_AN_EVENT"),
        ([1], "NOT_AN_EVENT"),
        (event({"table": "t"}, None), "MISSING_PAYLOAD"),  # type: ignore[arg-type]
        (event("oops", {"id": 1}), "BAD_METADATA"),  # type: ignore[arg-type]
        (event({"change_type": "INSERT"}, {"id": 1}, object=None), "MISSING_TABLE"),
        ({**mysql("INSERT", 5), "payload": {"v": 1}}, "KEY_COLUMN_MISSING"),
        ({**mysql("INSERT", 5), "source_timestamp": "yesterday"}, "BAD_TIMESTAMP"),
        (
            event({**_pg("zz")["source_metadata"]}, {"id": 1}, read_method="postgresql-cdc"),
            "BAD_POSITION",
        ),
    ],
)
def test_bad_input_codes(doc: Any, code: str) -> None:
    assert ds.codes(doc) == [code]


def test_bad_value_for_declared_type() -> None:
    events, rej = ds.decode(mysql("INSERT", 5, v="x"), column_types={"app.t": {"v": "int"}})
    assert not events and [r.code for r in rej] == ["BAD_VALUE"] and "'v'" in rej[0].message


def test_array_file_keeps_good_items() -> None:
    out = Decoder("datastream").decode(
        RawMessage(orjson.dumps([mysql("INSERT", 5), mysql("NOPE", 6)]), origin="a.json")
    )
    assert len(out.events) == 1 and [(r.code, r.item) for r in out.rejections] == [
        ("UNKNOWN_CHANGE_TYPE", 1)
    ]


def test_corrupt_avro_keeps_records_before_the_damage() -> None:
    data = _conf("dft_mysql_cdc_users_mixed.avro").read_bytes()
    events, rej = ds.decode_file(data[:-60], "x.avro")
    assert len(events) < 4 and [r.code for r in rej] == ["CORRUPT_AVRO"]
    events, rej = ds.decode_file(b"Obj\x01garbage", "x.avro")
    assert not events and [r.code for r in rej] == ["CORRUPT_AVRO"]


def test_folder_layout_is_recorded_and_cross_checked() -> None:
    origin = "root/app_t/2024/05/01/10/00/abc_mysql-cdc-binlog_1_0_0.jsonl"
    [ev], _ = ds.decode(mysql("INSERT", 5), origin=origin)
    assert ev["metadata"]["folder_object"] == "app_t" and "folder_mismatch" not in ev["metadata"]
    [ev], _ = ds.decode(mysql("INSERT", 5), origin=origin.replace("app_t", "other_x"))
    assert "other_x" in ev["metadata"]["folder_mismatch"]


def test_auto_detection_claims_only_datastream() -> None:
    d = Decoder("auto")
    out = d.decode(RawMessage(orjson.dumps(spec_example()), origin="a.json"))
    assert [e["dialect"] for e in out.events] == ["datastream"]
    ces = shared_path(
        "conformance", "sqlserver_ces", "msdocs_ga_insert_employees.json"
    ).read_bytes()
    assert [e["dialect"] for e in d.decode(RawMessage(ces, origin="c.json")).events] == [
        "sqlserver_ces"
    ]
    unified = {"operation": "INSERT", "table": "t", "after": {"id": 1}, "position": {"lsn": "0/1"}}
    assert [
        e["dialect"] for e in d.decode(RawMessage(orjson.dumps(unified), origin="u.json")).events
    ] == ["savegress"]


def test_ces_avro_files_are_handed_to_their_dialect(tmp_path: Path) -> None:
    from cdcflow.dialects.sqlserver_ces.render import avro_cloudevents, render_change

    w = generate(3, transactions=5, features=frozenset({"insert"}))
    events = [render_change(w, ch) for ch in w.changes()]
    data = avro_cloudevents(events)
    outs = list(Decoder("auto").decode_file(data, "ces.avro"))
    assert outs and all(not o.rejections for o in outs)
    assert {e["dialect"] for o in outs for e in o.events} == {"sqlserver_ces"}


# ---------------------------------------------------------------- renderer vs oracle


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("source", ["mysql", "oracle", "postgres", "sqlserver", "spanner"])
def test_rendered_faults_replay_to_the_oracle(tmp_path: Path, seed: int, source: str) -> None:
    feats = frozenset(ALL_FEATURES - {"truncate"})  # key changes included: update pairs
    w = generate(seed, tables=3, transactions=60, features=feats)
    fits = {t: source for t in w.tables if _fits(w, t, source)}
    w = dataclasses.replace(w, extra={"datastream_sources": fits})
    n = len(w.transactions)
    events: list[dict[str, Any]] = []
    for i, part in enumerate((slice(0, n // 2), slice(max(0, n // 2 - 5), n))):
        res = render(w, tmp_path, seed=seed + i, transactions=part)
        for f in res.files:
            evs, rej = ds.decode_file(f, **{"column_types": res.options.column_types})
            assert not rej, rej[:2]
            events.extend(evs)
    assert {e["operation"] for e in events} >= {"INSERT", "DELETE", "SNAPSHOT"}
    expected = oracle.apply(w)
    actual = replay(events, w.tables)
    for name in w.tables:
        assert actual[name] == expected[name], f"{name} ({table_source(w, name)})"


def _fits(w: Any, table: str, source: str) -> bool:
    from cdcflow.dialects.datastream.sources import NATIVE_TYPES

    return all(t in NATIVE_TYPES[source] for t in w.tables[table].columns.values())


def test_renderer_layout_and_shapes(tmp_path: Path) -> None:
    w = generate(5, tables=3, transactions=40, features=frozenset(ALL_FEATURES - {"truncate"}))
    w = dataclasses.replace(
        w, extra={"datastream_sources": {"accounts": "mysql", "events": "spanner"}}
    )
    res = render(w, tmp_path, seed=5)
    assert all(
        re.search(r"/\d{4}/\d{2}/\d{2}/\d{2}/\d{2}/[^/_][^/]*\.(jsonl|avro)$", str(f))
        for f in res.files
    )
    assert not list(tmp_path.rglob("_*"))
    docs: list[Any] = []
    for f in res.files:
        body = f.read_bytes()
        if f.suffix == ".avro":
            docs.extend(fastavro.reader(io.BytesIO(body)))
        elif body.startswith(b"["):
            docs.extend(orjson.loads(body))
        else:
            docs.extend(orjson.loads(x) for x in body.splitlines())
    types = {
        (d["object"], d["source_metadata"].get("change_type", d["source_metadata"].get("mod_type")))
        for d in docs
    }
    assert ("app_accounts", "UPDATE-DELETE") in types and ("app_accounts", "UPDATE-INSERT") in types
    spanner = [
        d
        for d in docs
        if d["read_method"] == "spanner-cdc" and d["source_metadata"]["mod_type"] == "UPDATE"
    ]
    assert spanner and any(len(d["payload"]) < len(w.tables["events"].columns) for d in spanner)
    assert any("backfill" in d["read_method"] for d in docs)


# ---------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spec_and_rendered_events_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    from cdcflow.demo import demo_config
    from cdcflow.pipeline.query import Pipeline
    from cdcflow.testing.compare import compare_replicas

    feats = frozenset(ALL_FEATURES - {"truncate"})
    w = generate(11, tables=3, transactions=40, features=feats)
    w = dataclasses.replace(
        w,
        extra={
            "datastream_sources": {"accounts": "mysql", "orders": "postgres", "events": "spanner"}
        },
    )
    landing = tmp_path / "landing" / "datastream"
    res = render(w, landing, seed=11)
    (landing / "spec.json").write_bytes(orjson.dumps(spec_example()))
    cfg = demo_config(tmp_path, "datastream", res.options)
    cfg = cfg.model_copy(update={"namespace": "ds_spec", "pipeline": "ds_spec"})
    reports = Pipeline(cfg, spark).run().reports
    assert sum(r.dead_lettered for r in reports) == 1  # the spec's row: no key (KEY_UNKNOWN)
    compare_replicas(spark, w, "ds_spec").assert_equal()


@pytest.mark.spark
def test_spec_and_source_examples_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """The spec's example (keys configured: it has no primary_keys) and one example per source
    database, through the pipeline: typed replica rows, the Oracle DELETE leaves nothing."""
    from tests.scenario import config, land, rows, run

    cfg = config(tmp_path, "ds_examples", keys={"SAMPLE": ["THIS_IS_MY_PK"]})
    cfg = cfg.model_copy(
        update={"sources": [cfg.sources[0].model_copy(update={"dialect": "datastream"})]}
    )
    land(tmp_path / "landing", [spec_example(), *SOURCE_EXAMPLES.values()])
    reports = run(spark, cfg)
    assert sum(r.dead_lettered for r in reports) == 0
    assert rows(spark, cfg, "sample", "THIS_IS_MY_PK, FIELD1, FIELD2") == [
        {"THIS_IS_MY_PK": "1231535353", "FIELD1": "foo", "FIELD2": "TLV"}
    ]
    assert rows(spark, cfg, "users", "id, name, active, balance") == [
        {"id": 7, "name": "Ann", "active": 1, "balance": 12.5}
    ]
    assert rows(spark, cfg, "employees") == []
    assert rows(spark, cfg, "orders", "region, order_no, amount, placed") == [
        {"region": "EU", "order_no": 5, "amount": "19.90", "placed": "2024-05-01T09:59:59.5"}
    ]
    assert rows(spark, cfg, "items", "ITEM_ID, NAME") == [{"ITEM_ID": 101, "NAME": "lamp"}]
    assert rows(spark, cfg, "account", "Id, Name") == [{"Id": "0015g00000AbCdE", "Name": "Acme"}]
    assert rows(spark, cfg, "carts", "_id, items") == [
        {"_id": "65f0c0ffee", "items": '[{"sku":"a","n":2}]'}
    ]
    assert rows(spark, cfg, "singers", "SingerId, LastName") == [
        {"SingerId": 1, "LastName": "Richards"}
    ]


def test_cloud_storage_object_names() -> None:
    from cdcflow.dialects.datastream import parse_object_name

    names = _conf("gcs_object_names.txt").read_text().split()
    parsed = [parse_object_name(n) for n in names]
    assert all(parsed), names
    assert [p["read_method"] for p in parsed if p] == ["oracle-backfill", "oracle-cdc-logminer"]
    path = f"root/HR_EMPLOYEES/2024/05/01/10/00/{names[1]}.jsonl"
    [ev], _ = ds.decode(SOURCE_EXAMPLES["oracle"], origin=path)
    assert ev["metadata"]["file_read_method"] == "oracle-cdc-logminer"
    assert ev["metadata"]["folder_object"] == "HR_EMPLOYEES"
    assert parse_object_name("part-0001.jsonl") is None
