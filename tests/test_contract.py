"""One contract suite over every registered dialect: a new dialect is put through it by
registering itself and its renderer.

What every dialect must do is tested here once: registration and documentation, the
capabilities it declares (checked against its rendered messages), every transport that carries
it (JSON forms, Kafka records, Confluent-framed values, Avro files, Event Hubs Capture, and its
own), bad input and fuzzing (coded rejections, never an exception), render → decode round
trips and auto-detection.
"""

from __future__ import annotations

import base64
import importlib
import io
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.decode.decoder import Decoder
from cdcflow.decode.segments import SegmentBuffer
from cdcflow.dialects import (
    dialect_class,
    dialect_names,
    registered,
    renderer,
    renderer_event_operations,
    renderer_features,
    renderer_transport,
)
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.model import BASE_TRANSPORTS, Capabilities, DialectOptions, Envelope
from cdcflow.dialects.rendering import RenderResult
from cdcflow.event import ROW_OPERATIONS
from cdcflow.simulation.workload import Workload, generate
from cdcflow.transports import TRANSPORTS
from cdcflow.transports.eventhubs import CAPTURE_SCHEMA
from cdcflow.transports.json import dumps, loads_exact
from cdcflow.transports.message import KafkaCoordinates, RawMessage
from cdcflow.types import json_default
from tests.conftest_shared import SHARED, conformance_samples
from tests.dialect_harness import Decoded, DialectHarness
from tests.golden import GOLDEN_DIR

DIALECTS = dialect_names()
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- helpers


def _workload(name: str, seed: int = 21, transactions: int = 40) -> Workload:
    return generate(seed, transactions=transactions, features=renderer_features(name))


def _render(name: str, tmp: Path, faults: bool = False, seed: int = 21) -> tuple[Workload, Any]:
    w = _workload(name, seed)
    return w, renderer(name)(w, tmp, seed=seed, faults=faults)


def _decode(
    name: str, files: list[Path], options: DialectOptions, dialect: str | None = None
) -> Decoded:
    """A rendering's files in name order, decoded by one decoder."""
    return DialectHarness(name).decode_files(sorted(files), dialect, options)


def _same(e: dict[str, Any]) -> tuple[Any, ...]:
    """What must not change with the transport: the event without its coordinates."""
    meta = e["metadata"] or {}
    delivery = str(meta.get("sequence_source", "")).startswith("delivery")
    return (
        None if delivery else e["id"],
        e["operation"],
        e["table"],
        orjson.dumps(e["key"], default=str, option=orjson.OPT_SORT_KEYS),
        orjson.dumps(e["before"], default=str, option=orjson.OPT_SORT_KEYS),
        orjson.dumps(e["after"], default=str, option=orjson.OPT_SORT_KEYS),
        None if delivery else e["sequence"],
    )


_JSON_FILES = (".json", ".jsonl", ".ndjson")


def _json_files(res: Any) -> list[Path]:
    return sorted(f for f in res.files if f.suffix.lower() in _JSON_FILES)


def _messages(name: str, res: Any) -> Iterator[tuple[Path, RawMessage]]:
    """The messages of a rendering's JSON files, as their transport delivered them (Kafka
    records unwrapped), with their file."""
    decoder = Decoder(name, res.options)
    for f in _json_files(res):
        for framed in decoder.frame(f.read_bytes(), str(f)):
            assert isinstance(framed, RawMessage)
            yield f, decoder.carried(framed)


def _kafka_record(msg: RawMessage, offset: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "topic": msg.kafka.topic if msg.kafka else None,
        "partition": msg.kafka.partition if msg.kafka else None,
        "offset": offset,
        "value": msg.data.decode(),
    }
    if msg.key is not None:
        record["key"] = msg.key.decode()
    if msg.headers:
        record["headers"] = [{"key": k, "value": v.decode()} for k, v in msg.headers.items()]
    return record


# ---------------------------------------------------------------- registration and docs


