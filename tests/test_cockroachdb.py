"""The cockroachdb dialect: every spec example as a golden through ``cdcflow inspect``, one test
per conformance file, bad input codes, ordering, file names, Avro, and the renderer against the
oracle (plus pipeline scenarios for the ordering and schema-change examples)."""

from __future__ import annotations

import base64
import io
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest

from cdcflow import sequence
from cdcflow.decode.decoder import Decoder
from cdcflow.dialects import renderer, renderer_features
from cdcflow.dialects.cockroachdb import bits_from_avro, parse_object_name, split_topic
from cdcflow.dialects.cockroachdb.feed import table_feed
from cdcflow.dialects.model import DialectOptions
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import generate
from cdcflow.transports.json import loads_exact
from cdcflow.transports.message import RawMessage
from tests.conftest_shared import shared_path
from tests.dialect_harness import DialectHarness, inspect, replay
from tests.golden import check_golden

render = renderer("cockroachdb")

DIALECT = "cockroachdb"
#: A cloud-storage file name for a topic (the spec's examples name no topic in the message).
NAME = "202301020304050000000000000000000-0123456789abcdef-1-2-00000000-{topic}-1.ndjson"
TS1 = "1532377306108205142.0000000000"
TS2 = "1532377312562986715.0000000000"
crdb = DialectHarness(DIALECT, file_origin="m.ndjson")


def conf(name: str) -> Path:
    return shared_path("conformance", "cockroachdb", name)


# ---------------------------------------------------------------- spec examples (goldens)

VEHICLE = (
    '{"city": "seattle", "creation_time": "2019-01-02T03:04:05", "current_location": '
    '"86359 Jeffrey Ranch", "ext": {"color": "yellow"}, "id": '
    '"68ee1f95-3137-48e2-8ce3-34ac2d18c7c8", "owner_id": "570a3d70-a3d7-4c00-8000-000000000011", '
    '"status": "in_use", "type": "scooter"}'
)
RIDE_BEFORE = (
    '{"city": "seattle", "end_address": null, "end_time": null, "id": '
    '"f6c02fe0-a4e0-476d-a3b7-91934d15dce2", "revenue": 25.00, "rider_id": '
    '"14067022-6e9b-427b-bd74-5ef48e93da1f", "start_address": "5 Michael Field", "start_time": '
    '"2023-06-02T15:14:20.790155", "vehicle_city": "seattle", "vehicle_id": '
    '"55555555-5555-4400-8000-000000000005"}'
)
SPEC_CASES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # name: (topic for the file name, content, inspect arguments)
    "office_dogs_json": (
        "office_dogs",
        '[1] {"after": {"id": 1, "name": "Petee"}}\n[1] {"after": null}\n',
        ("--key", "office_dogs=id"),
    ),
    "office_dogs_avro": (
        "office_dogs",
        '{"id":{"long":1}} {"after":{"office_dogs":{"id":{"long":1},"name":{"string":"Petee"}}}}\n'
        '{"id":{"long":1}} {"after":null}\n',
        (),
    ),
    "delete_key_5": ("office_dogs", '[5] {"after": null}\n', ("--key", "office_dogs=id")),
    "webhook_batch": (
        "foo",
        '{"payload": [{"after" : {"a" : 1, "b" : "a"}, "key": [1], "topic": "foo"}, '
        '{"after": {"a": 1, "b": "b"}, "key": [1], "topic": "foo" }], "length":2}\n',
        ("--key", "foo=a"),
    ),
    "vehicles_cloud_storage_wrapped": (
        "vehicles",
        '{"after": ' + VEHICLE + ', "key": ["seattle", "68ee1f95-3137-48e2-8ce3-34ac2d18c7c8"]}\n',
        ("--key", "vehicles=city,id"),
    ),
    "vehicles_kafka_wrapped": (
        "vehicles",
        '{"after": {"city": "washington dc", "creation_time": "2019-01-02T03:04:05", '
        '"current_location": "24315 Elizabeth Mountains", "ext": {"color": "yellow"}, "id": '
        '"dadc1c0b-30f0-4c8b-bd16-046c8612bbea", "owner_id": '
        '"034075b6-5380-4996-a267-5a129781f4d3", "status": "in_use", "type": "scooter"}}\n',
        ("--key", "vehicles=city,id"),
    ),
    "vehicles_kafka_key_in_value": (
        "vehicles",
        '{"after": {"city": "washington dc", "creation_time": "2019-01-02T03:04:05", '
        '"current_location": "46227 Jeremy Haven Suite 92", "ext": {"brand": "Schwinn", '
        '"color": "red"}, "id": "298cc7a0-de6b-4659-ae57-eaa2de9d99c3", "owner_id": '
        '"beda1202-63f7-41d2-aa35-ee3a835679d1", "status": "in_use", "type": "bike"}, "key": '
        '["washington dc", "298cc7a0-de6b-4659-ae57-eaa2de9d99c3"]}\n',
        ("--key", "vehicles=city,id"),
    ),
    "rides_wrapped_diff": (
        "rides",
        '{"after": '
        + RIDE_BEFORE.replace("5 Michael Field", "2 Michael Field")
        + ', "before": '
        + RIDE_BEFORE
        + ', "key": ["seattle", "f6c02fe0-a4e0-476d-a3b7-91934d15dce2"]}\n',
        ("--key", "rides=city,id"),
    ),
    "vehicles_bare_cloud_storage": (
        "vehicles",
        '{"__crdb__": {"key": ["washington dc", "cd48e501-e86d-4019-9923-2fc9a964b264"]}, '
        '"city": "washington dc", "creation_time": "2019-01-02T03:04:05", "current_location": '
        '"87247 Diane Park", "ext": {"brand": "Fuji", "color": "yellow"}, "id": '
        '"cd48e501-e86d-4019-9923-2fc9a964b264", "owner_id": '
        '"a616ce61-ade4-43d2-9aab-0e3b24a9aa9a", "status": "available", "type": "bike"}\n',
        ("--key", "vehicles=city,id"),
    ),
    "cdc_query_topic_in_value": (
        "cdcq",
        '{"__crdb__": {"topic": "vehicles"}, "city": "los angeles", "type": "skateboard"}\n',
        (),
    ),
    "ordering_out_of_order_duplicate": (
        "foo",
        f'[1] {{"__crdb__": {{"updated": "{TS1}"}}, "id": 1, "name": "Carl"}}\n'
        f'[1] {{"__crdb__": {{"updated": "{TS2}"}}, "id": 1, "name": "Petee"}}\n'
        f'[1] {{"__crdb__": {{"updated": "{TS1}"}}, "id": 1, "name": "Carl"}}\n',
        ("--key", "foo=id"),
    ),
    "ordering_updated_and_resolved": (
        "foo",
        '{"__crdb__": {"updated": "1532377312562986715.0000000000"}, "id": 1, "name": "Petee H"}\n'
        '{"__crdb__": {"updated": "1532377306108205142.0000000000"}, "id": 2, "name": "Carl"}\n'
        '{"__crdb__": {"updated": "1532377358501715562.0000000000"}, "id": 3, "name": "Ernie"}\n'
        '{"__crdb__": {"updated": "1532379923319195777.0000000000"}, "id": 4, "name": "Lucky"}\n'
        '{"resolved": "1532379923319195777.0000000000"}\n',
        ("--key", "foo=id"),
    ),
    "schema_change_backfill": (
        "office_dogs",
        '[1] {"id": 1, "name": "Petee H"}\n[2] {"id": 2, "name": "Carl"}\n'
        '[3] {"id": 3, "name": "Ernie"}\n'
        '[1] {"id": 1, "likes_treats": true, "name": "Petee H"}\n'
        '[2] {"id": 2, "likes_treats": true, "name": "Carl"}\n'
        '[3] {"id": 3, "likes_treats": true, "name": "Ernie"}\n',
        ("--key", "office_dogs=id"),
    ),
    "schema_change_backfill_with_old_copy": (
        "office_dogs",
        # the spec's "# Duplicate" annotations are the page's, not the changefeed's
        '[1] {"id": 1, "name": "Petee H"}\n[2] {"id": 2, "name": "Carl"}\n'
        '[3] {"id": 3, "name": "Ernie"}\n'
        '[1] {"id": 1, "name": "Petee H"}\n[2] {"id": 2, "name": "Carl"}\n'
        '[3] {"id": 3, "name": "Ernie"}\n'
        '[1] {"id": 1, "likes_treats": true, "name": "Petee H"}\n'
        '[2] {"id": 2, "likes_treats": true, "name": "Carl"}\n'
        '[3] {"id": 3, "likes_treats": true, "name": "Ernie"}\n',
        ("--key", "office_dogs=id"),
    ),
}


