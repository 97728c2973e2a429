"""Kafka records read in bulk (the workers' fast lane for plain JSON values) give exactly the
rows of the row decoder, which stays the reference: the same events, coordinates and
metadata, every record decoded once, whatever else the batch holds. No Spark: the workers'
function is called on Arrow batches shaped like Spark's Kafka source."""

from __future__ import annotations

import datetime as dt
import os
import zlib
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.decode import batches as decode_batches
from cdcflow.decode.batches import decode_records
from cdcflow.decode.columns import arrow_schema
from cdcflow.decode.decoder import Decoder, Outcome
from cdcflow.dialects import kafka_delivery, renderer_features
from cdcflow.dialects.model import DialectOptions
from cdcflow.simulation.workload import generate
from tests.kafka_shaped import KAFKA_ARROW
from tests.test_bulk import EVENTS, _line

_EPOCH = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
_OPTIONS = DialectOptions(
    table_keys={"items": ("id",)},
    column_types={"items": {"price": "numeric(10,2)", "updated_at": "timestamptz"}},
)


def _batch(records: list[dict[str, Any]], schema: pa.Schema = KAFKA_ARROW) -> pa.RecordBatch:
    """Records (any of Spark's Kafka columns; absent ones null) as one Arrow batch."""
    return pa.RecordBatch.from_pylist(records, schema=schema)


def _rows(batches: list[pa.RecordBatch], options: DialectOptions, bulk: bool) -> list[Any]:
    """The decoded rows, sorted; row images, keys and types as sorted pairs (the bulk reader
    orders a map's entries as the columns of all the lines read, not as one line's JSON),
    ``metadata`` in its order."""
    out = decode_records(iter(batches), "savegress", options, bulk=bulk)
    rows = pa.Table.from_batches(list(out), arrow_schema()).to_pylist()
    for r in rows:
        for m in ("key", "before", "after", "types"):
            if r[m] is not None:
                r[m] = sorted(r[m])
    return sorted(rows, key=repr)


