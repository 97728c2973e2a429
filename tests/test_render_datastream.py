"""The Datastream renderer: Avro files, MongoDB and Salesforce shapes, key changes as two
events, and everything it writes decoded (fixed dialect and detection) back to the oracle."""

from __future__ import annotations

import dataclasses
import io
import re
import uuid
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest

from cdcflow.dialects import renderer, renderer_event_operations, renderer_features
from cdcflow.dialects.datastream import avro_column_type
from cdcflow.dialects.datastream import render as render_datastream
from cdcflow.dialects.datastream.render import AVRO_TYPES, avro_type, event_operations
from cdcflow.dialects.datastream.sources import (
    NATIVE_TYPES,
    SALESFORCE_DOMAIN,
    SOURCES,
    table_source,
)
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import KIND_OPERATIONS
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import Change, Workload, generate
from tests.dialect_harness import DialectHarness, replay

FEATURES = renderer_features("datastream")
ds = DialectHarness("datastream")
render = renderer("datastream")
_LAYOUT = re.compile(r"/[^/]+/\d{4}/\d{2}/\d{2}/\d{2}/\d{2}/[^/_][^/]*\.(jsonl|avro)$")


def workload(seed: int, source: str, transactions: int = 60) -> Workload:
    """A workload whose tables are read from ``source`` where their types fit it (the others
    keep the seeded choice)."""
    w = generate(seed, tables=3, transactions=transactions, features=FEATURES)
    fits = {
        t: source
        for t, d in w.tables.items()
        if all(c in NATIVE_TYPES[source] for c in d.columns.values())
    }
    assert fits, f"no table fits {source}"
    return dataclasses.replace(w, extra={"datastream_sources": fits})


def commit_positions(w: Workload) -> dict[str, tuple[int, int, int]]:
    """Rendered event id → (transaction, change, half): the commit order of streamed events."""
    out: dict[str, tuple[int, int, int]] = {}
    for t, tx in enumerate(w.transactions):
        for ch in tx.changes:
            for half in (0, 1):
                ident = f"{w.seed}:{ch.txid}:{ch.seq}:{half}"
                out[str(uuid.uuid5(render_datastream._UUIDS, ident))] = (t, ch.seq, half)
    return out