@pytest.mark.parametrize("name", DIALECTS)
def test_registered_and_documented(name: str) -> None:
    """One registry line names the dialect's package: its decoder, renderer, Kafka form (when
    the producer writes to Kafka) and page; the package's docstring links the page."""
    parts = registered(name)
    cls = dialect_class(name)
    assert issubclass(cls, Dialect)
    assert cls.name == name
    package = f"cdcflow.dialects.{name}"
    assert cls.__module__ == f"{package}.dialect"
    render = importlib.import_module(parts.renderer)
    assert render.__name__.startswith(f"{package}.") and callable(render.render)
    if parts.kafka_form is not None:
        kafka = importlib.import_module(parts.kafka_form)
        assert kafka.__name__.startswith(f"{package}.") and callable(kafka.records)
        assert isinstance(kafka.PREFIX, str)
    module_doc = importlib.import_module(package).__doc__ or ""
    assert parts.docs == f"docs/dialects/{name}.md"
    assert parts.docs in module_doc, "the package docstring points at its docs"
    assert len(module_doc.splitlines()) <= 8, "the long description belongs in docs/dialects/"
    page = (ROOT / parts.docs).read_text()
    assert "Spec:" in page and "## Vendor → canonical" in page and "## Error codes" in page
    assert not re.search(r"\b(specs|conformance)/", page), "no references outside the repo"


def test_envelopes_name_their_handlers_and_one_table_decides() -> None:
    """An envelope whose handler is not a method fails at class creation; recognition and
    dispatch take the first envelope that matches."""
    with pytest.raises(TypeError, match="names no method"):

        class _Broken(Dialect):
            capabilities = Capabilities()
            envelopes = (Envelope("x", lambda d: True, "_missing"),)

    class _Two(Dialect):
        name = "two"
        capabilities = Capabilities()
        envelopes = (
            Envelope("first", lambda d: "a" in d, "_first", 0.9),
            Envelope("second", lambda d: "b" in d, "_second", lambda d: 0.5),
        )

        def _first(self, doc: Any, context: Any) -> Any:
            return {"envelope": "first"}

        def _second(self, doc: Any, context: Any) -> Any:
            return {"envelope": "second"}

    two = _Two()
    assert two.envelope_score({"a": 1, "b": 1}) == 0.9
    assert two.dispatch({"a": 1, "b": 1}, None) == {"envelope": "first"}
    assert two.envelope_score({"b": 1}) == 0.5
    assert two.dispatch({"b": 1}, None) == {"envelope": "second"}
    assert two.envelope_score({"c": 1}) == 0.0
    with pytest.raises(Exception, match="none of its shapes"):
        two.dispatch({"c": 1}, None)


@pytest.mark.parametrize("name", DIALECTS)
def test_has_goldens(name: str) -> None:
    assert list((GOLDEN_DIR / name).glob("*.jsonl")), f"no golden cases for {name}"


def test_a_dialect_must_declare_its_capabilities() -> None:
    with pytest.raises(TypeError, match="must declare its capabilities"):
        type("Nameless", (Dialect,), {"name": "x"})


# ---------------------------------------------------------------- capabilities


@pytest.mark.parametrize("name", DIALECTS)
def test_capabilities_are_declared_and_known(name: str) -> None:
    caps = dialect_class(name).__dict__["capabilities"]
    assert isinstance(caps, Capabilities)
    assert BASE_TRANSPORTS <= caps.transports <= TRANSPORTS
    own = caps.transports - BASE_TRANSPORTS
    if own:
        assert renderer_transport(name) is not None, f"{name} renders none of {sorted(own)}"


@pytest.mark.parametrize("name", DIALECTS)
def test_orders_events(name: str, tmp_path: Path) -> None:
    _, res = _render(name, tmp_path)
    events, rejections = _decode(name, res.files, res.options)
    assert not rejections
    delivered = [
        e
        for e in events
        if e["operation"] in ROW_OPERATIONS
        and str(e["metadata"].get("sequence_source", "")).startswith("delivery")
    ]
    if dialect_class(name).capabilities.orders_events:
        assert not delivered, delivered[:1]
    else:
        assert delivered


