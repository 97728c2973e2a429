"""Fuzzing kit: seed messages per dialect (conformance samples and renderer output) and
hypothesis strategies that mutate them, with the property every decoder keeps: any input ends
in events or coded rejections, never an exception and never ``DECODER_ERROR``.

``make fuzz`` runs the long version (``CDCFLOW_FUZZ_EXAMPLES``, default 10,000 per target) and
prints what it ran.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st

from cdcflow.decode.columns import Columns
from cdcflow.decode.decoder import DECODER_ERROR, Decoder
from cdcflow.decode.segments import SegmentBuffer
from cdcflow.dialects import dialect_names, renderer, renderer_features
from cdcflow.simulation.workload import generate
from cdcflow.types import json_bytes

_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CDCFLOW_SHARED", _ROOT.parent / "shared"))

#: Conformance folders (and file-name prefixes) holding each dialect's samples.
_CONFORMANCE: dict[str, tuple[str, str]] = {
    "cockroachdb": ("cockroachdb", ""),
    "datastream": ("datastream", ""),
    "sqlserver_ces": ("sqlserver_ces", ""),
    "savegress": ("other", "savegress_"),
}

#: Fuzz targets: every dialect, and detection.
TARGETS = [*dialect_names(), "auto"]

#: Values that have broken decoders: deep nesting, numbers beyond every range, wrong types.
HOSTILE: list[Any] = [
    None,
    {},
    [],
    "",
    0,
    -1,
    True,
    1e38,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    23456678901234567890,
    5 * 10**7,
    "x" * 5000,
    "1.0e999999999",
    "9" * 5000,
    "2025-13-45T99:99:99Z",
    "\x00\ud7ff",
    {"a": {"b": {"c": [1, [2, [3]]]}}},
]

#: Raw fragments spliced into messages (JSON that orjson reads but other code may not).
FRAGMENTS: list[bytes] = [
    b"[" * 300 + b"]" * 300,
    b"{" + b'"a":{' * 200 + b"}" * 201,
    b"1.0e999999999",
    b"1.0e-999999999",
    b"9" * 5000,
    b"18446744073709551615",
    b"23456678901234567890",
    b"-0.0",
    b'"\\ud800"',
    b"\xef\xbb\xbf",
    b"\r",
    b"\x00",
    b"\xff\xfe",
]


def seed_files(dialect: str) -> list[tuple[str, bytes]]:
    """(file name, bytes) of a dialect's conformance samples and rendered files (``auto``:
    every dialect's)."""
    if dialect == "auto":
        return [f for d in dialect_names() for f in seed_files(d)]
    seeds = [*_conformance(dialect), *_rendered(dialect)]
    if dialect == "savegress":
        seeds.append(_protobuf_seed())
    return seeds


def _protobuf_seed() -> tuple[str, bytes]:
    """A length-delimited protobuf file of two unified-format events."""
    from cdcflow.dialects.savegress.proto import event_to_proto
    from cdcflow.transports.protobuf import write_delimited

    event = {
        "id": "evt-1",
        "source": "postgres",
        "schema": "public",
        "table": "users",
        "operation": "UPDATE",
        "timestamp": "2025-01-15T10:30:00.123456Z",
        "position": {"lsn": "0/1234ABCD", "sequence": 42},
        "before": {"id": 1, "name": "a", "tags": ["x", None]},
        "after": {"id": 1, "name": "b", "ok": True, "score": 0.25},
        "metadata": {"database": "production"},
    }
    delete = {**event, "id": "evt-2", "operation": "DELETE", "after": None}
    protos = [event_to_proto(event), event_to_proto(delete)]
    return "events.pb", write_delimited(protos)


@functools.cache
def _conformance(dialect: str) -> tuple[tuple[str, bytes], ...]:
    folder, prefix = _CONFORMANCE.get(dialect, (dialect, ""))
    where = SHARED / "conformance" / folder
    if not where.is_dir():
        return ()
    return tuple(
        (p.name, p.read_bytes())
        for p in sorted(where.iterdir())
        if p.is_file() and p.name.startswith(prefix) and p.stat().st_size < 200_000
    )


@functools.cache
def _rendered(dialect: str) -> tuple[tuple[str, bytes], ...]:
    workload = generate(7, transactions=12, features=renderer_features(dialect))
    with tempfile.TemporaryDirectory() as tmp:
        renderer(dialect)(workload, Path(tmp), seed=7, faults=True)
        return tuple(
            (p.name, p.read_bytes())
            for p in sorted(Path(tmp).rglob("*"))
            if p.is_file() and p.stat().st_size < 200_000
        )


