"""Bad input never crashes and never costs memory out of proportion: one regression test per
root cause a reliability probe found, the limits, per-line framing, and the last line of
defence (``DECODER_ERROR``) in the decoder and the Arrow column builder."""

from __future__ import annotations

import resource
import tracemalloc
from decimal import Decimal
from typing import Any

import orjson
import pytest

from cdcflow.decode.columns import Columns
from cdcflow.decode.decoder import DECODER_ERROR, Decoder, Outcome
from cdcflow.decode.segments import Piece, assess
from cdcflow.dialects import dialect_names
from cdcflow.dialects.model import DialectOptions
from cdcflow.errors import ConfigError, DecodeError
from cdcflow.transports import json as json_transport
from cdcflow.transports.limits import LIMITS, Limits
from cdcflow.transports.message import RawMessage
from tests.conftest_shared import shared_path

TARGETS = [*dialect_names(), "auto"]
DS = b'{"source_metadata":{"table":"t"},"payload":{"id":%s}}'
CRDB_ENRICHED = (
    b'{"after":{"id":1},"op":"c","ts_ns":%s,"source":{"database_name":"d","schema_name":"public",'
    b'"table_name":"t","primary_keys":["id"],"ts_hlc":"1745527444910044000.0000000000"}}'
)


def outcomes(
    data: bytes, origin: str = "f.json", dialect: str = "auto", wire: bool = False, **extra: Any
) -> list[Outcome]:
    decoder = Decoder(dialect, DialectOptions(extra=extra), wire=wire)
    return list(decoder.decode_file(data, origin))


def codes(outs: list[Outcome]) -> list[str]:
    return [r.code for o in outs for r in o.rejections]


def events(outs: list[Outcome]) -> list[dict[str, Any]]:
    return [e for o in outs for e in o.events]


def arrow_codes(outs: list[Outcome]) -> list[str | None]:
    cols = Columns(wire=True)
    for o in outs:
        cols.add_outcome(o)
    return cols.to_batch().column("error_code").to_pylist()


# ---------------------------------------------------------------- the eight root causes


@pytest.mark.parametrize("dialect", TARGETS)
def test_1_array_file_with_a_deeply_nested_element_rejects_that_element(dialect: str) -> None:
    deep = b"[" * 300 + b"]" * 300
    good = DS % b"1"
    outs = outcomes(b"[" + good + b"," + deep + b"," + good + b"]", dialect=dialect)
    assert len(outs) == 3
    assert outs[1].rejections[0].code == "TOO_DEEP"
    assert outs[1].message.index == 1
    assert outs[1].rejections[0].raw == deep  # the element as written
    if dialect in ("auto", "datastream"):
        assert [len(o.events) for o in outs] == [1, 0, 1]


@pytest.mark.parametrize("dialect", TARGETS)
@pytest.mark.parametrize("wire", [False, True])
def test_2_deep_nesting_inside_values_is_too_deep(dialect: str, wire: bool) -> None:
    for depth in (70, 300, 900):
        value = b"[" * depth + b"1" + b"]" * depth
        for data in (DS % value, DS % (b'1.5, "x": ' + value)):  # exact-number path too
            assert codes(outcomes(data, dialect=dialect, wire=wire)) == ["TOO_DEEP"], depth


def test_2_depth_limit_is_configurable_and_checked() -> None:
    nested = DS % (b"[" * 70 + b"]" * 70)
    assert codes(outcomes(nested, dialect="datastream", limits={"max_depth": 100})) == []
    with pytest.raises(ConfigError, match="unknown limit"):
        Limits.from_options({"depth": 3})
    with pytest.raises(ConfigError, match="positive integer"):
        Limits.from_options({"max_depth": 0})


@pytest.mark.parametrize("dialect", TARGETS)
def test_3_integers_beyond_64_bits_and_4300_digits_are_coded(dialect: str) -> None:
    for number in (b"18446744073709551615", b"23456678901234567890", b"9" * 5000):
        for wire in (False, True):
            outs = outcomes(DS % number, dialect=dialect, wire=wire)
            assert DECODER_ERROR not in codes(outs)
            if wire:
                assert DECODER_ERROR not in arrow_codes(outs)
    assert codes(outcomes(DS % (b"9" * 5000), dialect=dialect)) == ["NUMBER_TOO_LARGE"]
    # one inference rule: an integer beyond 64 bits that fits 38 digits is a decimal(38,0)
    (ev,) = events(outcomes(DS % b"18446744073709551615", dialect="datastream"))
    assert (ev["after"]["id"], ev["types"]["id"]) == (2**64 - 1, "decimal(38,0)")