@pytest.mark.parametrize("name", DIALECTS)
def test_before_images(name: str, tmp_path: Path) -> None:
    _, res = _render(name, tmp_path)
    events, _ = _decode(name, res.files, res.options)
    updates = [e for e in events if e["operation"] == "UPDATE"]
    assert updates, "the rendering has updates"
    with_before = [e for e in updates if e["before"] is not None]
    if dialect_class(name).capabilities.before_images:
        assert with_before
    else:
        assert not with_before


@pytest.mark.parametrize("name", DIALECTS)
def test_keys_without_configured_names(name: str, tmp_path: Path) -> None:
    """Without configured keys nothing is rejected for missing key names: events whose
    message names no key carry ``key`` null (and ``metadata.key_values`` when it has values)."""
    _, res = _render(name, tmp_path)
    options = DialectOptions(column_types=res.options.column_types, extra=res.options.extra)
    events, rejections = _decode(name, res.files, options)
    assert not rejections, rejections[:3]
    rows = [e for e in events if e["operation"] in ROW_OPERATIONS]
    unnamed = [e for e in rows if e["key"] is None]
    if dialect_class(name).capabilities.names_keys:
        assert rows and not unnamed, unnamed[:1]
    for e in unnamed:
        values = e["metadata"].get("key_values")
        assert values is None or all(v is None or isinstance(v, str) for v in values)


@pytest.mark.parametrize("name", DIALECTS)
def test_types(name: str, tmp_path: Path) -> None:
    """Messages that carry types decode the same without declared types; others need them."""
    _, res = _render(name, tmp_path)
    declared, _ = _decode(name, res.files, res.options)
    options = DialectOptions(table_keys=res.options.table_keys, extra=res.options.extra)
    undeclared, rejections = _decode(name, res.files, options)
    assert not rejections
    differ = [
        a["types"] for a, b in zip(declared, undeclared, strict=True) if a["types"] != b["types"]
    ]
    if dialect_class(name).capabilities.carries_types:
        assert not differ
    else:
        assert differ


@pytest.mark.parametrize("name", DIALECTS)
def test_split_messages(name: str, tmp_path: Path) -> None:
    """Dialects that split messages get segments that reassemble into events; others never
    produce segments and cannot reassemble."""
    _, res = _render(name, tmp_path, faults=True)
    decoder = Decoder(name, res.options)
    buffer = SegmentBuffer()
    for f in res.files:
        for out in decoder.decode_file(f.read_bytes(), str(f)):
            for seg in out.segments:
                buffer.add(seg, str(f), out.message.position, out.message.line)
    verdicts = list(buffer.verdicts(decoder.reassembles))
    if not dialect_class(name).capabilities.splits_messages:
        assert not verdicts
        with pytest.raises(NotImplementedError):
            decoder.dialect_named(name).reassemble([b"{}"], None)
        return
    assert verdicts and {v.status for _, _, v in verdicts} == {"complete"}
    for dialect, _, verdict in verdicts:
        out = decoder.decode_segments(dialect, [p.raw for p in verdict.pieces], None)
        assert out.events and not out.rejections and not out.segments


@pytest.mark.parametrize("name", DIALECTS)
def test_exact_numbers(name: str) -> None:
    d = dialect_class(name)()
    doc = d.parse(RawMessage(b'{"a": 25.00, "b": 123456789012345678901234, "c": 1}'))
    if d.capabilities.exact_numbers:
        assert doc == {"a": Decimal("25.00"), "b": 123456789012345678901234, "c": 1}
        assert str(doc["a"]) == "25.00"
    else:
        assert isinstance(doc["a"], float)


# ---------------------------------------------------------------- transports


@pytest.mark.parametrize("name", DIALECTS)
def test_render_decode_round_trip_and_detection(name: str, tmp_path: Path) -> None:
    w, res = _render(name, tmp_path)
    fixed, rej = _decode(name, res.files, res.options)
    auto, rej_auto = _decode(name, res.files, res.options, "auto")
    assert not rej and not rej_auto
    assert [e["id"] for e in fixed] == [e["id"] for e in auto]
    assert {e["dialect"] for e in auto} == {name}
    # replicas are named by the lower-cased table name (some sources upper-case their names)
    row_events = sorted(
        (e["table"].lower(), e["operation"])
        for e in fixed
        if e["operation"] not in ("BEGIN", "COMMIT", "RESOLVED")
    )
    # a change may be several events (e.g. a key change as a delete and an insert)
    operations = renderer_event_operations(name)
    changes = sorted((c.table, op) for c in w.changes() for op in operations(c, w))
    assert row_events == changes