def _replace_values(doc: Any, draw: Any) -> Any:
    """The document with some values (anywhere inside it) replaced by hostile ones."""
    if isinstance(doc, dict):
        return {
            k: (
                draw(st.sampled_from(HOSTILE))
                if draw(st.integers(0, 5)) == 0
                else _replace_values(v, draw)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_replace_values(v, draw) for v in doc]
    return doc


@st.composite
def mutated(draw: Any, dialect: str) -> tuple[str, bytes]:
    """A seed file of the dialect, mutated: values replaced by hostile ones, fragments spliced
    in, bytes flipped, cut or repeated, lines shuffled."""
    name, data = draw(st.sampled_from(seed_files(dialect)))
    how = draw(st.sampled_from(["values", "splice", "bytes", "cut", "lines", "wrap"]))
    if how == "values":
        lines = data.split(b"\n")
        i = draw(st.integers(0, len(lines) - 1))
        try:
            doc = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                how = "splice"
            else:
                data = json_bytes(_replace_values(doc, draw))
        else:
            lines[i] = json_bytes(_replace_values(doc, draw))
            data = b"\n".join(lines)
    if how == "splice":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(FRAGMENTS)) + data[at:]
    elif how == "bytes":
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            if buf:
                buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        data = bytes(buf)
    elif how == "cut":
        a = draw(st.integers(0, len(data)))
        b = draw(st.integers(a, len(data)))
        data = data[:a] + data[b:] * draw(st.integers(0, 2))
    elif how == "lines":
        lines = data.split(b"\n")
        data = b"\n".join(draw(st.permutations(lines))[: draw(st.integers(0, len(lines)))])
    elif how == "wrap":
        depth = draw(st.sampled_from([1, 65, 256, 300]))
        data = b"[" * depth + data + b"]" * depth
    return name, data


@dataclass
class Tally:
    """What a fuzz run saw."""

    messages: int = 0
    files: int = 0
    events: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    largest: int = 0
    #: Trace each file's memory (slower); ``peak``: the highest traced peak of one file.
    trace: bool = False
    peak: int = 0
    peak_size: int = 0


def check(dialect: str, name: str, data: bytes, wire: bool, tally: Tally | None = None) -> None:
    """Decode one file as the Spark workers (``wire``) or ``inspect``/the receiver do, build
    its Arrow batch, judge its split messages: every message ends in events or coded
    rejections, none a ``DECODER_ERROR``."""
    traced = tally is not None and tally.trace
    if traced:
        tracemalloc.start()
    try:
        _check(dialect, name, data, wire, tally)
    finally:
        if traced:
            assert tally is not None
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if peak > tally.peak:
                tally.peak, tally.peak_size = peak, len(data)
            assert peak <= MEMORY_BOUND + MEMORY_PER_BYTE * len(data), (name, peak, len(data))


#: What decoding one file may allocate at its peak: a fixed part (decoder, dialect tables,
#: an Arrow batch) and a part proportional to the file.
MEMORY_BOUND = 8 << 20
MEMORY_PER_BYTE = 64


def _check(dialect: str, name: str, data: bytes, wire: bool, tally: Tally | None) -> None:
    started = time.perf_counter()
    decoder = Decoder(dialect, wire=wire)
    cols = Columns(wire=True) if wire else None
    segments = SegmentBuffer()
    outcomes = list(decoder.decode_file(data, name))
    for o in outcomes:
        for r in o.rejections:
            assert r.code != DECODER_ERROR, f"{name}: {r.message}"
            if tally is not None:
                tally.rejections[r.code] = tally.rejections.get(r.code, 0) + 1
        for seg in o.segments:
            segments.add(seg, name, o.message.offset, o.message.line)
        if cols is not None:
            cols.add_outcome(o)
    if cols is not None:
        batch = cols.to_batch()
        codes = batch.column("error_code").to_pylist()
        assert DECODER_ERROR not in codes, f"{name}: a row Arrow could not take"
    for d, _, verdict in segments.verdicts(lambda d, ps: decoder.reassembles(d, ps)):
        if verdict.status == "complete":
            out = decoder.decode_segments(d, [p.raw for p in verdict.pieces], name)
            assert all(r.code != DECODER_ERROR for r in out.rejections), out.rejections
    if tally is not None:
        tally.files += 1
        tally.messages += len(outcomes)
        tally.events += sum(len(o.events) for o in outcomes)
        tally.slowest = max(tally.slowest, time.perf_counter() - started)
        tally.largest = max(tally.largest, len(data))


# ---------------------------------------------------------------------- position fields