@pytest.mark.services
@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_spec_example_golden(tmp_path: Path, case: str) -> None:
    topic, content, args = SPEC_CASES[case]
    rc, lines, err = inspect(
        tmp_path, NAME.format(topic=topic), content.encode(), "--dialect", DIALECT, *args
    )
    assert rc == 0, err
    check_golden(DIALECT, f"spec_{case}", lines)


def _spec_events(case: str, tmp_path: Path) -> list[dict[str, Any]]:
    topic, content, args = SPEC_CASES[case]
    rc, lines, err = inspect(
        tmp_path, NAME.format(topic=topic), content.encode(), "--dialect", DIALECT, *args
    )
    assert rc == 0, err
    return [orjson.loads(x) for x in lines]


@pytest.mark.services
def test_spec_examples_fields(tmp_path: Path) -> None:
    insert, delete = _spec_events("office_dogs_json", tmp_path)
    assert (insert["operation"], insert["key"], insert["after"]) == (
        "UPSERT",
        {"id": 1},
        {"id": 1, "name": "Petee"},
    )
    assert (delete["operation"], delete["key"], delete["after"]) == ("DELETE", {"id": 1}, None)
    avro_insert, avro_delete = _spec_events("office_dogs_avro", tmp_path)
    assert avro_insert["after"] == {"id": 1, "name": "Petee"} and avro_insert["key"] == {"id": 1}
    assert avro_delete["operation"] == "DELETE" and avro_delete["key"] == {"id": 1}
    [ride] = _spec_events("rides_wrapped_diff", tmp_path)
    assert ride["operation"] == "UPDATE"
    assert ride["after"]["revenue"] == 25.00 and ride["types"]["revenue"] == "decimal(22,2)"
    assert ride["key"] == {"city": "seattle", "id": "f6c02fe0-a4e0-476d-a3b7-91934d15dce2"}
    [bare] = _spec_events("vehicles_bare_cloud_storage", tmp_path)
    assert bare["operation"] == "UPSERT" and bare["key"]["city"] == "washington dc"
    assert bare["after"]["ext"] == '{"brand":"Fuji","color":"yellow"}'
    [q] = _spec_events("cdc_query_topic_in_value", tmp_path)
    assert q["table"] == "vehicles"  # topic_in_value beats the file name
    ordered = _spec_events("ordering_out_of_order_duplicate", tmp_path)
    carl, petee, carl_again = (e["sequence"] for e in ordered)
    assert carl == carl_again < petee  # the out-of-order duplicate is stale
    assert ordered[0]["id"] == ordered[2]["id"]
    *rows, resolved = _spec_events("ordering_updated_and_resolved", tmp_path)
    assert resolved["operation"] == "RESOLVED" and resolved["table"] is None
    assert resolved["position"]["hlc"] == "1532379923319195777.0000000000"
    assert max(r["sequence"] for r in rows) == resolved["sequence"]
    [batch_a, batch_b] = _spec_events("webhook_batch", tmp_path)
    assert batch_a["sequence"] < batch_b["sequence"]  # no HLC: delivery order, item by item
    assert batch_b["metadata"]["sequence_source"] == "delivery"