@pytest.mark.parametrize("name", DIALECTS)
def test_json_arrays_and_concatenated_documents(name: str, tmp_path: Path) -> None:
    """The same messages as one JSON array file, or as pretty-printed documents one after
    another, decode to the same events."""
    _, res = _render(name, tmp_path / "in")
    expected, _ = _decode(name, _json_files(res), res.options)
    by_file: dict[Path, list[Any]] = {}
    for f, msg in _messages(name, res):
        if msg.kafka is None:  # a Kafka topic naming the table has no place in these files
            by_file.setdefault(f, []).append(loads_exact(msg.data))
    pretty = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    for form, dump in (
        ("array", dumps),
        (
            "pretty",
            lambda docs: b"\n".join(
                orjson.dumps(d, default=json_default, option=pretty) for d in docs
            ),
        ),
    ):
        files = []
        for f, docs in by_file.items():
            out = tmp_path / form / f.relative_to(tmp_path / "in")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(dump(docs))
            files.append(out)
        got, rejections = _decode(name, files, res.options)
        assert not rejections, (form, rejections[:2])
        assert sorted(map(_same, got)) == sorted(
            _same(e) for e in expected if e["metadata"].get("kafka_topic") is None
        )


@pytest.mark.parametrize("name", DIALECTS)
def test_kafka_records(name: str, tmp_path: Path) -> None:
    """Every message written as a Kafka record (JSON lines): the same events, with the record's
    coordinates in metadata."""
    _, res = _render(name, tmp_path / "in")
    expected, _ = _decode(name, _json_files(res), res.options)
    files: dict[Path, list[bytes]] = {}
    offsets = itertools.count(7)
    for f, msg in _messages(name, res):
        out = tmp_path / "kafka" / f.relative_to(tmp_path / "in")
        files.setdefault(out, []).append(orjson.dumps(_kafka_record(msg, next(offsets))))
    for out, lines in files.items():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"\n".join(lines) + b"\n")
    got, rejections = _decode(name, list(files), res.options)
    assert not rejections, rejections[:2]
    assert sorted(map(_same, got)) == sorted(map(_same, expected))
    assert all(isinstance(e["metadata"].get("kafka_offset"), int) for e in got)


_SCALARS: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "long"),
    (float, "double"),
    (str, "string"),
)


def _scalar(value: Any) -> str | None:
    return next((name for kind, name in _SCALARS if isinstance(value, kind)), None)


def _avro_type(value: Any, names: Iterator[int]) -> Any:
    """An Avro type that carries a JSON value (nullable everywhere)."""
    if value is None:
        return "null"
    scalar = _scalar(value)
    if scalar is not None:
        return ["null", scalar]
    if isinstance(value, list):
        kinds = sorted({_scalar(v) or "complex" for v in value if v is not None})
        if "complex" in kinds:
            if len(value) != 1:
                raise ValueError("an array of objects has no simple Avro type here")
            return ["null", {"type": "array", "items": _avro_type(value[0], names)}]
        return ["null", {"type": "array", "items": ["null", *kinds] if kinds else "null"}]
    if isinstance(value, dict):
        fields = []
        for k, v in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"{k!r} is no Avro name")
            fields.append({"name": k, "type": _avro_type(v, names)})
        return ["null", {"type": "record", "name": f"r{next(names)}", "fields": fields}]
    raise ValueError(f"no Avro type for {value!r}")


def _avro_message(msg: RawMessage) -> tuple[Any, Any] | None:
    """(schema, record) carrying a JSON message, or None when its shape has no simple Avro
    form."""
    doc = orjson.loads(msg.data)
    if not isinstance(doc, dict):
        return None
    try:
        schema = _avro_type(doc, itertools.count())[1]
    except ValueError:
        return None
    return schema, doc