#: The sequence encoder's limit: integers below it in size encode, from it on they do not.
POSITION_LIMIT = 10**99
#: Integers JSON read without exact numbers (orjson) keeps: past them it gives a float.
FLOAT_FROM = 2**64


@dataclass(frozen=True)
class PositionField:
    """One position field of a dialect's message: where it is (``path``; ``"@json"`` reads
    the string there as JSON), how its number is written (``int`` a JSON number, ``text``
    digits in ``template``, ``hex`` hexadecimal digits), the largest numbers the dialect
    orders (``limit``: the encoder's, the 64 bits of a dialect reading JSON numbers as orjson
    does, or the dialect's own) and what a rejection of a number past it says (any of
    ``names``)."""

    dialect: str
    doc: dict[str, Any]
    path: tuple[str | int, ...]
    names: tuple[str, ...]
    kind: str = "int"
    template: str = "{}"
    limit: int = POSITION_LIMIT
    origin: str = "positions.json"


def _ces(transaction: bool) -> dict[str, Any]:
    source: dict[str, Any] = {
        "db": "shop",
        "schema": "dbo",
        "tbl": "orders",
        "cols": [{"name": "id", "type": "int", "index": 0}],
        "pkkey": [{"columnname": "id", "value": "1"}],
    }
    if transaction:
        source["transaction"] = {"commitlsn": "000000B1:000008A8:0007", "sequencenumber": 1}
    data = {"eventsource": source, "eventrow": {"old": "{}", "current": '{"id": "1"}'}}
    return {
        "specversion": "1.0",
        "type": "com.microsoft.SQL.CES.DML.V1",
        "source": "/",
        "id": "e1",
        "logicalid": "1bf2756a-c15f-4d2e-a2d5-7d3f9dbf85b0:000000B1000008A80007:1",
        "time": "2026-08-07T16:25:00.890Z",
        "datacontenttype": "application/json",
        "operation": "INS",
        "data": json.dumps(data),
    }


def _debezium(connector: str, **source: Any) -> dict[str, Any]:
    where = {"connector": connector, "db": "shop", "schema": "public", "table": "orders"}
    return {"op": "c", "before": None, "after": {"id": 1}, "source": {**where, **source}}


def _savegress(position: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "e1",
        "source": "postgres",
        "schema": "public",
        "table": "orders",
        "timestamp": "2025-01-01T00:00:00Z",
        "operation": "INSERT",
        "after": {"id": 1},
        "position": position,
    }


def _datastream(sort_keys: list[Any] | None = None, **meta: Any) -> dict[str, Any]:
    doc = {
        "uuid": "8546a123-e6bc-49ca-b0c4-249000010000",
        "read_timestamp": "2021-05-16T01:13:01.000Z",
        "source_timestamp": "2021-05-16T01:13:01.000Z",
        "object": "accounts",
        "read_method": "mysql-cdc-binlog",
        "source_metadata": {"table": "accounts", "database": "d", "primary_keys": ["id"], **meta},
        "payload": {"id": 1},
    }
    return doc if sort_keys is None else {**doc, "sort_keys": sort_keys}


def _field(dialect: str, doc: dict[str, Any], path: str, *names: str, **kw: Any) -> PositionField:
    steps = tuple(int(p) if p.isdigit() else p for p in path.split("."))
    return PositionField(dialect, doc, steps, names or (path,), **kw)


_MYSQL = _debezium("mysql", file="mysql-bin.000003", pos=154, row=0)
_PG_SEQUENCE = _debezium("postgresql", lsn=100, sequence='["90","100"]')
_SQLSERVER = _debezium(
    "sqlserver",
    change_lsn="00000027:00000758:0005",
    commit_lsn="00000027:00000758:0005",
    event_serial_no=1,
)
_ORACLE = _debezium("oracle", scn="1234", commit_scn="1234", ssn=0)
_DB2 = _debezium("db2", change_lsn="00000000:0000:0001", commit_lsn="00000000:0000:0001")
_SG_PG = _savegress({"lsn": "0/1A5D", "sequence": 1})
_SG_MYSQL = _savegress({"file": "mysql-bin.000001", "position": 12345})
_SG_MONGODB = _savegress({"cluster_time": {"t": 1234567890, "i": 1}})
_DS_MYSQL = _datastream(log_file="mysql-bin.000002", log_position=28460861)
_DS_SORTED = _datastream([1735689600993, "mysql-bin.000001", 6749010])
_CRDB = {"after": {"id": 1}, "key": [1], "updated": "1735689600993908017.0000000000"}
_CRDB_FILE = "202501010000009939080170000000000-46f2d5e700000007-1-7-00000001-orders-1.ndjson"