# ---------------------------------------------------------------- every file decodes


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("seed", [1, 2])
def test_everything_rendered_decodes_and_replays_to_the_oracle(
    tmp_path: Path, source: str, seed: int
) -> None:
    w = workload(seed, source)
    n = len(w.transactions)
    files: list[Path] = []
    options: DialectOptions | None = None
    messages = 0
    for i, part in enumerate((slice(0, n // 2), slice(max(0, n // 2 - 5), n))):
        res = render(w, tmp_path, seed=seed + i, transactions=part)
        files += res.files
        options = res.options
        messages += res.messages
    assert options is not None
    assert {f.suffix for f in files} == {".jsonl", ".avro"}
    assert all(_LAYOUT.search(f.as_posix()) for f in files)
    assert not list(tmp_path.rglob("_*")), "temporary files left behind"
    fixed = ds.events(files, decoder_options=options)
    auto = ds.events(files, "auto", options)
    assert [e["id"] for e in fixed] == [e["id"] for e in auto]
    assert {e["dialect"] for e in auto} == {"datastream"}
    plain = [f for f in files if "_redelivered" not in f.name]
    assert len(ds.events(plain, decoder_options=options)) == messages
    sources = {e["table"].lower(): e["source"] for e in fixed}
    assert {t: sources[t] for t in w.extra["datastream_sources"]} == w.extra["datastream_sources"]
    assert {e["operation"] for e in fixed} >= {"INSERT", "DELETE", "SNAPSHOT"}
    assert replay(fixed, w.tables) == oracle.apply(w)


@pytest.mark.parametrize("source", SOURCES)
def test_streamed_events_of_a_key_follow_commit_order(tmp_path: Path, source: str) -> None:
    w = workload(4, source)
    res = render(w, tmp_path, seed=4)
    where = commit_positions(w)
    per_key: dict[tuple, list[tuple[str, tuple[int, int, int]]]] = {}
    for e in ds.events(res.files, decoder_options=res.options):
        if e["operation"] == "SNAPSHOT":
            continue
        key = (e["table"].lower(), tuple(sorted(e["key"].items())))
        per_key.setdefault(key, []).append((e["sequence"], where[e["id"]]))
    assert per_key
    for key, evs in per_key.items():
        by_sequence = [pos for _, pos in sorted(evs)]
        assert by_sequence == sorted(pos for _, pos in evs), key
        # duplicates share their sequence; distinct events never do
        distinct = {(seq, pos) for seq, pos in evs}
        assert len({seq for seq, _ in distinct}) == len(distinct), key


# ---------------------------------------------------------------- Avro


def test_avro_types_map_back_to_canonical_types() -> None:
    for canonical in [*AVRO_TYPES, "decimal(10,2)", "decimal(38,18)"]:
        written = avro_type(canonical)
        assert avro_column_type(["null", written]) == (canonical, "plain"), canonical
    with pytest.raises(ValueError, match="no Avro type"):
        avro_type("point")


def _avro_files(files: list[Path]) -> list[Path]:
    return [f for f in files if f.suffix == ".avro"]


@pytest.mark.parametrize("source", SOURCES)
def test_avro_files_carry_the_types(
    tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file Avro: decoded without declared column types, the header's types are the
    workload's canonical types and the replicas still equal the oracle."""
    monkeypatch.setattr(render_datastream, "AVRO_SHARE", 1.0)
    w = workload(7, source)
    res = render(w, tmp_path, seed=7)
    assert all(f.suffix == ".avro" for f in res.files)
    keys_only = DialectOptions(table_keys=res.options.table_keys)
    events = ds.events(res.files, decoder_options=keys_only)
    for e in events:
        columns = w.tables[e["table"].lower()].columns
        row = e["after"] if e["after"] is not None else e["before"]
        assert e["types"] == {c: columns[c] for c in row}, e["table"]
    assert replay(events, w.tables) == oracle.apply(w)


def test_avro_schema_is_datastreams_envelope(tmp_path: Path) -> None:
    w = workload(5, "mysql")
    res = render(w, tmp_path, seed=5)
    files = _avro_files(res.files)
    assert files
    for f in files:
        data = f.read_bytes()
        assert data.startswith(b"Obj\x01")
        reader = fastavro.reader(io.BytesIO(data))
        schema = reader.writer_schema
        assert isinstance(schema, dict)
        fields = {x["name"]: x["type"] for x in schema["fields"]}
        assert list(fields) == [
            "uuid",
            "read_timestamp",
            "source_timestamp",
            "object",
            "read_method",
            "stream_name",
            "schema_key",
            "sort_keys",
            "source_metadata",
            "payload",
        ]
        assert fields["source_timestamp"]["logicalType"] == "timestamp-millis"
        assert fields["sort_keys"] == {"type": "array", "items": ["string", "long"]}
        meta = fields["source_metadata"]
        assert meta["type"] == "record" and {"table", "database", "log_position"} <= {
            x["name"] for x in meta["fields"]
        }
        payload = fields["payload"]
        assert payload["type"] == "record"
        assert all(
            isinstance(x["type"], list) and x["type"][0] == "null" for x in payload["fields"]
        )
        # one writer schema: every record carries exactly the schema's columns
        names = [x["name"] for x in payload["fields"]]
        records: list[Any] = list(reader)
        assert records and all(list(r["payload"]) == names for r in records)
        assert len({r["object"] for r in records}) == 1


def test_added_columns_start_new_avro_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render_datastream, "AVRO_SHARE", 1.0)
    for seed in range(20):
        w = workload(seed, "postgres")
        if any(c.kind == "add_column" for c in w.changes()):
            break
    else:
        pytest.fail("no workload with an added column")
    res = render(w, tmp_path, seed=seed)
    shapes: dict[str, set[tuple[str, ...]]] = {}
    for f in res.files:
        schema = fastavro.reader(io.BytesIO(f.read_bytes())).writer_schema
        assert isinstance(schema, dict)
        [payload] = [x["type"] for x in schema["fields"] if x["name"] == "payload"]
        obj = f.relative_to(tmp_path).parts[0]
        shapes.setdefault(obj, set()).add(tuple(x["name"] for x in payload["fields"]))
    added = {c.table for c in w.changes() if c.kind == "add_column"}
    assert any(len(shapes.get(f"public_{t}", set())) > 1 for t in added)


# ---------------------------------------------------------------- MongoDB and Salesforce


def _docs(files: list[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in files:
        body = f.read_bytes()
        if f.suffix == ".avro":
            docs.extend(r for r in fastavro.reader(io.BytesIO(body)) if isinstance(r, dict))
        elif body.startswith(b"["):
            docs.extend(orjson.loads(body))
        else:
            docs.extend(orjson.loads(line) for line in body.splitlines())
    return docs


def test_mongodb_shape(tmp_path: Path) -> None:
    w = workload(3, "mongodb")
    res = render(w, tmp_path, seed=3)
    docs = [d for d in _docs(res.files) if d["read_method"].startswith("mongodb")]
    assert docs
    for d in docs:
        meta = d["source_metadata"]
        assert meta["database"] == "app" and meta["collection"] == "events"
        assert d["object"] == "app_events"
        assert meta["change_type"] in ("CREATE", "UPDATE", "DELETE")
        assert meta.get("primary_keys") is None  # keys come from the configuration
        assert [type(k) for k in d["sort_keys"]] == [int, int, int]
        if meta["change_type"] == "DELETE" and "backfill" not in d["read_method"]:
            assert list(d["payload"]) == ["id"]  # the document key only
    assert res.options.table_keys == {"app.events": ("id",)}
    assert res.options.column_types["app.events"] == w.tables["events"].columns
    events = [
        e for e in ds.events(res.files, decoder_options=res.options) if e["source"] == "mongodb"
    ]
    assert events and {e["metadata"]["sequence_source"] for e in events} == {"sort_keys"}
    assert {e["metadata"]["sequence_shape"] for e in events} == {"n,n,n"}
    assert {e["operation"] for e in events} >= {"INSERT", "UPDATE", "DELETE", "SNAPSHOT"}


def test_salesforce_shape(tmp_path: Path) -> None:
    w = workload(3, "salesforce")
    res = render(w, tmp_path, seed=3)
    docs = [d for d in _docs(res.files) if d["read_method"].startswith("salesforce")]
    assert docs
    for d in docs:
        meta = d["source_metadata"]
        assert meta["object_name"] == "events" and d["object"] == "events"
        assert meta["domain"] == SALESFORCE_DOMAIN
        assert meta["change_type"] in ("INSERT", "UPDATE", "DELETE")
        assert meta["primary_keys"] == ["id"]
        ms, record_id, replay_id = d["sort_keys"]
        assert isinstance(ms, int) and isinstance(replay_id, int)
        assert isinstance(record_id, str) and len(record_id) == 18
    events = [
        e for e in ds.events(res.files, decoder_options=res.options) if e["source"] == "salesforce"
    ]
    assert events and {e["database"] for e in events} == {SALESFORCE_DOMAIN}
    assert {e["metadata"]["sequence_shape"] for e in events} == {"n,s,n"}


def test_mongodb_and_salesforce_only_where_types_fit() -> None:
    chosen: dict[str, set[str]] = {}
    for seed in range(300):
        w = generate(seed, tables=3, transactions=5, features=FEATURES)
        for t in w.tables:
            chosen.setdefault(t, set()).add(table_source(w, t))
    # timestamps with microseconds: no MongoDB (BSON dates) nor Salesforce (date-times)
    assert not chosen["accounts"] & {"mongodb", "salesforce"}
    assert not chosen["orders"] & {"mongodb", "salesforce", "oracle", "spanner"}
    assert {"mongodb", "salesforce"} <= chosen["events"]


# ---------------------------------------------------------------- key changes


def _key_change(w: Workload, source: str) -> Change:
    for ch in w.changes():
        if ch.kind != "update" or table_source(w, ch.table) != source:
            continue
        assert ch.before is not None and ch.after is not None
        if any(ch.before[k] != ch.after[k] for k in w.tables[ch.table].key):
            return ch
    raise AssertionError(f"no key change of a {source} table in the workload")


@pytest.mark.parametrize(
    ("source", "ops"),
    [
        ("mysql", ["DELETE", "UPDATE"]),
        ("oracle", ["DELETE", "UPDATE"]),
        ("postgres", ["DELETE", "INSERT"]),
        ("sqlserver", ["DELETE", "INSERT"]),
        ("spanner", ["DELETE", "INSERT"]),
        ("mongodb", ["DELETE", "INSERT"]),
        ("salesforce", ["DELETE", "INSERT"]),
    ],
)
def test_event_operations_match_the_rendering(tmp_path: Path, source: str, ops: list[str]) -> None:
    w = workload(9, source, transactions=80)
    assert event_operations(_key_change(w, source), w) == ops
    res = render(w, tmp_path, seed=9, faults=False)
    events = ds.events(res.files, decoder_options=res.options)
    got = sorted((e["table"].lower(), e["operation"]) for e in events)
    want = sorted((c.table, op) for c in w.changes() for op in event_operations(c, w))
    assert got == want
    pairs = [c for c in w.changes() if len(event_operations(c, w)) == 2]
    assert pairs and len(events) == sum(len(event_operations(c, w)) for c in w.changes())


def test_renderer_event_operations_hook() -> None:
    w = generate(2, transactions=30)
    assert renderer_event_operations("datastream") is event_operations
    default = renderer_event_operations("savegress")
    for ch in w.changes():
        assert default(ch, w) == [KIND_OPERATIONS[ch.kind]]
    kinds_only = renderer_event_operations("sqlserver_ces")  # EVENT_KINDS: no truncate, DDL
    assert [op for ch in w.changes() for op in kinds_only(ch, w)] == [
        KIND_OPERATIONS[ch.kind] for ch in w.changes() if ch.kind in ("insert", "update", "delete")
    ]
    assert "pk_change" in FEATURES


def test_every_workload_shows_mysql_and_spanner() -> None:
    for seed in range(40):
        w = generate(seed, tables=3, transactions=5, features=FEATURES)
        assert {"mysql", "spanner"} <= {table_source(w, t) for t in w.tables}, seed