@pytest.mark.parametrize("name", DIALECTS)
def test_avro_containers_and_confluent_values(name: str, tmp_path: Path) -> None:
    """Messages as records of Avro object-container files, and as Confluent-framed values of
    Kafka records (schemas from ``schema_dir``), decode to the same operations and tables."""
    _, res = _render(name, tmp_path / "in")
    schema_dir = tmp_path / "schemas"
    schema_dir.mkdir()
    avro_files: list[Path] = []
    kafka_lines: dict[Path, list[bytes]] = {}
    ids: set[int] = set()
    for n, (f, msg) in enumerate(_messages(name, res)):
        if msg.kafka is not None or msg.key is not None:
            continue
        carried = _avro_message(msg)
        if carried is None:
            continue
        schema, record = carried
        out = tmp_path / "avro" / str(n) / f.with_suffix(".avro").name
        out.parent.mkdir(parents=True)
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(schema), [record])
        out.write_bytes(buf.getvalue())
        avro_files.append(out)
        (schema_dir / f"{n}.avsc").write_bytes(orjson.dumps(schema))
        body = io.BytesIO()
        fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
        value = b"\x00" + n.to_bytes(4, "big") + body.getvalue()
        line = orjson.dumps(
            {"partition": 0, "offset": n, "value_base64": base64.b64encode(value).decode()}
        )
        kafka_lines.setdefault(tmp_path / "confluent" / f.relative_to(tmp_path / "in"), []).append(
            line
        )
        ids.add(n)
    assert avro_files, "some messages of every dialect have a simple Avro form"
    got, rejections = _decode(name, avro_files, res.options)
    assert not rejections, rejections[:2]
    assert got and {e["dialect"] for e in got} == {name}
    for out, lines in kafka_lines.items():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"\n".join(lines) + b"\n")
    options = DialectOptions(
        table_keys=res.options.table_keys,
        column_types=res.options.column_types,
        extra={**res.options.extra, "schema_dir": str(schema_dir)},
    )
    confluent, rejections = _decode(name, list(kafka_lines), options)
    assert not rejections, rejections[:2]
    key = lambda e: (e["operation"], e["table"])  # noqa: E731
    assert sorted(map(key, confluent)) == sorted(map(key, got))
    assert {e["metadata"].get("schema_id") for e in confluent} <= ids


@pytest.mark.parametrize("name", DIALECTS)
def test_event_hubs_capture(name: str, tmp_path: Path) -> None:
    """Messages as the bodies of an Event Hubs Capture file: the same events, with the
    Capture coordinates in metadata."""
    _, res = _render(name, tmp_path / "in")
    expected, _ = _decode(name, _json_files(res), res.options)
    by_file: dict[Path, list[RawMessage]] = {}
    for f, msg in _messages(name, res):
        if msg.kafka is None:
            by_file.setdefault(f, []).append(msg)
    files = []
    for f, msgs in by_file.items():
        records = [
            {
                "SequenceNumber": i,
                "Offset": str(i * 100),
                "EnqueuedTimeUtc": "1/1/2026 12:00:00 AM",
                "SystemProperties": {},
                "Properties": {k: v.decode() for k, v in (m.headers or {}).items()},
                "Body": m.data,
            }
            for i, m in enumerate(msgs)
        ]
        out = tmp_path / "capture" / f.relative_to(tmp_path / "in").with_suffix(".avro")
        out.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(CAPTURE_SCHEMA), records)
        out.write_bytes(buf.getvalue())
        files.append(out)
    for dialect in (name, "auto"):
        got, rejections = _decode(name, files, res.options, dialect)
        assert not rejections, rejections[:2]
        assert sorted(map(_same, got)) == sorted(
            _same(e) for e in expected if e["metadata"].get("kafka_topic") is None
        )
        assert all("eventhubs_sequence_number" in e["metadata"] for e in got)


