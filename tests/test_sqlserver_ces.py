"""The sqlserver_ces dialect: the spec's examples, real messages, ordering, bad input."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.decode.decoder import Decoder
from cdcflow.transports.message import RawMessage
from tests.conftest_shared import shared_path
from tests.dialect_harness import DialectHarness, inspect
from tests.golden import check_golden

SPEC = "sqlserver-2025-ces-cloudevents.txt"
CONFORMANCE = "sqlserver_ces"
ces = DialectHarness("sqlserver_ces", origin="t.json")


def spec_examples() -> dict[str, bytes]:
    """The spec's three JSON message examples (insert, updated, delete), as written."""
    text = shared_path("specs", SPEC).read_text()
    found = re.findall(r"JSON message example\W+(\w+)\n(\{\n.*?\n\})\n", text, re.DOTALL)
    assert [name for name, _ in found] == ["insert", "updated", "delete"]
    return {name: body.encode() for name, body in found}


# ---------------------------------------------------------------- spec examples


@pytest.mark.services
@pytest.mark.parametrize("name", ["insert", "updated", "delete"])
def test_spec_example_golden(tmp_path: Path, name: str) -> None:
    rc, lines, err = inspect(tmp_path, f"{name}.json", spec_examples()[name])
    assert rc == 0, err
    check_golden("sqlserver_ces", f"spec_{name}", lines)
    [ev] = [orjson.loads(x) for x in lines]
    assert ev["dialect"] == "sqlserver_ces" and ev["source"] == "sqlserver"
    assert (ev["database"], ev["schema"], ev["table"]) == ("db1", "dbo", "Purchases")
    assert ev["key"] == {"purchase_id": 105}
    row = ev["after"] or ev["before"]
    assert row["purchase_id"] == 105 and row["quantity"] in (1, 2)
    assert row["purchase_date"] == "2025-03-14T16:45:01"
    assert ev["types"]["purchase_id"] == "int"
    assert ev["types"]["purchase_date"] == "timestamp_ntz"
    assert ev["types"]["customer_name"] == "string"
    # no transaction block: order from the LSN and sequence in logicalid
    assert ev["position"]["logicalid_sequence"] == 1


def test_spec_examples_are_ordered_by_their_lsn() -> None:
    ex = spec_examples()
    seqs = [ces.decode(ex[n])[0][0]["sequence"] for n in ("insert", "updated", "delete")]
    assert seqs == sorted(seqs)


def test_spec_example_images() -> None:
    ex = spec_examples()
    [ins], _ = ces.decode(ex["insert"])
    [upd], _ = ces.decode(ex["updated"])
    [dele], _ = ces.decode(ex["delete"])
    assert (ins["operation"], ins["before"]) == ("INSERT", None)
    # the spec's update carries old "{}": an update without a before image
    assert (upd["operation"], upd["before"], upd["partial"]) == ("UPDATE", None, False)
    assert upd["after"]["product_name"] == "Game 2066"
    assert (dele["operation"], dele["after"]) == ("DELETE", None)
    assert dele["before"]["payment_method"] == "Credit Card"
    assert ins["metadata"]["splitindex"] == 0 and "segmentindex" not in ins["metadata"]


# ---------------------------------------------------------------- real messages


def _conformance(name: str) -> bytes:
    return shared_path("conformance", CONFORMANCE, name).read_bytes()


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_ga_examples(op: str) -> None:
    [ev], rej = ces.decode(_conformance(f"msdocs_ga_{op}_employees.json"))
    assert not rej
    assert ev["table"] == "Employees" and ev["key"] == {"Id": 8}
    assert ev["operation"] == op.upper()
    # commit LSN with colons, commit time from the transaction block, datetime2(7) truncated
    assert ev["transaction_id"].count(":") == 2
    assert ev["types"]["SignupDate"] == "timestamp_ntz"
    row = ev["after"] or ev["before"]
    assert row["SignupDate"] == dt.datetime(2026, 8, 7, 16, 25, 0, 883333)
    # logicalid embeds the same commit LSN without colons: both orders agree
    doc = orjson.loads(_conformance(f"msdocs_ga_{op}_employees.json"))
    assert doc["segmentindex"] == 0 and doc["finalsegment"] is True
    from_logicalid, _ = ces.decode({**doc, "data": _without_transaction(doc["data"])})
    assert from_logicalid[0]["sequence"] == ev["sequence"]