def test_3_integers_beyond_64_bits_in_a_key_make_an_event_and_its_json() -> None:
    from cdcflow.event import dumps

    big = b"18446744073709551616"
    outs = outcomes(CRDB_ENRICHED.replace(b'"id":1', b'"id":' + big) % b"1", dialect="cockroachdb")
    (ev,) = events(outs)
    assert ev["key"] == {"id": 2**64}
    assert b'"id":18446744073709551616' in dumps(ev)
    wired = outcomes(
        CRDB_ENRICHED.replace(b'"id":1', b'"id":' + big) % b"1", "f.json", "auto", True
    )
    assert arrow_codes(wired) == [None]


def test_3_number_limits_hold_on_the_exact_path() -> None:
    with pytest.raises(DecodeError) as e:
        json_transport.parse_exact(b'{"a": ' + b"1" * 101 + b"}")
    assert e.value.code == "NUMBER_TOO_LARGE"
    assert json_transport.parse_exact(b'{"a": ' + b"1" * 100 + b"}")["a"] == int("1" * 100)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b'{"resolved":{}}', "BAD_HLC"),
        (b'{"resolved":1e38}', "BAD_HLC"),
        (b'{"resolved":[1]}', "BAD_HLC"),
        (b'{"resolved":"1' + b"0" * 60 + b'.0"}', "BAD_HLC"),
        (b'{"resolved":"99999999999999999999999.0000000000"}', "BAD_HLC"),
    ],
)
def test_4_cockroachdb_resolved_of_the_wrong_type_is_bad_hlc(data: bytes, code: str) -> None:
    for dialect in ("cockroachdb", "auto"):
        assert codes(outcomes(data, dialect=dialect)) == [code]


def test_4_enriched_schema_fields_of_the_wrong_type() -> None:
    # primary_keys beside table_name mark CockroachDB's enriched source (without them an op and
    # a source are Debezium's marks: OTHER_DIALECT)
    doc = (
        b'{"payload":{"after":{"id":1},"op":"c","source":{"table_name":"t","primary_keys":["id"]'
        b'}},"schema":{"fields":7}}'
    )
    assert codes(outcomes(doc, dialect="cockroachdb")) == ["BAD_SCHEMA"]
    odd = (
        b'{"payload":{"after":{"id":1},"op":"c","source":{"table_name":"t",'
        b'"primary_keys":["id"]}},"schema":{"fields":[{"field":"after","fields":[{"field":"id",'
        b'"name":"decimal","parameters":"38"}]}]}}'
    )
    (ev,) = events(outcomes(odd, dialect="cockroachdb"))
    assert ev["types"]["id"] == "decimal(38,18)"


@pytest.mark.parametrize("dialect", ["cockroachdb", "datastream"])
def test_3_integers_beyond_64_bits_inside_json_values(dialect: str) -> None:
    data = {
        "cockroachdb": b'{"after":{"id":1,"doc":{"n":18446744073709551616}},"key":[1]}',
        "datastream": DS % b'1, "doc": {"n": 18446744073709551616}',
    }[dialect]
    origin = "202301020304050000000000000000000-0123456789abcdef-1-2-00000000-t-1.ndjson"
    for wire in (False, True):
        outs = outcomes(data, origin, dialect, wire)
        assert codes(outs) == []
        (ev,) = events(outs)
        if dialect == "cockroachdb":  # reads numbers exactly
            assert "18446744073709551616" in ev["after"]["doc"]


@pytest.mark.parametrize("dialect", ["auto", "cockroachdb"])
def test_5_csv_with_a_stray_carriage_return_is_coded(dialect: str) -> None:
    assert codes(outcomes(b'\r"', "f.csv", dialect)) == ["BAD_CSV"]
    found = codes(outcomes(b'a,"b\rc\n', "f.csv", dialect))
    assert found and DECODER_ERROR not in found