@pytest.mark.services
@pytest.mark.parametrize(
    ("content", "code"),
    [
        ('["boston", "22222222-2222-4200-8000-000000000002"]\n', "KEY_ONLY_ENVELOPE"),
        (
            '{"key":"[\\"seattle\\", \\"fff726cc-13b3-475f-ad92-a21cafee5d3f\\"]",'
            '"table":"users","value":""}\n',
            "KEY_ONLY_ENVELOPE",
        ),
        (
            '{"city": "washington dc", "creation_time": "2019-01-02T03:04:05", "id": '
            '"d3b37607-1e9f-4e25-b772-efb9374b08e3", "status": "available"}\n',
            "UNKNOWN_ENVELOPE",
        ),
        # a CDC query's bare output without __crdb__: an unmarked row (needs envelope: row)
        ('{"city": "los angeles", "type": "skateboard"}\n', "UNKNOWN_ENVELOPE"),
    ],
    ids=["key_only_kafka", "key_only_sinkless", "row_without_key", "cdc_query_bare"],
)
def test_spec_examples_that_cannot_be_applied(tmp_path: Path, content: str, code: str) -> None:
    rc, lines, err = inspect(tmp_path, "users.ndjson", content.encode(), "--dialect", DIALECT)
    assert rc == 1 and not lines
    assert f"[{code}]" in err


def test_row_envelope_declared_and_row_tombstones() -> None:
    row = orjson.loads(conf("docs_row_envelope_kafka.json").read_bytes())
    keys = {"vehicles": ("city", "id")}
    [ev], _ = crdb.decode(row, table="vehicles", envelope="row", table_keys=keys)
    assert ev["operation"] == "UPSERT" and ev["key"]["city"] == "washington dc"
    record = {"topic": "vehicles", "partition": 0, "offset": 9, "key": '["a", "b"]', "value": None}
    assert crdb.codes(record, table_keys=keys) == ["KEY_ONLY_ENVELOPE"]
    [ev], _ = crdb.decode(record, table_keys=keys, envelope={"vehicles": "row"})
    assert ev["operation"] == "DELETE" and ev["key"] == {"city": "a", "id": "b"}
    assert ev["metadata"]["sequence_source"] == "delivery"


# ---------------------------------------------------------------- conformance files

KEYS = {
    "vehicles": ("city", "id"),
    "users": ("city", "id"),
    "rides": ("city", "id"),
    "foo": ("a",),
    "office_dogs": ("id",),
    "office_plants": ("id",),
    "table": ("id",),
    "t": ("pk",),
}

#: file → (options, events, rejection codes)
CONFORMANCE: dict[str, tuple[dict[str, Any], int, list[str]]] = {
    "crdb_go_webhook_batch_delete.json": ({}, 1, []),
    "crdb_go_webhook_batch_insert.json": ({}, 1, []),
    "crdb_go_webhook_batch_length5.json": ({}, 5, []),
    "crdb_go_webhook_resolved.json": ({}, 1, []),
    "docs_bare_cdcquery_topic_in_value.json": ({}, 1, []),
    "docs_bare_cloudstorage.json": ({"table": "vehicles"}, 1, []),
    "docs_cdcquery_bare_updated.ndjson": ({"table": "users"}, 11, []),
    "docs_cdcquery_custom_shape.json": ({}, 0, ["UNKNOWN_ENVELOPE"]),
    "docs_cdcquery_delete_before_after_null.json": ({"table": "users"}, 1, []),
    "docs_cdcquery_hlc_number_unquoted.ndjson": ({"table": "ages", "envelope": "row"}, 10, []),
    "docs_column_family_sinkless_csv_table_key_value.csv": ({}, 14, []),
    "docs_column_family_topic.json": ({}, 1, []),
    "docs_column_family_webhook_batches.ndjson": ({}, 8, []),
    "docs_column_family_webhook_fragments_malformed.txt": ({}, 0, ["NOT_JSON"] * 2),
    "docs_csv_initial_scan_only.csv": (
        {
            "table": "users",
            "csv_columns": {"users": ["id", "city", "name", "address", "credit_card"]},
        },
        16,
        [],
    ),
    "docs_encode_json_value_null_as_object.ndjson": ({"table": "t2"}, 2, []),
    "docs_enriched_full_fidelity_update.json": ({}, 1, []),
    "docs_enriched_op_c.json": ({"table": "products"}, 1, []),
    "docs_enriched_schema.json": ({"table": "products"}, 1, []),
    "docs_enriched_source.json": ({}, 1, []),
    "docs_enriched_source_schema_tabs.json": ({}, 1, []),
    "docs_enriched_source_updated_tabs.json": ({}, 1, []),
    "docs_kafka_avro_as_json.ndjson": ({}, 4, []),
    "docs_kafka_avro_updated_pretty.txt": ({}, 2, []),
    "docs_kafka_initial_scan_rowid.ndjson": ({"table": "office_dogs"}, 4, []),
    "docs_kafka_updated_with_resolved_stream.ndjson": ({"table": "vehicles"}, 19, []),
    "docs_key_only_kafka_key.json": ({}, 0, ["KEY_ONLY_ENVELOPE"] * 2),
    "docs_key_only_sinkless.json": ({}, 0, ["KEY_ONLY_ENVELOPE"]),
    "docs_ordering_duplicates_annotated.txt": ({"table": "t3"}, 10, ["NOT_JSON"] * 5),
    "docs_row_envelope_kafka.json": ({}, 0, ["UNKNOWN_ENVELOPE"]),
    "docs_schema_change_add_column_backfill.txt": ({"table": "office_dogs"}, 6, []),
    "docs_schema_change_before_tabsep.txt": ({"table": "office_dogs"}, 3, []),
    "docs_schema_change_duplicates_annotated.txt": ({"table": "office_dogs"}, 6, ["NOT_JSON"] * 3),
    "docs_sinkless_delete_key_value.txt": ({"table": "office_dogs"}, 1, []),
    "docs_sql_null_jsonb.ndjson": ({"table": "t2"}, 2, []),
    "docs_webhook_batch_length2.json": ({}, 2, []),
    "docs_wrapped_after_only_tz.ndjson": ({"table": "events"}, 3, ["NOT_JSON"]),
    "docs_wrapped_cloudstorage_key.ndjson": ({"table": "vehicles"}, 1, []),
    "docs_wrapped_diff_insert.json": ({"table": "products"}, 1, []),
    "docs_wrapped_diff_update.json": ({"table": "products"}, 1, []),
    "docs_wrapped_kafka_key_in_value.json": ({"table": "vehicles"}, 1, []),
    "docs_wrapped_kafka_nokey.json": ({"table": "vehicles"}, 1, []),
    "replicator_ndjson_delete_after_null_and_missing.ndjson": ({"table": "t"}, 2, []),
    "replicator_ndjson_delete_before_only.ndjson": ({"table": "t"}, 2, []),
    "replicator_ndjson_key_spaced.ndjson": ({"table": "t"}, 2, []),
    "replicator_ndjson_upsert_bigint_before.ndjson": ({"table": "t"}, 2, []),
    "replicator_resolved_spaces.json": ({}, 1, []),
    "replicator_webhook_delete_before_only.json": ({"table": "t"}, 2, []),
    "replicator_webhook_payload_no_length.json": ({"table": "t"}, 2, []),
}
#: Files that are not changefeed messages (lists, logs): tested on their own below.
OTHER_FILES = {
    "cloudstorage_filenames_invalid.txt",
    "cloudstorage_filenames_valid.txt",
    "crdb_go_encoder_expectations.tsv",
    "docs_pulsar_consumer_output.txt",
    "docs_webhook_server_log.txt",
}