def _without_transaction(data: str) -> str:
    inner = orjson.loads(data)
    inner["eventsource"].pop("transaction")
    return orjson.dumps(inner).decode()


def test_ga_update_has_both_images() -> None:
    [ev], _ = ces.decode(_conformance("msdocs_ga_update_employees.json"))
    assert ev["before"]["LastName"] == "Nikolic"
    assert ev["after"]["LastName"] == "Nikolic-Smith"


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_preview_examples(op: str) -> None:
    [ev], rej = ces.decode(_conformance(f"msdocs_preview_{op}_purchases.json"))
    assert not rej and ev["table"] == "Purchases" and ev["key"] == {"purchase_id": 105}


def test_workshop_partial_update() -> None:
    [ev], rej = ces.decode(_conformance("lobel_workshop_cloudevent_update_partialcols.json"))
    assert not rej
    # cols lists the key (index 0) and the changed column (index 5): a partial event
    assert ev["partial"] is True
    assert ev["after"] == {"ProductId": 2, "ItemsInStock": 7}
    assert ev["before"] == {"ProductId": 2, "ItemsInStock": 8}
    assert ev["types"] == {"ProductId": "int", "ItemsInStock": "int"}
    # segmentindex 1 on a single-segment event (one-based) is accepted
    assert ev["metadata"]["segmentindex"] == 1
    assert ev["metadata"]["datacontenttype"] == "application/avro-json"


def test_unpacked_data_record_is_not_an_event() -> None:
    # the file holds only a CloudEvent's decoded 'data' member, not a CloudEvent
    assert ces.codes(_conformance("lobel_workshop_cloudevent_data_unpacked.json")) == [
        "NOT_AN_EVENT"
    ]


# ---------------------------------------------------------------- ordering, options


def _event(commit: str, seq: int, begin: str, op: str = "UPD", **cur: Any) -> dict[str, Any]:
    data = {
        "eventsource": {
            "db": "d",
            "schema": "dbo",
            "tbl": "t",
            "cols": [
                {"name": "id", "type": "int", "index": 0},
                {"name": "v", "type": "money", "index": 1},
            ],
            "pkkey": [{"columnname": "id", "value": "1"}],
            "transaction": {
                "commitlsn": commit,
                "beginlsn": begin,
                "sequencenumber": seq,
                "committime": "2026-01-01T00:00:00Z",
            },
        },
        "eventrow": {"old": "{}", "current": orjson.dumps({"id": "1", "v": "1.5", **cur}).decode()},
    }
    return {
        "specversion": "1.0",
        "type": "com.microsoft.SQL.CES.DML.V1",
        "source": "/",
        "id": f"e-{commit}-{seq}",
        "logicalid": "g:00000000000000000000:00000000000000000001",
        "time": "2026-01-01T00:00:00Z",
        "operation": op,
        "segmentindex": 0,
        "finalsegment": True,
        "data": orjson.dumps(data).decode(),
    }


def test_later_commit_with_lower_change_lsn_orders_after() -> None:
    # A began first but committed last: its changes have lower LSNs, its commit LSN is higher
    early, _ = ces.decode(_event("00000010:00000200:0001", 1, "00000010:00000100:0001"))
    late, _ = ces.decode(_event("00000010:00000300:0001", 1, "00000010:00000050:0001"))
    assert late[0]["sequence"] > early[0]["sequence"]
    # within a transaction, sequencenumber orders
    a, _ = ces.decode(_event("00000010:00000300:0001", 2, "00000010:00000050:0001"))
    assert a[0]["sequence"] > late[0]["sequence"]


def test_money_is_decimal_and_partial_option() -> None:
    [ev], _ = ces.decode(_event("00000010:00000200:0001", 1, "00000010:00000100:0001"))
    assert ev["types"]["v"] == "decimal(19,4)"
    assert ev["partial"] is False
    [ev], _ = ces.decode(
        _event("00000010:00000200:0001", 1, "00000010:00000100:0001"), partial_updates=True
    )
    assert ev["partial"] is True