def _ces(**fields: Any) -> bytes:
    import orjson

    doc = {
        "specversion": "1.0",
        "type": "com.microsoft.SQL.CES.DML.V1",
        "source": "/",
        "id": "x",
        "logicalid": "g",
        "data": "{",
        **fields,
    }
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    "fields",
    [
        {"segmentindex": 2**63 - 1, "finalsegment": False},
        {"segmentindex": "18446744073709551615", "finalsegment": False},
        {"splitindex": 1, "splittotalcnt": 50_000_000},
        {"splitindex": 1, "splittotalcnt": "9" * 5000},
    ],
)
def test_6_segment_counts_are_bounded(fields: dict[str, Any]) -> None:
    tracemalloc.start()
    try:
        found = codes(outcomes(_ces(**fields), dialect="sqlserver_ces"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == ["SEGMENT_OUT_OF_RANGE"]
    assert peak < 5_000_000


def test_6_the_segment_stage_bounds_counts_too() -> None:
    pieces = [Piece(1, None, 50_000_000, b"x"), Piece(0, None, 50_000_000, b"y")]
    verdict = assess("g", pieces, now=10.0, wait=1.0)
    assert (verdict.status, verdict.code) == ("invalid", "SEGMENT_OUT_OF_RANGE")
    assert assess("g", [Piece(0, None, 3, b"x")], limit=2).code == "SEGMENT_OUT_OF_RANGE"


@pytest.mark.parametrize("dialect", TARGETS)
def test_7_huge_exponents_are_never_written_out(dialect: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for number in (b"1.0e999999999", b"1.0e-999999999", b"1e401", b"1.5e-401"):
        for data in (DS % number, CRDB_ENRICHED % number):
            found = codes(outcomes(data, dialect=dialect, wire=True))
            assert DECODER_ERROR not in found
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
    with pytest.raises(DecodeError) as e:
        json_transport.parse_exact(b'{"a": 1.0e-999999999}')
    assert e.value.code == "NUMBER_TOO_LARGE"


def test_8_values_arrow_cannot_take_are_converted_or_rejected_per_message() -> None:
    outs = outcomes(CRDB_ENRICHED % b"23456678901234567890", dialect="cockroachdb", wire=True)
    assert len(events(outs)) == 1
    assert arrow_codes(outs) == [None]  # metadata ts_ns as JSON text, exactly
    cols = Columns(wire=True)
    for o in outs:
        cols.add_outcome(o)
    meta = dict(cols.to_batch().column("metadata").to_pylist()[0])
    assert meta["ts_ns"] == "23456678901234567890"


def test_8_one_row_arrow_cannot_take_fails_only_its_message() -> None:
    decoder = Decoder("datastream", wire=True)
    good = DS % b"1"
    outs = [decoder.decode(RawMessage(good, origin=o)) for o in "abc"]
    outs[1].events[0]["timestamp"] = "not a time"  # Arrow cannot take it at batch time
    outs[2].events[0]["metadata"] = {"x": object()}  # cannot even be added
    cols = Columns(wire=True)
    for o in outs:
        cols.add_outcome(o)
    batch = cols.to_batch()
    assert batch.column("error_code").to_pylist() == [None, DECODER_ERROR, DECODER_ERROR]
    assert batch.column("origin").to_pylist() == ["a", "b", "c"]
    assert batch.column("raw").to_pylist()[1:] == [good, good]
    problems = batch.column("error_message").to_pylist()
    assert problems[1].startswith("the decoder failed on this message (Arrow")
    assert problems[2].startswith("the decoder failed on this message (TypeError")


# ---------------------------------------------------------------- what a rejection names


def _ces_with_bad_id() -> bytes:
    doc = orjson.loads(
        shared_path("conformance", "sqlserver_ces", "msdocs_ga_insert_employees.json").read_bytes()
    )
    data = orjson.loads(doc["data"])
    data["eventrow"]["current"] = data["eventrow"]["current"].replace('"Id":"8"', '"Id":"eight"')
    return orjson.dumps({**doc, "data": orjson.dumps(data).decode()})


#: Per dialect: a message whose value its column's type cannot read, the declared types that
#: give the column its type (none: the message types it), and the table it is about.
BAD_VALUES: dict[str, tuple[Any, dict[str, dict[str, str]], str]] = {
    "cockroachdb": (
        CRDB_ENRICHED.replace(b'"id":1', b'"id":1,"at":"not a time"') % b"1",
        {"t": {"at": "timestamp"}},
        "t",
    ),
    "datastream": (
        b'{"source_metadata":{"table":"t"},"payload":{"at":"x"}}',
        {"t": {"at": "timestamp"}},
        "t",
    ),
    "debezium": (
        b'{"op":"c","after":{"id":1,"at":"x"},"source":{"connector":"postgresql","table":"orders","lsn":1}}',
        {"orders": {"at": "timestamp"}},
        "orders",
    ),
    "savegress": (
        b'{"operation":"INSERT","table":"orders","after":{"at":"x"},"position":{"lsn":"0/1"}}',
        {"orders": {"at": "timestamp"}},
        "orders",
    ),
    "sqlserver_ces": (_ces_with_bad_id, {}, "Employees"),
}


@pytest.mark.parametrize("dialect", sorted(BAD_VALUES))
def test_a_rejection_after_the_table_was_read_names_the_table(dialect: str) -> None:
    """A message rejected once its dialect has read its table (a value its column's type
    cannot read) names the table: in the rejection and in the decoded frame's row, so its
    dead letter has it."""
    assert sorted(BAD_VALUES) == sorted(dialect_names())
    data, types, table = BAD_VALUES[dialect]
    data = data() if callable(data) else data
    decoder = Decoder(dialect, DialectOptions(column_types=types), wire=True)
    outs = list(decoder.decode_file(data, "f.json"))
    (rej,) = [r for o in outs for r in o.rejections]
    assert (rej.code, rej.table) == ("BAD_VALUE", table), rej
    cols = Columns(wire=True)
    for o in outs:
        cols.add_outcome(o)
    batch = cols.to_batch()
    assert batch.column("table").to_pylist() == [table]
    assert batch.column("error_code").to_pylist() == ["BAD_VALUE"]


# ---------------------------------------------------------------- the last line of defence


class _Broken(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text either")


def test_decoder_error_names_the_exception_and_keeps_the_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoder = Decoder("datastream")
    dialect = decoder.dialects[0]

    def explode(msg: RawMessage) -> list[Any]:
        raise KeyError("surprise")

    monkeypatch.setattr(dialect, "decode", explode)
    out = decoder.decode(RawMessage(DS % b"1", origin="f.json"))
    (r,) = out.rejections
    assert (r.code, r.raw, r.dialect) == (DECODER_ERROR, DS % b"1", "datastream")
    assert r.message == "the decoder failed on this message (KeyError: 'surprise')"

    def explode_more(msg: RawMessage) -> list[Any]:
        raise _Broken()

    monkeypatch.setattr(dialect, "decode", explode_more)
    (r,) = decoder.decode(RawMessage(b"{}")).rejections
    assert r.message == "the decoder failed on this message (_Broken: (no message))"


def test_a_framing_failure_rejects_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = Decoder("datastream")

    def frame_file(data: bytes, origin: str | None) -> Any:
        raise MemoryError("a framing bug")

    monkeypatch.setattr(decoder.dialects[0], "frame_file", frame_file)
    outs = list(decoder.decode_file(b"whole file", "f.json"))
    assert [(r.code, r.raw) for o in outs for r in o.rejections] == [(DECODER_ERROR, b"whole file")]
    assert "MemoryError: a framing bug" in outs[0].rejections[0].message


def test_message_over_the_size_limit() -> None:
    data = DS % (b'"' + b"x" * 2000 + b'"')
    found = codes(outcomes(data, dialect="datastream", limits={"max_message_bytes": 1000}))
    assert found == ["MESSAGE_TOO_LARGE"]


# ---------------------------------------------------------------- framing per line


@pytest.mark.parametrize("dialect", ["auto", "datastream"])
@pytest.mark.parametrize("wire", [False, True])
def test_a_bad_first_line_rejects_only_that_line(dialect: str, wire: bool) -> None:
    data = b"garbage\n" + DS % b"1" + b"\n\n" + DS % b"2" + b'\n{"a": [1,\n'
    outs = outcomes(data, "f.jsonl", dialect, wire)
    assert [o.message.line for o in outs] == [1, 2, 4, 5]
    assert codes(outs) == ["NOT_JSON", "TRUNCATED_JSON"]
    assert len(events(outs)) == 2


@pytest.mark.parametrize("dialect", ["auto", "datastream"])
def test_a_byte_order_mark_is_accepted(dialect: str) -> None:
    bom = json_transport.BOM
    lines = bom + DS % b"1" + b"\n" + DS % b"2" + b"\n"
    outs = outcomes(lines, "f.jsonl", dialect)
    assert codes(outs) == [] and len(events(outs)) == 2
    assert outs[0].message.offset == 3
    for whole in (bom + DS % b"1", bom + b"[" + DS % b"1" + b"]"):
        outs = outcomes(whole, "f.json", dialect)
        assert codes(outs) == [] and len(events(outs)) == 1


@pytest.mark.parametrize("dialect", TARGETS)
@pytest.mark.parametrize("name", ["f.json", "f.avro", "f.csv", "f.pb", "f.jsonl"])
def test_an_empty_file_is_a_coded_rejection(dialect: str, name: str) -> None:
    outs = outcomes(b"", name, dialect)
    assert codes(outs) == ["EMPTY_FILE"]
    assert arrow_codes(outs) == ["EMPTY_FILE"]


def test_an_empty_resolved_file_is_still_a_cockroachdb_message() -> None:
    name = "202301020304050000000000000000000.RESOLVED"
    outs = outcomes(b"", name, "cockroachdb")
    assert codes(outs) == [] and events(outs)[0]["operation"] == "RESOLVED"


def test_an_empty_file_in_bulk_mode_is_rejected_too() -> None:
    from cdcflow.decode.batches import decode_files

    pa = pytest.importorskip("pyarrow")
    batch = pa.RecordBatch.from_pydict(
        {"path": ["a.jsonl", "b.jsonl"], "content": [b"", DS % b"1"]}
    )
    out = list(decode_files(iter([batch]), "datastream", DialectOptions()))
    rows = [r for b in out for r in b.to_pylist()]
    assert [(r["origin"], r["error_code"]) for r in rows] == [
        ("a.jsonl", "EMPTY_FILE"),
        ("b.jsonl", None),
    ]


def test_array_elements_keep_their_bytes_without_a_copy_per_element() -> None:
    # each element used to cost ~4 KiB through a re-serialised copy
    body = b"[" + b",".join([b"[]"] * 200_000) + b"]"
    tracemalloc.start()
    try:
        count = 0
        for framed in json_transport.split(body, "f.json"):
            assert isinstance(framed, RawMessage)
            count += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 200_000
    assert peak < 3 * len(body)


def test_every_limit_is_documented_with_its_default() -> None:
    from dataclasses import fields
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    for f in fields(Limits):
        default = getattr(LIMITS, f.name)
        assert f"| `{f.name}` | {default:,} |" in doc, f.name


@pytest.mark.parametrize("value", ["9" * 5000, 2**5000, Decimal("1e5000")])
def test_3_integers_of_any_size_are_value_type_errors(value: Any) -> None:
    from cdcflow.types import ValueTypeError, convert, wire_value

    for fn in (convert, wire_value):
        with pytest.raises(ValueTypeError, match="does not fit 64 bits"):
            fn(value, "bigint")


def test_avro_epoch_milliseconds_out_of_range_are_bad_timestamp() -> None:
    import io

    import fastavro

    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "stream_name", "type": "string"},
            {"name": "read_method", "type": "string"},
            {"name": "object", "type": "string"},
            {"name": "uuid", "type": "string"},
            # the logical type on the field: early Datastream files, longs read as millis
            {"name": "read_timestamp", "type": "long", "logicalType": "timestamp-millis"},
            {"name": "source_timestamp", "type": "long", "logicalType": "timestamp-millis"},
            {"name": "payload", "type": {"type": "map", "values": "string"}},
        ],
    }
    record = {
        "stream_name": "s",
        "read_method": "oracle-backfill",
        "object": "HR_T",
        "uuid": "u",
        "read_timestamp": 2**62,
        "source_timestamp": 0,
        "payload": {"id": "1"},
    }
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), [record])
    assert codes(outcomes(out.getvalue(), "f.avro", "datastream")) == ["BAD_TIMESTAMP"]


@pytest.mark.parametrize(
    "text",
    ["2025-01-01T00:00:00+99:00", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:00"],
)
def test_timestamps_out_of_range_after_their_offset_are_value_type_errors(text: str) -> None:
    from cdcflow.types import ValueTypeError, parse_timestamp

    with pytest.raises(ValueTypeError):
        parse_timestamp(text)


def test_protobuf_timestamp_out_of_range_is_bad_timestamp() -> None:
    from cdcflow.dialects.savegress.proto import event_to_proto
    from cdcflow.proto import savegress_pb2 as pb
    from cdcflow.transports.protobuf import write_delimited

    event = {"id": "e", "source": "postgres", "table": "t", "operation": "INSERT"}
    proto = pb.CDCEvent()
    proto.ParseFromString(event_to_proto({**event, "timestamp": "2025-01-01T00:00:00Z"}))
    proto.timestamp.seconds = 2**62
    data = write_delimited([proto.SerializeToString()])
    for dialect in ("savegress", "auto"):
        assert codes(outcomes(data, "f.pb", dialect)) == ["BAD_TIMESTAMP"]