OWN_TRANSPORTS = [
    (name, transport)
    for name in DIALECTS
    for transport in sorted(dialect_class(name).capabilities.transports - BASE_TRANSPORTS)
]


@pytest.mark.parametrize(("name", "transport"), OWN_TRANSPORTS)
def test_transports_of_its_own(name: str, transport: str, tmp_path: Path) -> None:
    """A transport a dialect declares beyond the base's is rendered by its renderer and decodes
    without rejections, in the dialect and by auto-detection."""
    render = renderer_transport(name)
    assert render is not None, f"{name} declares {transport} but its renderer cannot write it"
    res: RenderResult = render(_workload(name), tmp_path, transport, seed=5)
    events, rejections = _decode(name, res.files, res.options)
    assert not rejections, rejections[:2]
    assert len(events) == res.messages and events
    auto, rejections = _decode(name, res.files, res.options, "auto")
    assert not rejections and [e["id"] for e in auto] == [e["id"] for e in events]


def _conformance(name: str) -> list[Path]:
    if not (SHARED / "conformance").is_dir():
        return []
    return [p for p, owner in conformance_samples() if owner == name]


@pytest.mark.parametrize("name", DIALECTS)
def test_wire_values_match_typed_values(name: str, tmp_path: Path) -> None:
    """Inside Spark values are read straight to wire strings; the Arrow rows must be exactly
    those of typed values turned into wire strings — ids included — for every rendering (with
    delivery faults) and every real sample."""
    pytest.importorskip("pyarrow")
    from cdcflow.decode.columns import Columns

    _, res = _render(name, tmp_path, faults=True)
    cases = [(f, res.options, name) for f in res.files]
    cases += [(f, DialectOptions(), d) for f in _conformance(name) for d in (name, "auto")]
    for f, options, dialect in cases:
        rows = []
        for wire in (False, True):
            cols = Columns(wire=wire)
            for out in Decoder(dialect, options, wire=wire).decode_file(f.read_bytes(), str(f)):
                cols.add_outcome(out, "src")
            rows.append(cols.to_batch().to_pylist())
        assert rows[0] == rows[1], f


#: The topic of the Kafka records the real samples travel in (it would name a table).
_TOPIC = "server1.public.customers"


def _as_records(messages: list[RawMessage]) -> list[RawMessage]:
    """JSON messages as the values of Kafka records of :data:`_TOPIC`, without keys."""
    return [
        RawMessage(m.data, f"kafka://{_TOPIC}/0", i, kafka=KafkaCoordinates(_TOPIC, 0, i))
        for i, m in enumerate(messages)
        if m.form == "json"
    ]


@pytest.mark.parametrize("name", DIALECTS)
def test_a_configured_dialect_reads_no_message_of_another(name: str) -> None:
    """A source set to one dialect never turns another producer's message into columns: no
    real sample of another dialect gives an event, in its file or as the value of a Kafka
    record (whose topic would name a table); each message its own dialect reads is a
    rejection ``OTHER_DIALECT`` naming that dialect, with the message's bytes and origin."""
    fixed = Decoder(name)
    named = Counter[str]()
    for path, owner in conformance_samples():
        if owner == name:
            continue
        data = path.read_bytes()
        own = Decoder(owner or "auto")
        framed = [m for m in own.frame(data, str(path)) if isinstance(m, RawMessage)]
        records = _as_records(framed)
        read = {
            o.message.data
            for o in [*own.decode_file(data, str(path)), *map(own.decode, records)]
            if o.events and owner is not None
        }
        outcomes = [*fixed.decode_file(data, str(path)), *map(fixed.decode, records)]
        for out in outcomes:
            assert not out.events, (path.name, out.events[0])
            assert out.rejections, (path.name, out.message.data[:80])
            if out.message.data not in read:
                continue
            named[str(owner)] += 1
            for r in out.rejections:
                assert r.code == "OTHER_DIALECT", (path.name, r.code, r.message)
                assert r.raw == out.message.data and f"like a {owner} message" in r.message
            origin = out.message.origin or ""
            assert origin == str(path) or origin.startswith(f"kafka://{_TOPIC}/")
    assert set(named) == set(DIALECTS) - {name}, named


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize(
    ("data", "codes"),
    [
        (b"definitely not json", {"NOT_JSON"}),
        (b'{"half": ', {"TRUNCATED_JSON"}),
        (b'{"x": "\xff"}', {"BAD_UTF8"}),
        (b"", {"NOT_JSON"}),
        (b"[" * 100_000, {"NOT_JSON", "TRUNCATED_JSON"}),
    ],
)
def test_bad_input_is_rejected_never_raised(name: str, data: bytes, codes: set[str]) -> None:
    out = Decoder(name).decode(RawMessage(data, origin="x", offset=0, line=1))
    assert out.events == []
    assert {r.code for r in out.rejections} <= codes and out.rejections