def test_batch_of_cloudevents() -> None:
    good = _event("00000010:00000200:0001", 1, "00000010:00000100:0001")
    events, rej = ces.decode([good, {**good, "operation": "MERGE"}, good])
    assert len(events) == 2
    assert [(r.code, r.item) for r in rej] == [("UNKNOWN_OPERATION", 1)]


# ---------------------------------------------------------------- bad input


def _with_data(data: Any) -> dict[str, Any]:
    return {**_event("00000010:00000200:0001", 1, "00000010:00000100:0001"), "data": data}


def _with_inner(**changes: Any) -> dict[str, Any]:
    ev = _event("00000010:00000200:0001", 1, "00000010:00000100:0001")
    inner = orjson.loads(ev["data"])
    for path, value in changes.items():
        section, field = path.split("__")
        inner[section][field] = value
    return {**ev, "data": orjson.dumps(inner).decode()}


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        (_with_data(42), "BAD_DATA"),
        (_with_data("{not json"), "BAD_DATA"),
        (_with_data('{"eventsource": {}}'), "BAD_DATA"),
        (_with_inner(eventrow__current="{broken"), "BAD_ROW_IMAGE"),
        (_with_inner(eventrow__old=7), "BAD_ROW_IMAGE"),
        (
            _with_inner(eventsource__pkkey=[{"columnname": "nope", "value": "1"}]),
            "KEY_COLUMN_MISSING",
        ),
        (_with_inner(eventrow__current='{"id": "1", "v": "lots"}'), "BAD_VALUE"),
        (_with_inner(eventsource__tbl=None), "MISSING_TABLE"),
        ({**_with_data("{}"), "operation": "MERGE"}, "UNKNOWN_OPERATION"),
        ({**_with_data("{}"), "type": "com.microsoft.SQL.CES.DDL.V1"}, "UNSUPPORTED_EVENT_TYPE"),
        ({**_event("00000010:00000200:0001", 1, "x"), "segmentindex": "two"}, "BAD_SEGMENT"),
        ({**_event("00000010:00000200:0001", 1, "x"), "finalsegment": "no"}, "BAD_SEGMENT"),
        ({**_event("00000010:00000200:0001", 1, "x"), "segmentindex": -1}, "SEGMENT_OUT_OF_RANGE"),
        (
            {
                **{k: v for k, v in _with_data("{}").items() if "segment" not in k},
                "splitindex": 5,
                "splittotalcnt": 2,
            },
            "SEGMENT_OUT_OF_RANGE",
        ),
        (
            {
                k: v
                for k, v in {**_with_data("{}"), "finalsegment": False}.items()
                if k != "logicalid"
            },
            "BAD_SEGMENT",
        ),
        (
            _with_inner(eventsource__transaction={"commitlsn": "zz", "sequencenumber": 1}),
            "BAD_POSITION",
        ),
        ({"specversion": "1.0", "data": "{}"}, "NOT_AN_EVENT"),
    ],
)
def test_bad_input_codes(doc: dict[str, Any], code: str) -> None:
    assert ces.codes(doc) == [code]


def test_unknown_column_type_kept_as_text() -> None:
    ev = _with_inner(
        eventsource__cols=[
            {"name": "id", "type": "int", "index": 0},
            {"name": "v", "type": "geography", "index": 1},
        ]
    )
    [e], _ = ces.decode(ev)
    assert e["types"]["v"] == "string"
    assert e["metadata"]["unknown_types"] == {"v": "geography"}


# ---------------------------------------------------------------- through the pipeline