def test_every_conformance_file_has_a_test() -> None:
    folder = shared_path("conformance", "cockroachdb")
    names = {p.name for p in folder.iterdir()}
    assert names == set(CONFORMANCE) | OTHER_FILES


@pytest.mark.parametrize("name", sorted(CONFORMANCE))
@pytest.mark.parametrize("dialect", [DIALECT, "auto"])
def test_conformance_file(name: str, dialect: str) -> None:
    options, n_events, rejected = CONFORMANCE[name]
    if dialect == "auto" and options.get("envelope") == "row":
        # unmarked rows: only a source declared envelope: row reads them, never detection
        n_events, rejected = 0, ["UNKNOWN_ENVELOPE"] * n_events
    extra = {k: v for k, v in options.items()}
    events, rejections = crdb.decode_file(
        conf(name).read_bytes(), name, dialect, table_keys=KEYS, extra=extra
    )
    got = [r.code for r in rejections]
    if dialect == "auto":
        # messages no dialect claims are undetected; every event is this dialect's
        got = [c if c != "DIALECT_UNDETECTED" else "UNKNOWN_ENVELOPE" for c in got]
        if name == "docs_key_only_kafka_key.json":
            got = ["KEY_ONLY_ENVELOPE"] * len(got)
    assert len(events) == n_events, rejections[:3]
    assert sorted(got) == sorted(rejected)
    assert {e["dialect"] for e in events} <= {DIALECT}


def test_conformance_values_are_exact() -> None:
    ev = _one("docs_enriched_full_fidelity_update.json")
    assert (ev["operation"], ev["table"], ev["schema"], ev["database"]) == (
        "UPDATE",
        "products",
        "public",
        "test",
    )
    assert ev["key"] == {"id": "98879aa0-72bc-4b12-a128-325a4753162e"}
    assert ev["after"]["price"] == Decimal("12.50") and ev["types"]["price"] == "decimal(10,2)"
    assert ev["types"]["created_at"] == "timestamp_ntz"
    assert ev["metadata"]["ts_ns"] == 1747243394886231000
    assert sequence.decode(ev["sequence"]) == (1747243394200039000, 0)
    [ev] = crdb.decode_file(conf("docs_enriched_op_c.json").read_bytes(), extra={"table": "p"})[0]
    assert ev["operation"] == "INSERT" and ev["metadata"]["ts_ns"] == 1743792394409866000
    assert ev["after"]["price"] == Decimal("22.30")
    assert ev["key"] is None  # no primary_keys and none configured: the engine says KEY_UNKNOWN
    events, _ = crdb.decode_file(
        conf("replicator_ndjson_upsert_bigint_before.ndjson").read_bytes(),
        table_keys={"t": ("pk",)},
        extra={"table": "t"},
    )
    assert events[0]["after"]["v"] == 9007199254740995  # beyond float precision
    assert events[1]["operation"] == "UPDATE" and events[1]["before"] == {"pk": 99, "v": 33}
    events, _ = crdb.decode_file(
        conf("docs_cdcquery_hlc_number_unquoted.ndjson").read_bytes(),
        extra={"table": "a", "envelope": "row"},
    )
    assert events[0]["after"]["age"] == Decimal("1679504962492204986.0000000000")
    deletes, _ = crdb.decode_file(
        conf("replicator_ndjson_delete_after_null_and_missing.ndjson").read_bytes(),
        table_keys={"t": ("pk",)},
        extra={"table": "t"},
    )
    assert [(e["operation"], e["key"]) for e in deletes] == [
        ("DELETE", {"pk": 42}),
        ("DELETE", {"pk": 99}),
    ]
    nulls, _ = crdb.decode_file(
        conf("docs_encode_json_value_null_as_object.ndjson").read_bytes(),
        table_keys={"t": ("id",)},
        extra={"table": "t"},
    )
    assert [e["after"]["data"] for e in nulls] == [None, "null"]  # SQL NULL vs JSON null
    families, _ = crdb.decode_file(
        conf("docs_column_family_webhook_batches.ndjson").read_bytes(), table_keys=KEYS
    )
    assert families[0]["table"] == "office_dogs" and families[0]["partial"] is True
    assert families[0]["metadata"]["column_family"] == "employee"
    assert families[0]["after"] == {"id": 1, "dog_owner": "Lauren"}
    resolved, _ = crdb.decode_file(conf("replicator_resolved_spaces.json").read_bytes())
    assert resolved[0]["position"]["hlc"] == "20.0000000000"
    stream, _ = crdb.decode_file(
        conf("docs_kafka_updated_with_resolved_stream.ndjson").read_bytes(),
        table_keys=KEYS,
        extra={"table": "vehicles"},
    )
    assert [e["operation"] for e in stream].count("RESOLVED") == 1
    pretty, _ = crdb.decode_file(conf("docs_kafka_avro_updated_pretty.txt").read_bytes())
    assert [e["table"] for e in pretty] == ["users", "users"]
    assert pretty[0]["position"]["hlc"] == "1659643584586630201.0000000000"


def _one(name: str) -> dict[str, Any]:
    [ev], rej = crdb.decode_file(conf(name).read_bytes(), name, table_keys=KEYS)
    assert not rej
    return ev