def _corrupt_avro() -> bytes:
    buf = io.BytesIO()
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "string"}]}
    fastavro.writer(buf, fastavro.parse_schema(schema), [{"a": "x" * 50}] * 20)
    data = buf.getvalue()
    return data[: len(data) // 2] + b"\xff" * 40


BAD_TRANSPORT_INPUT: dict[str, tuple[str, Callable[[], bytes], set[str]]] = {
    "corrupt Avro file": ("x.avro", _corrupt_avro, {"CORRUPT_AVRO"}),
    "truncated Avro header": ("x.avro", lambda: b"Obj\x01\x02", {"CORRUPT_AVRO"}),
    "bad base64 in a Kafka record": (
        "x.jsonl",
        lambda: b'{"topic": "t", "offset": 1, "value_base64": "not base64!"}',
        {"BAD_DATA"},
    ),
    "Confluent value without a schema": (
        "x.jsonl",
        lambda: b'{"topic": "t", "offset": 1, "value_base64": "AAAAAAc="}',
        {"UNKNOWN_SCHEMA_ID"},
    ),
    "truncated protobuf stream": (
        "x.pb",
        lambda: b"\x96\x01abc",
        {"CORRUPT_PROTOBUF", "NOT_JSON", "BAD_UTF8"},
    ),
    "CSV file that is not UTF-8": ("x.csv", lambda: b"1,\xff\n", {"BAD_UTF8", "NOT_JSON"}),
}


@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize("case", sorted(BAD_TRANSPORT_INPUT))
def test_bad_transport_input(name: str, case: str) -> None:
    origin, make, codes = BAD_TRANSPORT_INPUT[case]
    for dialect in (name, "auto"):
        outs = list(Decoder(dialect).decode_file(make(), origin))
        rejections = [r for o in outs for r in o.rejections]
        assert rejections and {r.code for r in rejections} <= codes, (dialect, rejections)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "after",
                    "before",
                    "key",
                    "op",
                    "operation",
                    "table",
                    "payload",
                    "source_metadata",
                    "data",
                    "specversion",
                    "type",
                    "id",
                    "updated",
                    "position",
                    "events",
                    "value",
                ]
            )
            | st.text(max_size=6),
            inner,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("name", [*DIALECTS, "auto"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=JSON_VALUES, origin=st.sampled_from(["m.json", "m.jsonl", "m.avro", "m.pb", "m.csv"]))
def test_fuzz_documents_never_raise(name: str, doc: Any, origin: str) -> None:
    data = orjson.dumps(doc)
    outs = list(Decoder(name).decode_file(data, origin))
    outs.append(Decoder(name).decode(RawMessage(data, origin=origin)))
    for o in outs:
        assert all(r.code and r.message and r.code != "DECODER_ERROR" for r in o.rejections)


@pytest.mark.parametrize("name", [*DIALECTS, "auto"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), origin=st.sampled_from(["m.jsonl", "m.avro", "m.pb", "m.csv"]))
def test_fuzz_bytes_never_raise(name: str, data: bytes, origin: str) -> None:
    for prefix in (b"", b"Obj\x01", b"\x00\x00\x00\x00\x01"):
        for o in Decoder(name).decode_file(prefix + data, origin):
            assert all(r.code and r.message and r.code != "DECODER_ERROR" for r in o.rejections)