#: Every dialect's position fields the sequence encoder reads numbers from.
POSITION_FIELDS: list[PositionField] = [
    _field("debezium", _MYSQL, "source.row"),
    _field("debezium", _MYSQL, "source.pos"),
    _field("debezium", _MYSQL, "source.file", kind="text", template="mysql-bin.{}"),
    _field("debezium", _debezium("postgresql", lsn=100), "source.lsn"),
    _field("debezium", _PG_SEQUENCE, "source.sequence", kind="text", template='["{}","100"]'),
    _field("debezium", _SQLSERVER, "source.event_serial_no"),
    _field("debezium", _ORACLE, "source.scn", kind="text"),
    _field("debezium", _ORACLE, "source.ssn"),
    _field("debezium", _DB2, "source.commit_lsn", kind="hex"),
    _field("savegress", _SG_PG, "position.sequence", limit=FLOAT_FROM),
    _field(
        "savegress",
        _SG_MYSQL,
        "position.position",
        "position.position",
        "binlog position",
        limit=FLOAT_FROM,
    ),
    _field("savegress", _SG_MYSQL, "position.file", kind="text", template="bin.{}"),
    _field("savegress", _SG_MONGODB, "position.cluster_time.t", "cluster_time t", limit=FLOAT_FROM),
    _field("savegress", _SG_MONGODB, "position.cluster_time.i", "cluster_time i", limit=FLOAT_FROM),
    _field(
        "sqlserver_ces",
        _ces(transaction=True),
        "data.@json.eventsource.transaction.sequencenumber",
        "transaction.sequencenumber",
        limit=FLOAT_FROM,
    ),
    _field(
        "sqlserver_ces",
        _ces(transaction=False),
        "logicalid",
        kind="text",
        template="1bf2756a-c15f-4d2e-a2d5-7d3f9dbf85b0:000000B1000008A80007:{}",
    ),
    # an HLC's wall time is a commit time: before the year 10000
    _field(
        "cockroachdb",
        _CRDB,
        "updated",
        "updated",
        "HLC wall time",
        kind="text",
        template="{}.0000000001",
        limit=253402300800 * 10**9,
        origin=_CRDB_FILE,
    ),
    _field(
        "datastream",
        _DS_MYSQL,
        "source_metadata.log_position",
        "source_metadata.log_position",
        "binlog position",
        limit=FLOAT_FROM,
    ),
    _field(
        "datastream", _DS_MYSQL, "source_metadata.log_file", kind="text", template="mysql-bin.{}"
    ),
    _field("datastream", _DS_SORTED, "sort_keys.2", "sort_keys[2]", "sort key", limit=FLOAT_FROM),
    _field("datastream", _DS_SORTED, "sort_keys.0", "sort_keys[0]", "sort key", limit=FLOAT_FROM),
]


def _at(doc: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A copy of ``doc`` with ``value`` at ``path``."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if head == "@json":
        return json.dumps(_at(json.loads(doc), rest, value))
    copy = list(doc) if isinstance(doc, list) else dict(doc)
    copy[head] = _at(doc[head], rest, value)  # type: ignore[index]
    return copy


@st.composite
def position_values(draw: Any) -> tuple[PositionField, int, bytes]:
    """A position field, a number at, near or past the limits that matter to it (written as
    the field writes numbers: a JSON integer or float, digits in text) and the message
    carrying it."""
    spot = draw(st.sampled_from(POSITION_FIELDS))
    edges = [POSITION_LIMIT - 1, POSITION_LIMIT, FLOAT_FROM - 1, FLOAT_FROM, 10**100, 10**120]
    edges += [spot.limit - 1, spot.limit, 0]
    if spot.kind != "int":
        number = draw(st.one_of(st.sampled_from(edges), st.integers(0, 10**105)))
        digits = format(number, "x") if spot.kind == "hex" else str(number)
        value: Any = spot.template.format(digits)
    elif draw(st.booleans()):
        value = number = draw(
            st.one_of(
                st.sampled_from(edges + [-n for n in edges]), st.integers(-(10**105), 10**105)
            )
        )
    else:
        # a float's JSON text (1e+99) is the integer an exact reader takes
        value = draw(st.sampled_from([1e98, 1e99, -1e99, 1e308, -1e308, 9.5e98]))
        number = int(Decimal(repr(value)))
    # the standard library writes integers of any size (orjson stops at 64 bits)
    return spot, number, json.dumps(_at(spot.doc, spot.path, value)).encode()