def test_webhook_server_log_bodies_and_pulsar_messages() -> None:
    """The log and the consumer output wrap real bodies in their own text: the bodies decode."""
    lines = conf("docs_webhook_server_log.txt").read_text().splitlines()
    bodies = "\n".join(line.split(" ", 2)[2] for line in lines if line.strip())
    events, rej = crdb.decode_file(bodies.encode(), table_keys=KEYS)
    assert not rej and len(events) == 3
    assert {e["table"] for e in events} == {"vehicles"}
    assert events[0]["timestamp"] == "2021-08-24T14:00:21.680097Z" or events[0]["timestamp"]
    text = conf("docs_pulsar_consumer_output.txt").read_text()
    contents = [line.split("content:", 1)[1] for line in text.splitlines() if "content:" in line]
    events, rej = crdb.decode_file("\n".join(contents).encode(), table_keys=KEYS)
    assert not rej and len(events) == 4
    assert events[0]["table"] == "rides" and events[0]["after"]["revenue"] == Decimal("53.00")


def test_encoder_expectations() -> None:
    """CockroachDB's own encoder outputs (``<key>-><value>``): every JSON/Avro-as-JSON value
    decodes; key_only and row deletes (an empty value) are what they are."""
    rows = conf("crdb_go_encoder_expectations.tsv").read_text().splitlines()[1:]
    decoded = 0
    for row in rows:
        case, fld, expected = row.split("\t")
        if fld == "csv":  # format=csv: a CSV row, no key
            csv_row = expected.split("->", 1)[1].encode() + b"\n"
            events, rej = crdb.decode_file(
                csv_row, "foo.csv", extra={"table": "foo", "csv_columns": {"foo": ["a", "b"]}}
            )
            assert not rej and events[0]["after"] == {"a": "1", "b": "désolée"}
            continue
        line = (
            expected.split(": ", 1)[1]
            if expected.startswith(("foo:", "soft_deletes:", "movr", "drivers"))
            else expected
        )
        if "->" not in line:
            key, value = "", line
        else:
            key, _, value = line.partition("->")
        data = (key + " " + value).strip() if value else key + "->"
        events, rej = crdb.decode_file(
            data.encode(), table_keys={"foo": ("a",), "drivers": ("id",)}, extra={"table": "foo"}
        )
        if not value and key:
            assert [r.code for r in rej] == ["KEY_ONLY_ENVELOPE"], row
            continue
        assert not rej, (row, rej)
        decoded += len(events)
    assert decoded >= 25


# ---------------------------------------------------------------- file names and topics


def test_cloud_storage_file_names() -> None:
    valid = conf("cloudstorage_filenames_valid.txt").read_text().split()
    parsed = [parse_object_name(n) for n in valid]
    assert all(parsed), [n for n, p in zip(valid, parsed, strict=True) if not p]
    by_name = dict(zip(valid, parsed, strict=True))
    real = by_name[
        "202004022058072107140000000000000-56087568dba1e6b8-1-72-00000000-REAL-42-1.ndjson"
    ]
    assert real and (real["topic"], real["schema_id"]) == ("REAL-42", 1)
    fq = by_name[
        "2020-04-02/202004022058072107140000000000000-56087568dba1e6b8-1-72-00000000-"
        "ignored_db.ignored_schema.REAL-42-1.ndjson"
    ]
    assert fq and split_topic(fq["topic"]) == ("ignored_db", "ignored_schema", "REAL-42", None)
    hourly = by_name[
        "/2020-04-02/20/202004022058072107140000000000000-56087568dba1e6b8-1-72-00000000-"
        "test_table-1.ndjson"
    ]
    assert hourly and (hourly["date"], hourly["hour"]) == ("2020-04-02", "20")
    prefixed = by_name["/test/public/2020-04-04/202004042351304139680000000000000.RESOLVED"]
    assert prefixed and prefixed["resolved"] and prefixed["prefix"] == ["test", "public"]
    assert prefixed["hlc"][1] == 0
    invalid = conf("cloudstorage_filenames_invalid.txt").read_text().split()
    csv_name, bad = invalid
    assert parse_object_name(bad) is None  # leading '-' and .json: not a changefeed file
    # .csv is invalid for replicator (it reads ndjson only) but CockroachDB writes it
    # with format=csv, so cdcflow reads it
    csv_parts = parse_object_name(csv_name)
    assert csv_parts and csv_parts["ext"] == "csv" and csv_parts["topic"] == "mytable"


def test_topics_and_families() -> None:
    assert split_topic("users") == (None, None, "users", None)
    assert split_topic("office_dogs.employee") == (None, None, "office_dogs", "employee")
    assert split_topic("movr.public.drivers") == ("movr", "public", "drivers", None)


def test_table_from_the_file_name_and_resolved_files() -> None:
    name = (
        "2020-04-02/202004022058072107140000000000000-56087568dba1e6b8-1-72-00000000-users-3.ndjson"
    )
    [ev], _ = crdb.decode_file(
        b'{"after": {"id": 1}, "key": [1]}\n', name, table_keys={"users": ("id",)}
    )
    assert ev["table"] == "users" and ev["metadata"]["schema_id"] == 3
    [res], _ = crdb.decode_file(b"", "2020-04-04/202004042351304139680000000000000.RESOLVED")
    assert res["operation"] == "RESOLVED" and res["position"]["hlc"].startswith("1586044290413968")
    [res], _ = crdb.decode_file(
        b'{"resolved":"1586044290413968000.0000000000"}',
        "2020-04-04/202004042351304139680000000000000.RESOLVED",
    )
    assert res["metadata"]["resolved_file"] is True


# ---------------------------------------------------------------- ordering