@pytest.fixture
def one_by_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A count of the records the row decoder decodes."""
    calls = [0]
    record = decode_batches._record

    def counted(*args: Any) -> Outcome:
        calls[0] += 1
        return record(*args)

    monkeypatch.setattr(decode_batches, "_record", counted)
    yield calls


def _same(batches: list[pa.RecordBatch], options: DialectOptions, calls: list[int]) -> int:
    """Rows in bulk == rows one by one; the number of records read in bulk."""
    rows = sum(b.num_rows for b in batches)
    calls[0] = 0
    bulk = _rows(batches, options, True)
    one_by_one = calls[0]
    assert bulk == _rows(batches, options, False)
    return rows - one_by_one


def _event(i: int, table: str = "items", **changed: Any) -> dict[str, Any]:
    """A plain savegress event (the bench's shape)."""
    image = {
        "id": i,
        "name": f"item-{i}",
        "qty": i % 7,
        "price": f"{i}.50",
        "updated_at": "2025-01-15T10:30:00.123456Z",
    }
    doc: dict[str, Any] = {
        "id": f"e{i}",
        "operation": "DELETE" if i % 5 == 0 else "UPDATE" if i % 2 else "INSERT",
        "table": table,
        "source": "postgres",
        "timestamp": "2025-01-15T10:30:00Z",
        "position": {"lsn": f"0/{i + 16:X}", "sequence": i % 3},
    }
    doc["before" if doc["operation"] == "DELETE" else "after"] = image
    doc.update(changed)
    return doc


def _record(value: bytes | None, offset: int, partition: int = 0, **fields: Any) -> dict[str, Any]:
    """A record of topic ``cdc.items``."""
    return {
        "key": b"items:1",
        "value": value,
        "topic": "cdc.items",
        "partition": partition,
        "offset": offset,
        "timestamp": _EPOCH + dt.timedelta(milliseconds=offset),
        "timestampType": 0,
        "headers": None,
        **fields,
    }


#: Records the bulk path must leave to the row decoder, or read as it does.
_LEFT_OUT: list[dict[str, Any]] = [
    _record(None, 9001),  # a tombstone
    _record(b"", 9002),  # an empty value
    _record(b"\x00\x00\x00\x00\x07" + orjson.dumps(_event(3)), 9003),  # Confluent-framed
    _record(orjson.dumps(_event(4), option=orjson.OPT_INDENT_2), 9004),  # pretty-printed
    _record(orjson.dumps(_event(5)) + b"\r", 9005),  # a carriage return
    _record(b" " + orjson.dumps(_event(8)), 9008),  # a space first
    _record(b"[" + orjson.dumps(_event(9)) + b"]", 9009),  # a batch of one
    _record(  # savegress headers: the event id and timestamp come from them
        orjson.dumps({k: v for k, v in _event(10).items() if k not in ("id", "timestamp")}),
        9010,
        headers=[
            {"key": "savegress-event-id", "value": b"h-10"},
            {"key": "Savegress-Timestamp", "value": b"1700000000000"},
        ],
    ),
    _record(orjson.dumps(_event(11)), 9011, headers=[{"key": "traceparent", "value": b"00"}]),
    _record(orjson.dumps(_event(12)), 9012, key=None),  # no key
    _record(orjson.dumps(_event(13)), 9013, key=b""),  # an empty key
    _record(orjson.dumps(_event(14)), 9014, key=b"\x00\x00\x00\x00\x01\x02"),  # Confluent key
    _record(orjson.dumps(_event(15)), 9015, key=b"items:\xff"),  # a key that is not UTF-8
    _record(orjson.dumps(_event(16, schema=None)), 9016),  # a null in the JSON
    _record(orjson.dumps(_event(17, after={"id": 17, "name": None})), 9017),  # a null value
    _record(orjson.dumps(_event(20, operation="BEGIN")), 9020),  # a marker
    _record(orjson.dumps(_event(21)), 9021, topic=None, partition=None),  # no origin
    _record(orjson.dumps(_event(22)), 9022, timestamp=None),
    {"value": orjson.dumps(_event(23))},  # a bare message
    {"value": orjson.dumps(_event(24)), "key": b""},  # a bare message too
]
#: Records that make the bulk reader refuse all the records read with them.
_SPOILERS: list[dict[str, Any]] = [
    _record(b'{"operation": "INSERT", "table": ', 9006),  # invalid JSON
    _record(b"{\xff\xfe}", 9007),  # not UTF-8
    _record(orjson.dumps(_event(18, ddl_command="ALTER TABLE items ADD COLUMN x int")), 9018),
    _record(orjson.dumps({"topic": "t", "key": "k", "value": _event(19)}), 9019),  # wrapped
    _record(orjson.dumps(_event(25, after={"id": "x", "name": "y"})), 9025),  # id as text
    _record(orjson.dumps(_event(26, metadata={"database": "db"})), 9026),  # another field
]
_ODD = [*_LEFT_OUT, *_SPOILERS]


def _delivered(seed: int, strip_headers: bool) -> tuple[list[dict[str, Any]], DialectOptions]:
    """A savegress workload as its producer delivers it to Kafka (faults: records twice, a
    run sent again), as records of Spark's Kafka source, and the options to decode it;
    ``strip_headers``: every other record without its ``savegress-*`` headers (as a producer
    that sends none)."""
    w = generate(seed, tables=3, transactions=40, features=renderer_features("savegress"))
    sent = kafka_delivery("savegress", w, seed=seed, faults=True)
    offsets: dict[tuple[str, int], int] = {}
    records = []
    for i, r in enumerate(sent.records):
        partition = zlib.crc32(r.key or b"") % 3 if r.partition is None else r.partition
        offset = offsets.get((r.topic, partition), 0)
        offsets[(r.topic, partition)] = offset + 1
        headers = [{"key": k, "value": v} for k, v in r.headers]
        records.append(
            {
                "key": r.key,
                "value": r.value,
                "topic": r.topic,
                "partition": partition,
                "offset": offset,
                "timestamp": _EPOCH + dt.timedelta(milliseconds=i),
                "timestampType": 0,
                "headers": None if strip_headers and i % 2 else headers,
            }
        )
    return records, sent.options


def _by_partition(records: list[dict[str, Any]]) -> list[pa.RecordBatch]:
    """Records as Spark's Kafka source gives them: a batch per topic partition."""
    found: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for r in records:
        found.setdefault((r.get("topic"), r.get("partition")), []).append(r)
    return [_batch(rs) for rs in found.values()]


def test_a_delivered_workload_with_odd_records_reads_in_bulk_as_one_by_one(
    one_by_one: list[int],
) -> None:
    """The workload's own events (which the bulk reader mostly leaves to the row decoder),
    plain events of another topic and odd records; in one batch, and a batch per topic
    partition."""
    records, given = _delivered(7, strip_headers=True)
    options = DialectOptions(
        table_keys={**given.table_keys, **_OPTIONS.table_keys},
        column_types={**given.column_types, **_OPTIONS.column_types},
    )
    plain = [_record(orjson.dumps(_event(i)), 500 + i, i % 3) for i in range(1, 81)]
    mixed = [*records[:100], *plain[:40], *_ODD, *records[100:], *plain[40:]]
    _same([_batch(mixed)], options, one_by_one)
    # the odd records' partition (0) is left to the row decoder, the others read in bulk
    read = _same(_by_partition(mixed), options, one_by_one)
    assert read >= sum(1 for r in plain if r["partition"] != 0)
    # with every header kept, the row decoder reads every record of the workload
    records, options = _delivered(7, strip_headers=False)
    assert _same(_by_partition(records), options, one_by_one) == 0


def test_odd_records_among_plain_ones_read_in_bulk_as_one_by_one(one_by_one: list[int]) -> None:
    plain = [_record(orjson.dumps(_event(i)), i, i % 2) for i in range(40)]
    read = _same([_batch(plain[:20] + _LEFT_OUT + plain[20:])], _OPTIONS, one_by_one)
    assert read >= 40
    _same([_batch(plain[:20] + _ODD + plain[20:])], _OPTIONS, one_by_one)


def test_plain_records_keep_their_coordinates_and_lineage(one_by_one: list[int]) -> None:
    records = [
        _record(orjson.dumps(_event(i)), 100 + i, i % 3, key=f"items:{i}".encode())
        for i in range(1, 61)
    ]
    out = list(decode_records(iter([_batch(records)]), "savegress", _OPTIONS, max_rows=25))
    assert one_by_one[0] == 0  # every record read in bulk
    assert max(b.num_rows for b in out) <= 25
    rows = {r["id"]: r for r in pa.Table.from_batches(out).to_pylist()}
    assert len(rows) == len(records)
    for i in (1, 2, 30, 60):
        row = rows[f"e{i}"]
        assert row["origin"] == f"kafka://cdc.items/{i % 3}"
        assert (row["offset"], row["line"], row["item"]) == (100 + i, None, 0)
        assert row["error_code"] is None
        assert row["metadata"] == [
            ("kafka_topic", "cdc.items"),
            ("kafka_partition", str(i % 3)),
            ("kafka_offset", str(100 + i)),
            ("kafka_timestamp", str(int(_EPOCH.timestamp()) * 1000 + 100 + i)),
            ("kafka_key", f"items:{i}"),
        ]
    assert _same([_batch(records)], _OPTIONS, one_by_one) == len(records)


def test_bare_messages_read_in_bulk_as_one_by_one(one_by_one: list[int]) -> None:
    """Rows of one binary column (a DataFrame of messages): no coordinates, no lineage."""
    only = pa.schema([("value", pa.binary())])
    messages = [{"value": orjson.dumps(_event(i))} for i in range(1, 30)]
    assert _same([_batch(messages, only)], _OPTIONS, one_by_one) == len(messages)
    rows = _rows([_batch(messages, only)], _OPTIONS, True)
    assert {(r["origin"], r["offset"], r["line"], r["item"]) for r in rows} == {(None, 0, None, 0)}
    assert {tuple(r["metadata"]) for r in rows} == {()}


def test_one_odd_record_does_not_leave_a_batch_to_the_row_decoder(
    one_by_one: list[int],
) -> None:
    plain = [_record(orjson.dumps(_event(i)), i) for i in range(1, 1201)]
    for odd in _SPOILERS:
        records = [*plain[:700], odd, *plain[700:]]
        assert _same([_batch(records)], _OPTIONS, one_by_one) > 900


def test_a_field_seen_once_does_not_stop_reading_in_bulk() -> None:
    """The bulk reader keeps the fields of what it read (a DDL event's ``ddl_command``):
    lines without them are still read in bulk afterwards, from files as from records."""
    decoder = Decoder("savegress", _OPTIONS, wire=True)
    plain = b"\n".join(orjson.dumps(_event(i)) for i in range(1, 11))
    ddl = orjson.dumps(_event(11, ddl_command="ALTER TABLE items ADD COLUMN x int"))
    assert decoder.bulk(plain + b"\n" + ddl, "a.jsonl") is None
    found = decoder.bulk(plain, "b.jsonl")
    assert found is not None and len(found.rows) == 10


def test_columns_of_other_types_are_read_one_by_one(one_by_one: list[int]) -> None:
    schema = pa.schema([("value", pa.binary()), ("partition", pa.string())])
    records = [{"value": orjson.dumps(_event(i)), "partition": "0"} for i in range(5)]
    assert _same([_batch(records, schema)], _OPTIONS, one_by_one) == 0


# ---------------------------------------------------------------- generated records

#: Headers of generated records (mostly none).
_HEADERS = [
    *[None] * 6,
    [],
    [{"key": "traceparent", "value": b"00-1"}],
    [{"key": None, "value": b"x"}],
    [{"key": "savegress-event-id", "value": b"h1"}],
    [{"key": "SAVEGRESS-TIMESTAMP", "value": b"1700000000000"}],
    [{"key": "savegress-table", "value": None}],
]


@st.composite
def _value(draw: st.DrawFn, noisy: bool) -> bytes | None:
    """A generated event's line (changed in a few places), or, when ``noisy``, now and then
    random bytes, a brace and random bytes, or an odd value."""
    kind = draw(st.sampled_from(["line"] * 7 + (["bytes", "braced", "odd"] if noisy else [])))
    if kind == "line":
        return _line(draw(EVENTS), draw(st.booleans()))
    if kind == "bytes":
        return draw(st.one_of(st.none(), st.binary(max_size=30)))
    if kind == "braced":
        return b"{" + draw(st.binary(max_size=30))
    return draw(
        st.sampled_from(
            [
                orjson.dumps(_event(1), option=orjson.OPT_INDENT_2),
                orjson.dumps(_event(2)) + b"\r",
                b"\x00\x00\x00\x00\x01{}",
                b'{"a": 1} {"b": 2}',
                b'{"operation": "INSERT", "operation": "DELETE"}',
                orjson.dumps({"key": "k", "value": _event(3)}),
                orjson.dumps(_event(4, table=7)),
            ]
        )
    )


@st.composite
def _records(draw: st.DrawFn, noisy: bool) -> dict[str, Any]:
    """A generated record: a value of :func:`_value`, any key, coordinates and headers."""
    stamp = draw(st.one_of(st.none(), st.integers(-(10**12), 4 * 10**12)))
    return {
        "value": draw(_value(noisy)),
        "key": draw(
            st.sampled_from([None, b"items:1", b"items:2", b"", b"\x00\x00\x00\x00\x01", b"\xff"])
        ),
        "topic": draw(st.sampled_from([None, "t", "cdc.items"])),
        "partition": draw(st.sampled_from([None, 0, 2])),
        "offset": draw(st.one_of(st.none(), st.integers(0, 2**40))),
        "timestamp": None if stamp is None else _EPOCH + dt.timedelta(microseconds=stamp),
        "timestampType": 0,
        "headers": draw(st.sampled_from(_HEADERS)),
    }


@settings(
    max_examples=int(os.environ.get("CDCFLOW_BULK_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    records=st.booleans().flatmap(lambda noisy: st.lists(_records(noisy), max_size=12)),
    keys=st.sampled_from([{}, {"items": ("id",)}, {"items": ("id", "name")}]),
    types=st.sampled_from(
        [{}, {"items": {"price": "numeric(10,2)", "at": "timestamptz", "id": "integer"}}]
    ),
)
def test_generated_records_read_in_bulk_as_one_by_one(
    records: list[dict[str, Any]], keys: Any, types: Any, one_by_one: list[int]
) -> None:
    _same([_batch(records)], DialectOptions(table_keys=keys, column_types=types), one_by_one)
