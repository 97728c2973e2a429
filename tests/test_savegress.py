"""The savegress (unified format) dialect: spec examples, real samples, bad input."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest_shared import shared_path
from tests.dialect_harness import DialectHarness, inspect
from tests.golden import check_golden

SPEC = "unified-cdc-event-format.txt"
sg = DialectHarness("savegress")


def spec_blocks() -> list[str]:
    """The fenced ```json blocks of the unified format spec, in order."""
    text = shared_path("specs", SPEC).read_text()
    return re.findall(r"```json\n(.*?)```", text, re.DOTALL)


def _complete(fragment: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**fragment, **extra}


def spec_cases() -> dict[str, bytes]:
    blocks = spec_blocks()
    full = orjson.loads(blocks[0])
    insert, update, delete, ddl = (orjson.loads(b) for b in blocks[1:5])
    ts = "2025-01-15T10:30:00Z"
    markers = [
        {"operation": "BEGIN", "transaction_id": "tx-100", "timestamp": ts},
        {
            "operation": "INSERT",
            "table": "orders",
            "transaction_id": "tx-100",
            "timestamp": ts,
            "after": {"id": 7, "total": "19.99"},
        },
        {
            "operation": "UPDATE",
            "table": "inventory",
            "transaction_id": "tx-100",
            "timestamp": ts,
            "before": {"id": 3, "stock": 10},
            "after": {"id": 3, "stock": 9},
        },
        {"operation": "COMMIT", "transaction_id": "tx-100", "timestamp": ts},
    ]
    batch_shape = orjson.loads(re.sub(r",\s*\.\.\.\s*}", "}", blocks[-1]))
    batch_events = [
        _complete(batch_shape["events"][0], table="users", after={"id": 1, "name": "a"}),
        _complete(
            batch_shape["events"][1],
            table="users",
            before={"id": 1, "name": "a"},
            after={"id": 1, "name": "b"},
        ),
        _complete(batch_shape["events"][2], table="users", before={"id": 1, "name": "b"}),
    ]
    batch = {**batch_shape, "batch_size": len(batch_events), "events": batch_events}
    kafka = {
        "key": "users:1",
        "value": full,
        "headers": {
            "savegress-event-id": "evt-abc123",
            "savegress-operation": "INSERT",
            "savegress-table": "users",
            "savegress-timestamp": "1705312200000",
        },
    }
    dumps = orjson.dumps
    return {
        "full_event": dumps(full),
        "insert_fragment": dumps(_complete(insert, table="users")),
        "update_fragment": dumps(_complete(update, table="users")),
        "delete_fragment": dumps(_complete(delete, table="users")),
        "ddl_fragment": dumps(ddl),
        "transaction_markers": b"\n".join(dumps(m) for m in markers),
        "batch": dumps(batch),
        "kafka_form": dumps(kafka),
    }


@pytest.mark.services
@pytest.mark.parametrize(
    "case",
    [
        "full_event",
        "insert_fragment",
        "update_fragment",
        "delete_fragment",
        "ddl_fragment",
        "transaction_markers",
        "batch",
        "kafka_form",
    ],
)
def test_spec_examples_golden(tmp_path: Path, case: str) -> None:
    data = spec_cases()[case]
    rc, lines, err = inspect(
        tmp_path,
        f"{case}.json",
        data,
        "--dialect",
        "savegress",
        "--key",
        "users=id",
        "--key",
        "orders=id",
        "--key",
        "inventory=id",
        "--type",
        "users.created_at=timestamptz",
        "--type",
        "orders.total=numeric(10,2)",
    )
    assert rc == 0, err
    check_golden("savegress", f"spec_{case}", lines)


@pytest.mark.services
def test_spec_full_event_typed_fields(tmp_path: Path) -> None:
    rc, lines, err = inspect(tmp_path, "e.json", spec_cases()["full_event"], "--key", "users=id")
    assert rc == 0, err
    ev = orjson.loads(lines[0])
    assert ev["operation"] == "UPDATE"
    assert ev["source"] == "postgres"
    assert ev["database"] == "production"
    assert ev["timestamp"] == "2025-01-15T10:30:00.123456Z"
    assert ev["key"] == {"id": 1}
    assert ev["types"]["id"] == "bigint"
    # position 0/1234ABCD, sequence 42 → (LSN, sequence)
    assert ev["sequence"] == "p09305441741!p0242!"


@pytest.mark.services
def test_spec_insert_fragment_declared_types(tmp_path: Path) -> None:
    rc, lines, _ = inspect(
        tmp_path,
        "i.json",
        spec_cases()["insert_fragment"],
        "--type",
        "users.created_at=timestamptz",
    )
    ev = orjson.loads(lines[0])
    assert ev["after"]["created_at"] == "2025-01-15T10:30:00Z"
    assert ev["types"]["created_at"] == "timestamp"


@pytest.mark.services
def test_spec_ddl_gives_added_column_type(tmp_path: Path) -> None:
    rc, lines, _ = inspect(tmp_path, "d.json", spec_cases()["ddl_fragment"])
    ev = orjson.loads(lines[0])
    assert ev["operation"] == "DDL"
    assert ev["types"] == {"phone": "string"}
    assert ev["ddl_type"] == "ALTER_TABLE"


@pytest.mark.services
def test_protobuf_golden(tmp_path: Path) -> None:
    from cdcflow.dialects.savegress.proto import event_to_proto
    from cdcflow.transports.protobuf import write_delimited

    full = orjson.loads(spec_blocks()[0])
    data = write_delimited([event_to_proto(full), event_to_proto({**full, "id": "evt-2"})])
    rc, lines, err = inspect(tmp_path, "events.pb", data, "--key", "users=id")
    assert rc == 0, err
    check_golden("savegress", "spec_protobuf", lines)
    assert [orjson.loads(x)["id"] for x in lines] == ["evt-abc123", "evt-2"]


# ---------------------------------------------------------------- conformance samples

CONFORMANCE_EXPECT: dict[str, str | None] = {
    # file → expected rejection code, or None when it decodes
    "savegress_event_full_update.json": None,
    "savegress_pipeline_insert.json": None,
    "savegress_pipeline_update_no_timestamp.json": None,
    # row images without the key column: decoded; a keyed replica dead-letters them KEY_MISSING
    "savegress_intro_update_partial_rows.json": None,
    "savegress_datawatch_ingest_type_field.json": None,
    "savegress_ddl_alter_table.json": None,
    # documentation fragments without a table: rejected, they name no table to apply to
    "savegress_insert_before_null.json": "MISSING_TABLE",
    "savegress_update_fragment.json": "MISSING_TABLE",
    "savegress_delete_after_null.json": "MISSING_TABLE",
    # position fragments are not events
    "savegress_position_mysql.json": "MISSING_OPERATION",
    "savegress_position_mongodb.json": "MISSING_OPERATION",
    # documented examples with '...' placeholders: not JSON
    "savegress_batch_envelope_invalid.txt": "NOT_JSON",
    "savegress_transaction_markers_invalid.txt": "NOT_JSON",
}


def test_conformance_list_is_complete() -> None:
    folder = shared_path("conformance", "other")
    present = {p.name for p in folder.glob("savegress_*")}
    assert present == set(CONFORMANCE_EXPECT)


@pytest.mark.services
@pytest.mark.parametrize("name", sorted(CONFORMANCE_EXPECT))
def test_conformance_sample(tmp_path: Path, name: str) -> None:
    src = shared_path("conformance", "other", name)
    rc, lines, err = inspect(
        tmp_path,
        name,
        src.read_bytes(),
        "--dialect",
        "savegress",
        "--key",
        "users=id",
        "--key",
        "orders=id",
    )
    code = CONFORMANCE_EXPECT[name]
    if code is None:
        assert rc == 0, err
        check_golden("savegress", "conformance_" + name.rsplit(".", 1)[0], lines)
    else:
        assert rc == 1
        assert lines == []
        assert f"[{code}]" in err, err
        assert name in err


@pytest.mark.services
def test_datawatch_type_field_variant(tmp_path: Path) -> None:
    src = shared_path("conformance", "other", "savegress_datawatch_ingest_type_field.json")
    rc, lines, _ = inspect(tmp_path, "d.json", src.read_bytes(), "--key", "orders=id")
    ev = orjson.loads(lines[0])
    assert ev["operation"] == "INSERT"
    assert ev["metadata"]["operation_field"] == "type"
    assert ev["key"] == {"id": 1001}
    assert ev["after"]["amount"] == 99.99


def test_mysql_and_mongodb_positions_order() -> None:
    def seq(position: dict[str, Any]) -> str:
        doc = {"operation": "INSERT", "table": "t", "after": {"id": 1}, "position": position}
        events, rejections = sg.decode(doc)
        assert not rejections, rejections
        return events[0]["sequence"]

    assert seq({"file": "mysql-bin.000002", "position": 4}) > seq(
        {"file": "mysql-bin.000001", "position": 99999}
    )
    assert seq({"cluster_time": {"t": 10, "i": 2}}) > seq({"cluster_time": {"t": 10, "i": 1}})
    assert seq({"lsn": "0/1000", "sequence": 1}) > seq({"lsn": "0/A", "sequence": 5})


# ---------------------------------------------------------------- bad input

BAD_INPUT = [
    ("not_json", b"hello there", "NOT_JSON", "not JSON"),
    (
        "truncated",
        b'{"operation": "INSERT", "table": "t", "after": {"id": 1',
        "TRUNCATED_JSON",
        "truncated",
    ),
    (
        "bad_utf8",
        b'{"operation": "INSERT", "table": "t", "after": {"n": "\xff\xfe"}}',
        "BAD_UTF8",
        "UTF-8",
    ),
    (
        "unknown_op",
        b'{"operation": "MERGE", "table": "t", "after": {"id": 1}}',
        "UNKNOWN_OPERATION",
        "'MERGE'",
    ),
    ("no_table", b'{"operation": "INSERT", "after": {"id": 1}}', "MISSING_TABLE", "no 'table'"),
    (
        "delete_no_key",
        b'{"operation": "DELETE", "table": "t", "before": null}',
        "DELETE_WITHOUT_KEY",
        "neither a key nor a before image",
    ),
    (
        "batch_size",
        b'{"batch_id": "b1", "batch_size": 3, "events": [{"operation": "INSERT", '
        b'"table": "t", "after": {"id": 1}}]}',
        "BATCH_SIZE_MISMATCH",
        "batch_size=3",
    ),
    ("no_operation", b'{"table": "t", "after": {"id": 1}}', "MISSING_OPERATION", "operation"),
    (
        "bad_position",
        b'{"operation": "INSERT", "table": "t", "after": {"id": 1}, "position": {"lsn": "zz"}}',
        "BAD_POSITION",
        "Postgres LSN",
    ),
]


@pytest.mark.parametrize(
    ("name", "data", "code", "words"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT]
)
def test_bad_input_codes(name: str, data: bytes, code: str, words: str) -> None:
    events, rejections = sg.decode(data, "f.json")
    assert events == []
    assert [r.code for r in rejections] == [code]
    assert words in rejections[0].message
    assert rejections[0].raw == data


@pytest.mark.services
def test_corrupt_protobuf(tmp_path: Path) -> None:
    rc, lines, err = inspect(tmp_path, "bad.pb", b"\x05\x0a\x03ab", "--dialect", "savegress")
    assert rc == 1
    assert "[CORRUPT_PROTOBUF]" in err


def test_bad_item_in_batch_keeps_the_rest() -> None:
    doc = {
        "batch_id": "b",
        "batch_size": 2,
        "events": [
            {"operation": "INSERT", "table": "t", "after": {"id": 1}},
            {"operation": "NOPE", "table": "t", "after": {"id": 2}},
        ],
    }
    events, rejections = sg.decode(doc)
    assert len(events) == 1
    assert rejections[0].code == "UNKNOWN_OPERATION"
    assert rejections[0].item == 1


@pytest.mark.services
def test_inspect_reports_and_continues(tmp_path: Path) -> None:
    data = (
        b'{"operation":"INSERT","table":"t","after":{"id":1}}\n{"broken\n'
        b'{"operation":"DELETE","table":"t","before":{"id":1}}\n'
    )
    rc, lines, err = inspect(tmp_path, "mixed.jsonl", data)
    assert rc == 1
    assert len(lines) == 2
    assert "[TRUNCATED_JSON]" in err and "mixed.jsonl:2" in err


def test_declared_type_mismatch_is_bad_value() -> None:
    doc = {"operation": "INSERT", "table": "t", "after": {"id": 1, "amount": "abc"}}
    _, rejections = sg.decode(
        doc, table_keys={"t": ("id",)}, column_types={"t": {"amount": "numeric(5,2)"}}
    )
    assert rejections[0].code == "BAD_VALUE"
    assert "amount" in rejections[0].message
