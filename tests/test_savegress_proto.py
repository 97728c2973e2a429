"""The gRPC CDCEvent message: framing, decode, encode, and what protobuf cannot carry."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.savegress.proto import MAX_EXACT_INT, event_from_proto, event_to_proto
from cdcflow.errors import DecodeError
from cdcflow.proto import savegress_pb2 as pb
from cdcflow.transports.message import RawMessage
from cdcflow.transports.protobuf import split_delimited, write_delimited
from cdcflow.types import ValueTypeError

FULL = {
    "id": "evt-1",
    "source": "postgres",
    "schema": "public",
    "table": "users",
    "operation": "UPDATE",
    "timestamp": "2025-01-15T10:30:00.123456Z",
    "transaction_id": "tx-1",
    "position": {"lsn": "0/1234ABCD", "sequence": 42},
    "before": {"id": 1, "name": "a", "tags": ["x", None], "geo": {"x": 1.5, "y": 2.0}},
    "after": {"id": 1, "name": "b", "ok": True, "score": 0.25},
    "metadata": {"database": "production", "server_id": 12345},
}


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_delimited_round_trip(messages: list[bytes]) -> None:
    stream = write_delimited(messages)
    parts = split_delimited(stream)
    assert [body for _, body in parts] == messages
    # offsets point at each length prefix
    assert all(o1 < o2 for (o1, _), (o2, _) in itertools.pairwise(parts))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x05\x0a\x03ab", "claims 5 bytes but only 4 remain"),
        (b"\x80", "length prefix truncated"),
        (b"\xff" * 11, "longer than 10 bytes"),
        (b"\xff\xff\xff\xff\x0f", "limit"),
    ],
)
def test_corrupt_framing(data: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError) as e:
        split_delimited(data)
    assert e.value.code == "CORRUPT_PROTOBUF"
    assert fragment in e.value.message


def test_full_event_round_trip() -> None:
    doc = event_from_proto(event_to_proto(FULL))
    assert doc["operation"] == "UPDATE"
    assert doc["timestamp"] == dt.datetime(2025, 1, 15, 10, 30, 0, 123456, tzinfo=dt.UTC)
    assert doc["position"] == {"lsn": "0/1234ABCD", "sequence": 42}
    assert doc["before"] == FULL["before"]
    assert doc["after"] == FULL["after"]
    # metadata is map<string, string>: numbers come back as their JSON text
    assert doc["metadata"] == {"database": "production", "server_id": "12345"}


def test_positions_of_every_source() -> None:
    for position in (
        {"file": "mysql-bin.000001", "position": 12345, "gtid": "3E11:1-5"},
        {"resume_token": "82ab", "cluster_time": {"t": 1234567890, "i": 1}},
        {"lsn": "16/B374D848"},
    ):
        doc = event_from_proto(event_to_proto({**FULL, "position": position}))
        assert doc["position"] == position


def test_decoded_through_the_dialect() -> None:
    data = write_delimited([event_to_proto(FULL)])
    keys = DialectOptions(table_keys={"users": ("id",)})
    decoder = Decoder("savegress", keys)
    [outcome] = list(decoder.decode_file(data, "x.pb"))
    assert not outcome.rejections
    [ev] = outcome.events
    assert ev["key"] == {"id": 1}
    assert ev["after"]["name"] == "b"
    assert ev["metadata"]["format"] == "protobuf"
    # the same bytes auto-detected by file extension
    [auto] = list(Decoder("auto", keys).decode_file(data, "x.pb"))
    assert auto.events and auto.events[0]["id"] == ev["id"]


def test_ddl_fields_travel_in_metadata() -> None:
    ddl = {
        "id": "d1",
        "table": "users",
        "operation": "DDL",
        "ddl_type": "ALTER_TABLE",
        "ddl_command": "ALTER TABLE users ADD COLUMN phone VARCHAR(20)",
    }
    doc = event_from_proto(event_to_proto(ddl))
    assert doc["ddl_type"] == "ALTER_TABLE"
    assert doc["ddl_command"].startswith("ALTER TABLE")
    assert "ddl_type" not in doc.get("metadata", {})


def test_unspecified_and_unknown_operation() -> None:
    msg = pb.CDCEvent(id="e", table="t")
    data = write_delimited([msg.SerializeToString()])
    [outcome] = list(Decoder("savegress").decode_file(data, "x.pb"))
    assert [r.code for r in outcome.rejections] == ["MISSING_OPERATION"]

    raw = msg.SerializeToString() + b"\x28\x09"  # field 5 (operation) = 9
    with pytest.raises(DecodeError) as e:
        event_from_proto(raw)
    assert e.value.code == "UNKNOWN_OPERATION"


def test_garbage_message_is_corrupt() -> None:
    with pytest.raises(DecodeError) as e:
        event_from_proto(b"\x0a\xff\xff")
    assert e.value.code == "CORRUPT_PROTOBUF"
    data = write_delimited([event_to_proto(FULL), b"\x0a\xff\xff", event_to_proto(FULL)])
    outcomes = list(Decoder("savegress").decode_file(data, "x.pb"))
    # the bad message is rejected alone; its neighbours still decode
    assert [len(o.events) for o in outcomes] == [1, 0, 1]
    assert outcomes[1].rejections[0].code == "CORRUPT_PROTOBUF"


def test_what_struct_cannot_carry() -> None:
    with pytest.raises(ValueTypeError, match="does not fit"):
        event_to_proto({**FULL, "after": {"id": MAX_EXACT_INT + 1}})
    with pytest.raises(ValueTypeError, match="no protobuf Struct form"):
        event_to_proto({**FULL, "after": {"id": 1, "x": Decimal("1.5")}})
    with pytest.raises(ValueTypeError, match="no CDCEvent Operation"):
        event_to_proto({**FULL, "operation": "TRUNCATE"})
    # an integral double comes back as an integer; a fractional one stays a float
    doc = event_from_proto(event_to_proto({**FULL, "after": {"id": 1, "a": 2.0, "b": 2.5}}))
    assert doc["after"] == {"id": 1, "a": 2, "b": 2.5}


def test_raw_message_origin_is_kept() -> None:
    data = write_delimited([event_to_proto(FULL), event_to_proto({**FULL, "id": "evt-2"})])
    outcomes = list(Decoder("savegress").decode_file(data, "dir/events.pb"))
    msgs: list[RawMessage] = [o.message for o in outcomes]
    assert [m.origin for m in msgs] == ["dir/events.pb"] * 2
    assert msgs[0].offset == 0 and msgs[1].offset > 0