@pytest.mark.spark
def test_spec_examples_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import config, land, rows, run

    ex = spec_examples()
    landing = tmp_path / "landing"
    # the update arrives before the insert; order comes from the LSNs
    land(landing, ex["updated"])
    land(landing, ex["insert"])
    cfg = config(tmp_path, "ces_spec")
    cfg = cfg.model_copy(
        update={"sources": [cfg.sources[0].model_copy(update={"dialect": "sqlserver_ces"})]}
    )
    run(spark, cfg)
    got = rows(spark, cfg, "purchases", "purchase_id, product_name, quantity, purchase_date")
    assert got == [
        {
            "purchase_id": 105,
            "product_name": "Game 2066",
            "quantity": 2,
            "purchase_date": dt.datetime(2025, 3, 14, 16, 45, 1),
        }
    ]
    schema = {
        f.name: f.dataType.simpleString() for f in spark.table("cdc.ces_spec.purchases").schema
    }
    assert schema["purchase_id"] == "int"
    assert schema["purchase_date"] == "timestamp_ntz"
    assert schema["customer_name"] == "string"
    land(landing, ex["delete"])
    run(spark, cfg)
    assert rows(spark, cfg, "purchases") == []


# ---------------------------------------------------------------- Avro and Event Hubs Capture


def _some_events() -> list[dict[str, Any]]:
    return [
        _event("00000010:00000200:0001", 1, "00000010:00000100:0001"),
        _event("00000010:00000200:0001", 2, "00000010:00000100:0001", v="2.5"),
        _event("00000010:00000300:0001", 1, "00000010:00000250:0001", v="3"),
    ]


def test_avro_cloudevent_records() -> None:
    from cdcflow.dialects.sqlserver_ces.render import avro_cloudevents

    src = _some_events()
    events, rej = ces.decode_file(avro_cloudevents(src), "x/events.avro", "auto")
    assert not rej
    assert [e["id"] for e in events] == [e["id"] for e in src]
    assert [str(e["after"]["v"]) for e in events] == ["1.5000", "2.5000", "3.0000"]


def test_event_hubs_capture_file_structured_and_binary_mode() -> None:
    from cdcflow.dialects.sqlserver_ces.render import capture_file

    src = _some_events()
    events, rej = ces.decode_file(
        capture_file(src, binary_mode_every=2), "capture/0/2026.avro", "auto"
    )
    assert not rej
    assert [e["id"] for e in events] == [e["id"] for e in src]
    # Capture coordinates travel in metadata; the 2nd event came in binary content mode
    assert [e["metadata"]["eventhubs_sequence_number"] for e in events] == [0, 1, 2]
    assert events[1]["metadata"]["finalsegment"] is True
    assert events[1]["sequence"] > events[0]["sequence"]


def test_corrupt_avro_keeps_what_precedes() -> None:
    from cdcflow.dialects.sqlserver_ces.render import capture_file

    good = capture_file(_some_events(), binary_mode_every=0)
    events, rej = ces.decode_file(good[: len(good) - 40] + b"\x00" * 40, "c.avro")
    # the damaged tail: the record it hit is not JSON, then the block's sync marker fails;
    # the records before it still decode
    assert rej[-1].code == "CORRUPT_AVRO" and "corrupt Avro file after" in rej[-1].message
    assert len(events) == 2
    for dialect in ("sqlserver_ces", "auto"):
        events, rej = ces.decode_file(b"not avro at all", "c.avro", dialect)
        assert (events, [r.code for r in rej]) == ([], ["CORRUPT_AVRO"])


# ---------------------------------------------------------------- Avro serialization, Kafka


def test_avro_data_record_decodes_like_json() -> None:
    from cdcflow.dialects.sqlserver_ces.render import avro_cloudevents, avro_data

    src = _some_events()
    assert avro_data(src[0]["data"])[:1] not in (b"{", b"[")
    events, rej = ces.decode_file(avro_cloudevents(src, binary_data=True), "x/events.avro", "auto")
    plain, _ = ces.decode_file(avro_cloudevents(src), "x/events.avro", "auto")
    assert not rej
    assert [e["after"] for e in events] == [e["after"] for e in plain]
    assert [e["sequence"] for e in events] == [e["sequence"] for e in plain]