def test_hlc_order_is_numeric_never_text_or_float() -> None:
    def seq(hlc: Any) -> str:
        [ev], _ = crdb.decode(
            b'{"after": {"id": 1}, "key": [1], "updated": ' + orjson.dumps(hlc) + b"}",
            table="t",
            table_keys={"t": ("id",)},
        )
        return str(ev["sequence"])

    assert seq("9.0000000000") < seq("10.0000000000")  # as text "9" > "10"
    assert seq("5.0000000002") < seq("5.0000000010")
    assert seq("1.0") < seq("1.0000000001")
    big_a = b'{"after": {"id": 1}, "key": [1], "updated": 1679504962492204986.0000000000}'
    big_b = b'{"after": {"id": 1}, "key": [1], "updated": 1679504962492204987.0000000000}'
    [a], _ = crdb.decode(big_a, table="t", table_keys={"t": ("id",)})
    [b], _ = crdb.decode(big_b, table="t", table_keys={"t": ("id",)})
    assert a["sequence"] < b["sequence"]  # differ beyond float precision
    assert sequence.decode(a["sequence"]) == (1679504962492204986, 0)


def test_mvcc_timestamp_orders_without_updated_and_updated_wins() -> None:
    [ev], _ = crdb.decode(
        {"after": {"id": 1}, "key": [1], "mvcc_timestamp": "7.0000000001"},
        table="t",
        table_keys={"t": ("id",)},
    )
    assert ev["metadata"]["sequence_source"] == "mvcc_timestamp"
    assert sequence.decode(ev["sequence"]) == (7, 1)
    [ev], _ = crdb.decode(
        {"after": {"id": 1}, "key": [1], "updated": "9.0", "mvcc_timestamp": "7.0"},
        table="t",
        table_keys={"t": ("id",)},
    )
    assert sequence.decode(ev["sequence"]) == (9, 0)


def test_exact_numbers_and_decimal_inference() -> None:
    doc = loads_exact(b'{"a": 25.00, "b": 18446744073709551616, "c": 1}')
    assert doc == {"a": Decimal("25.00"), "b": 18446744073709551616, "c": 1}
    [ev], _ = crdb.decode(
        b'{"after": {"id": 1, "price": 25.00, "big": 123456789012345678901234.5}, "key": [1]}',
        table="t",
        table_keys={"t": ("id",)},
    )
    assert ev["after"]["price"] == Decimal("25.00")
    assert ev["types"] == {"id": "bigint", "price": "decimal(22,2)", "big": "decimal(25,1)"}
    [ev], _ = crdb.decode(
        b'{"after": {"id": 1, "price": 25.00, "at": "2025-05-09T21:20:29.2Z", "b": "\\\\x0102"}, '
        b'"key": [1]}',
        table="t",
        table_keys={"t": ("id",)},
        column_types={"t": {"price": "DECIMAL(10,2)", "at": "TIMESTAMPTZ", "b": "BYTES"}},
    )
    assert ev["types"]["price"] == "decimal(10,2)" and ev["types"]["at"] == "timestamp"
    assert ev["after"]["b"] == b"\x01\x02"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("doc", "options", "code"),
    [
        ({"payload": [{"after": {"id": 1}, "key": [1]}], "length": 2}, {}, "LENGTH_MISMATCH"),
        ({"payload": [], "length": "1"}, {}, "LENGTH_MISMATCH"),
        ({"after": {"id": 1}, "key": [1], "updated": "yesterday"}, {}, "BAD_HLC"),
        ({"after": {"id": 1}, "key": [1], "updated": "1.00000000001"}, {}, "BAD_HLC"),
        ({"resolved": "soon"}, {}, "BAD_HLC"),
        ({"after": {"id": 1}, "key": [1, 2]}, {}, "KEY_LENGTH_MISMATCH"),
        ({"after": [1]}, {}, "BAD_ROW"),
        ({"after": {"id": 1}, "op": "x", "source": {"origin": "cockroachdb"}}, {}, "UNKNOWN_OP"),
        ({"city": "x"}, {}, "UNKNOWN_ENVELOPE"),
        ({"after": {"id": 1}, "key": [1]}, {"table": None}, "MISSING_TABLE"),
        (
            {"topic": "t", "partition": 0, "offset": 1, "key": "[1]", "value_base64": "AAAAAAc="},
            {},
            "UNKNOWN_SCHEMA_ID",
        ),
        (
            {"after": {"id": "x"}, "key": ["x"]},
            {"column_types": {"t": {"id": "INT8"}}},
            "BAD_VALUE",
        ),
    ],
)
def test_bad_input_codes(doc: Any, options: dict[str, Any], code: str) -> None:
    extra = {"table": options.pop("table", "t")}
    if extra["table"] is None:
        extra = {}
    options.setdefault("table_keys", {"t": ("id",)})
    assert crdb.codes(doc, extra=extra, **options) == [code]


def test_key_values_without_names_travel_in_metadata() -> None:
    """A delete or a column-family message whose key names nothing gives is decoded, not
    rejected: ``key`` null, the values in primary-key order as wire strings in
    ``metadata.key_values`` (the engine names them)."""
    events, rej = crdb.decode(
        {"after": None, "key": [1, "b"], "updated": TS1}, extra={"table": "t"}
    )
    assert not rej
    (ev,) = events
    assert (ev["operation"], ev["key"], ev["before"], ev["after"]) == ("DELETE", None, None, None)
    assert ev["metadata"]["key_values"] == ["1", "b"]
    events, rej = crdb.decode(
        {"after": {"x": 1.50}, "key": [2.5], "topic": "t.fam", "updated": TS1}
    )
    assert not rej
    (ev,) = events
    assert ev["partial"] and ev["key"] is None and ev["after"] == {"x": Decimal("1.50")}
    assert ev["metadata"]["key_values"] == ["2.5"] and ev["metadata"]["column_family"] == "fam"


@pytest.mark.services
def test_inspect_prints_a_delete_without_key_names_and_warns(tmp_path: Path) -> None:
    """A cloud-storage file whose delete names its key nowhere: inspect exits 0, prints both
    events and warns once on stderr, naming --key."""
    lines = [
        {"after": {"id": 1, "v": "a"}, "key": [1], "updated": TS1},
        {"after": None, "key": [1], "updated": TS2},
    ]
    data = b"".join(orjson.dumps(x) + b"\n" for x in lines)
    rc, out, err = inspect(tmp_path, NAME.format(topic="pets"), data)
    assert rc == 0, err
    events = [orjson.loads(x) for x in out]
    assert [e["operation"] for e in events] == ["UPSERT", "DELETE"]
    assert [e["metadata"]["key_values"] for e in events] == [["1"], ["1"]]
    assert err.count("warning:") == 1 and "--key pets=" in err and "'pets'" in err


def test_bad_webhook_item_is_rejected_alone() -> None:
    body = {"payload": [{"after": {"id": 1}, "key": [1]}, {"after": 5}], "length": 2}
    events, rej = crdb.decode(body, extra={"table": "t"}, table_keys={"t": ("id",)})
    assert len(events) == 1 and [(r.code, r.item) for r in rej] == [("BAD_ROW", 1)]


def test_csv_rows_with_the_wrong_column_count() -> None:
    events, rej = crdb.decode_file(
        b"1,a\n2,b,c\n",
        "t.csv",
        extra={"table": "t", "csv_columns": {"t": ["id", "v"]}},
        table_keys={"t": ("id",)},
    )
    assert [e["operation"] for e in events] == ["SNAPSHOT"] and events[0]["key"] == {"id": "1"}
    assert [r.code for r in rej] == ["CSV_COLUMN_COUNT"]
    _, rej = crdb.decode_file(b"1,a\n", "t.csv", extra={"table": "t"})
    assert [r.code for r in rej] == ["CSV_COLUMNS_UNKNOWN"]


# ---------------------------------------------------------------- Avro

ROW_SCHEMA = {
    "type": "record",
    "name": "office_dogs",
    "fields": [
        {"name": "id", "type": ["null", "long"]},
        {"name": "name", "type": ["null", "string"]},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
                "string",
            ],
        },
        {"name": "flags", "type": ["null", {"type": "array", "items": "long"}], "doc": "BIT(70)"},
    ],
}
ENVELOPE_SCHEMA = {
    "type": "record",
    "name": "office_dogs_envelope",
    "fields": [
        {"name": "after", "type": ["null", ROW_SCHEMA]},
        {"name": "updated", "type": ["null", "string"]},
    ],
}
AVRO_ROW = {
    "id": 1,
    "name": "Petee",
    "price": Decimal("25.00"),
    # 64-bit words as Avro (signed) longs: 70 bits, the last 6 bits used
    "flags": [6, -1, (0b111111 << 58) - 2**64],
}


def test_bits_from_avro_as_the_spec_describes() -> None:
    words = [8, 18293058736425533439, 18446744073709551615, 13690942867206307840]
    bits = bits_from_avro(words)
    assert len(bits) == 136 and bits.endswith("10111110")
    assert bits.startswith(format(18293058736425533439, "064b") + "1" * 64)
    assert bits_from_avro([1, 0, 9223372036854775808]) == "0" * 64 + "1"


def test_avro_object_container_file() -> None:
    buf = io.BytesIO()
    fastavro.writer(
        buf,
        fastavro.parse_schema(ENVELOPE_SCHEMA),
        [{"after": AVRO_ROW, "updated": TS1}, {"after": None, "updated": TS2}],
    )
    events, rej = crdb.decode_file(
        buf.getvalue(),
        "2023-01-02/" + NAME.format(topic="office_dogs").replace(".ndjson", ".avro"),
        table_keys={"office_dogs": ("id",)},
    )
    # the delete names no key (no key field, no before image): it cannot be applied
    assert [r.code for r in rej] == ["DELETE_WITHOUT_KEY"]
    [insert] = events
    assert insert["after"]["price"] == Decimal("25.00")
    assert insert["types"]["price"] == "decimal(10,2)" and insert["after"]["flags"].endswith(
        "111111"
    )
    assert len(insert["after"]["flags"]) == 70
    corrupt = buf.getvalue()[:-7]
    events, rej = crdb.decode_file(corrupt, "c.avro", extra={"table": "office_dogs"})
    assert [r.code for r in rej][-1] == "CORRUPT_AVRO"


def test_confluent_framed_messages(tmp_path: Path) -> None:
    (tmp_path / "7.avsc").write_bytes(orjson.dumps(ENVELOPE_SCHEMA))
    (tmp_path / "8.json").write_bytes(
        orjson.dumps({"type": "record", "name": "k", "fields": [{"name": "id", "type": "long"}]})
    )
    body = io.BytesIO()
    fastavro.schemaless_writer(
        body, fastavro.parse_schema(ENVELOPE_SCHEMA), {"after": AVRO_ROW, "updated": TS1}
    )
    key = io.BytesIO()
    fastavro.schemaless_writer(
        key, fastavro.parse_schema(orjson.loads((tmp_path / "8.json").read_bytes())), {"id": 1}
    )
    record = {
        "topic": "office_dogs",
        "partition": 3,
        "offset": 11,
        "key_base64": base64.b64encode(b"\x00" + struct.pack(">I", 8) + key.getvalue()).decode(),
        "value_base64": base64.b64encode(b"\x00" + struct.pack(">I", 7) + body.getvalue()).decode(),
    }
    [ev], rej = crdb.decode(record, extra={"schema_dir": str(tmp_path)})
    assert not rej
    assert ev["key"] == {"id": 1} and ev["after"]["name"] == "Petee"
    assert ev["metadata"]["schema_id"] == 7 and ev["position"]["partition"] == 3
    broken = {**record, "value_base64": base64.b64encode(b"\x00\x00\x00\x00\x07\xff").decode()}
    assert crdb.codes(broken, extra={"schema_dir": str(tmp_path)}) == ["CORRUPT_AVRO"]
    unknown = {**record, "value_base64": base64.b64encode(b"\x00\x00\x00\x00\x09\x00").decode()}
    assert crdb.codes(unknown, extra={"schema_dir": str(tmp_path)}) == ["UNKNOWN_SCHEMA_ID"]
    d = Decoder("auto", DialectOptions(extra={"schema_dir": str(tmp_path)}))
    out = d.decode(RawMessage(orjson.dumps(record), origin="k.jsonl"))
    assert [e["dialect"] for e in out.events] == [DIALECT]


def test_other_dialects_avro_files_are_handed_over() -> None:
    from cdcflow.dialects.sqlserver_ces.render import avro_cloudevents, render_change

    w = generate(3, transactions=5, features=frozenset({"insert"}))
    data = avro_cloudevents([render_change(w, ch) for ch in w.changes()])
    outs = list(Decoder("auto").decode_file(data, "ces.avro"))
    assert outs and all(not o.rejections for o in outs)
    assert {e["dialect"] for o in outs for e in o.events} == {"sqlserver_ces"}
    # with the dialect fixed to sqlserver_ces or datastream, framing still reaches it
    for dialect in ("sqlserver_ces", "datastream"):
        framed = list(Decoder(dialect).decode_file(data, "ces.avro"))
        assert len(framed) == len(outs)