def test_schemaless_avro_message_files(tmp_path: Path) -> None:
    import io

    import fastavro

    from cdcflow.dialects.sqlserver_ces.cloudevent import CLOUDEVENT_AVRO_SCHEMA
    from cdcflow.dialects.sqlserver_ces.render import avro_record, schemaless_cloudevent

    ev = _some_events()[1]
    events, rej = ces.decode_file(schemaless_cloudevent(ev), "msg-1.avro", "auto")
    assert not rej and [e["id"] for e in events] == [ev["id"]]
    # a user-supplied schema: the producer's record has an extra field
    schema = {
        **CLOUDEVENT_AVRO_SCHEMA,
        "fields": [*CLOUDEVENT_AVRO_SCHEMA["fields"], {"name": "tenant", "type": "string"}],
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf, fastavro.parse_schema(schema), {**avro_record(ev), "tenant": "t1"}
    )
    path = tmp_path / "schema.avsc"
    path.write_bytes(orjson.dumps(schema))
    for given in (str(path), orjson.dumps(schema).decode()):
        events, _ = ces.decode_file(buf.getvalue(), "msg-2.avro", avro_schema=given)
        assert [e["id"] for e in events] == [ev["id"]]
    # without the schema the extra bytes are noticed, not ignored
    _, rej = ces.decode_file(buf.getvalue(), "msg-2.avro")
    assert [r.code for r in rej] == ["CORRUPT_AVRO"] and "avro_schema" in rej[0].message


def test_kafka_records_structured_binary_mode_and_avro_value() -> None:
    import base64

    from cdcflow.dialects.sqlserver_ces.render import kafka_record, schemaless_cloudevent

    a, b, c = _some_events()
    lines = [
        kafka_record(a, 0, binary_mode=False),
        kafka_record(b, 1, binary_mode=True),
        {
            "topic": "ces",
            "partition": 3,
            "offset": 2,
            "headers": [{"key": "content-type", "value": "avro/binary"}],
            "value_base64": base64.b64encode(schemaless_cloudevent(c)).decode(),
        },
    ]
    data = b"\n".join(orjson.dumps(x) for x in lines)
    for dialect in ("sqlserver_ces", "auto"):
        events, rej = ces.decode_file(data, "kafka.jsonl", dialect)
        assert not rej, rej
        assert [e["id"] for e in events] == [a["id"], b["id"], c["id"]]
        assert {e["dialect"] for e in events} == {"sqlserver_ces"}
    kafka = {k: v for k, v in events[2]["metadata"].items() if k.startswith("kafka_")}
    assert kafka == {"kafka_topic": "ces", "kafka_partition": 3, "kafka_offset": 2}
    assert events[1]["after"] == ces.decode(b)[0][0]["after"]


def test_binary_content_mode_over_transport_headers() -> None:
    ev = _some_events()[0]
    headers = {f"ce-{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in ev.items()}
    headers.pop("ce-data")
    msg = RawMessage(
        ev["data"].encode(), origin="http", headers={k: v.encode() for k, v in headers.items()}
    )
    for dialect in ("sqlserver_ces", "auto"):
        out = Decoder(dialect).decode(msg)
        assert not out.rejections, out.rejections
        assert [e["id"] for e in out.events] == [ev["id"]]


def test_avro_data_split_into_segments_is_joined_then_decoded() -> None:
    from cdcflow.dialects.sqlserver_ces.render import CAPTURE_AVRO_SCHEMA, avro_data

    ev = _some_events()[2]
    body = avro_data(ev["data"])
    assert body is not None
    cut = len(body) // 2
    import io

    import fastavro

    records = []
    for i, piece in enumerate((body[:cut], body[cut:])):
        props = {
            f"ce_{k}": str(v)
            for k, v in ev.items()
            if k not in ("data", "segmentindex", "finalsegment")
        }
        props.update(ce_segmentindex=str(i), ce_finalsegment=str(i == 1).lower())
        records.append(
            {
                "SequenceNumber": i,
                "Offset": str(i),
                "EnqueuedTimeUtc": "1/1/2026 12:00:00 AM",
                "SystemProperties": {},
                "Properties": props,
                "Body": piece,
            }
        )
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(CAPTURE_AVRO_SCHEMA), records)
    dec = Decoder("auto")
    segs = [s for o in dec.decode_file(buf.getvalue(), "cap.avro") for s in o.segments]
    assert [s.index for s in segs] == [0, 1]
    out = dec.decode_segments("sqlserver_ces", [s.raw for s in segs], "cap.avro")
    assert not out.rejections, out.rejections
    assert out.events[0]["after"] == ces.decode(ev)[0][0]["after"]