# ---------------------------------------------------------------- detection


def test_auto_detection_claims_only_cockroachdb_messages() -> None:
    d = Decoder("auto")
    for doc in (
        {"after": {"id": 1}, "key": [1], "topic": "t"},
        {"payload": [{"after": {"id": 1}, "key": [1], "topic": "t"}], "length": 1},
        {"__crdb__": {"updated": TS1, "topic": "t"}, "id": 1},
        {"resolved": TS1},
        {"topic": "t", "partition": 0, "offset": 1, "key": "[1]", "value": '{"after": null}'},
    ):
        out = d.decode(RawMessage(orjson.dumps(doc), origin="a.json"))
        assert {e["dialect"] for e in out.events} | {r.dialect for r in out.rejections} == {
            DIALECT
        }, doc
    unified = {"operation": "INSERT", "table": "t", "after": {"id": 1}, "position": {"lsn": "0/1"}}
    out = d.decode(RawMessage(orjson.dumps(unified), origin="u.json"))
    assert [e["dialect"] for e in out.events] == ["savegress"]
    kafka_unified = {
        "key": "t:1",
        "value": orjson.dumps(unified).decode(),
        "headers": {"savegress-operation": "INSERT"},
    }
    out = d.decode(RawMessage(orjson.dumps(kafka_unified), origin="u.json"))
    assert [e["dialect"] for e in out.events] == ["savegress"]
    ces = shared_path("conformance", "sqlserver_ces", "msdocs_ga_insert_employees.json")
    out = d.decode(RawMessage(ces.read_bytes(), origin="c.json"))
    assert [e["dialect"] for e in out.events] == ["sqlserver_ces"]


# ---------------------------------------------------------------- renderer vs oracle


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_rendered_faults_replay_to_the_oracle(tmp_path: Path, seed: int) -> None:
    from cdcflow.testing.compare import normalize_rows

    w = generate(seed, tables=3, transactions=60, features=renderer_features(DIALECT))
    n = len(w.transactions)
    events: list[dict[str, Any]] = []
    for i, part in enumerate((slice(0, n // 2), slice(max(0, n // 2 - 5), n))):
        res = render(w, tmp_path, seed=seed + i, transactions=part)
        evs, rej = crdb.decode_files(res.files, decoder_options=res.options)
        assert not rej, rej[:2]
        events.extend(evs)
    assert "RESOLVED" in {e["operation"] for e in events}
    expected = oracle.apply(w)
    actual = replay(events, w.tables)
    for name, d in w.tables.items():
        cols = list(d.columns)
        assert normalize_rows(actual[name].values(), cols) == normalize_rows(
            expected[name].values(), cols
        ), f"{name} ({table_feed(w, name)})"


def test_renderer_shapes(tmp_path: Path) -> None:
    seen: set[str] = set()
    for seed in range(4):
        w = generate(seed, tables=3, transactions=40, features=renderer_features(DIALECT))
        res = render(w, tmp_path / str(seed), seed=seed)
        for f in res.files:
            seen.add(f.name.split("-")[0] if not f.name[0].isdigit() else f.suffix)
            if f.name[0].isdigit():
                assert parse_object_name(str(f)) is not None, f
        assert not list((tmp_path / str(seed)).rglob("_*"))
    assert {"webhook", "kafka", "enriched", ".ndjson", ".RESOLVED"} <= seen


# ---------------------------------------------------------------- pipeline scenarios


def _crdb_config(tmp_path: Path, name: str, keys: dict[str, list[str]]) -> Any:
    from tests.scenario import config

    cfg = config(tmp_path, name, keys=keys)
    return cfg.model_copy(
        update={"sources": [cfg.sources[0].model_copy(update={"dialect": DIALECT})]}
    )


def _land(tmp_path: Path, topic: str, content: str, n: int = 0) -> None:
    folder = tmp_path / "landing" / "2023-01-02"
    folder.mkdir(parents=True, exist_ok=True)
    name = NAME.format(topic=topic).replace("-00000000-", f"-{n:08d}-")
    (folder / f"_tmp{n}").write_text(content)
    (folder / f"_tmp{n}").rename(folder / name)


@pytest.mark.spark
def test_ordering_example_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """Carl, then Petee, then the out-of-order duplicate of Carl: the replica says Petee, in
    one run and when the duplicate arrives in a later run."""
    from tests.scenario import rows, run

    cfg = _crdb_config(tmp_path, "crdb_order", {"foo": ["id"]})
    _, content, _ = SPEC_CASES["ordering_out_of_order_duplicate"]
    first, second, dup = content.splitlines(keepends=True)
    _land(tmp_path, "foo", first + second + dup, 0)
    run(spark, cfg)
    assert rows(spark, cfg, "foo", "id, name") == [{"id": 1, "name": "Petee"}]
    _land(tmp_path, "foo", dup, 1)
    run(spark, cfg)
    assert rows(spark, cfg, "foo", "id, name") == [{"id": 1, "name": "Petee"}]


@pytest.mark.spark
def test_schema_change_backfill_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """The backfill re-emits the table with the new column (after the old-schema copy): the
    replica is exact with likes_treats added, and a replay changes nothing."""
    from tests.scenario import rows, run

    cfg = _crdb_config(tmp_path, "crdb_backfill", {"office_dogs": ["id"]})
    _, content, _ = SPEC_CASES["schema_change_backfill_with_old_copy"]
    _land(tmp_path, "office_dogs", content, 0)
    reports = run(spark, cfg)
    assert sum(r.dead_lettered for r in reports) == 0
    expected = [
        {"id": 1, "name": "Petee H", "likes_treats": True},
        {"id": 2, "name": "Carl", "likes_treats": True},
        {"id": 3, "name": "Ernie", "likes_treats": True},
    ]
    assert rows(spark, cfg, "office_dogs", "id, name, likes_treats") == expected
