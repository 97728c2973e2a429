"""Reading plain JSON-lines files in bulk (the Spark side's fast lane) gives exactly the rows of
the row decoder, which stays the reference: on every rendering and real sample, and on
generated files full of the shapes the bulk reader must leave to it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.dialects import dialect_names, renderer, renderer_features
from cdcflow.dialects.model import DialectOptions
from cdcflow.simulation.workload import generate
from tests.conftest_shared import SHARED

pa = pytest.importorskip("pyarrow")

from cdcflow.decode.batches import decode_files  # noqa: E402
from cdcflow.decode.decoder import Decoder  # noqa: E402


def _rows(files: list[tuple[str, bytes]], dialect: str, options: DialectOptions, bulk: bool):
    batch = pa.record_batch(
        [pa.array([f for f, _ in files]), pa.array([d for _, d in files], pa.binary())],
        names=["path", "content"],
    )
    out = []
    for b in decode_files(iter([batch]), dialect, options, bulk=bulk):
        for r in b.to_pylist():
            for m in ("key", "before", "after", "metadata", "types"):
                if r[m] is not None:
                    r[m] = dict(r[m])
            out.append(r)
    return sorted(
        out, key=lambda r: (r["origin"], r["offset"], r["item"] or 0, r["error_code"] or "")
    )


def _same_rows(files: list[tuple[str, bytes]], dialect: str, options: DialectOptions) -> int:
    """Rows in bulk == rows one by one; the number of lines read in bulk."""
    assert _rows(files, dialect, options, True) == _rows(files, dialect, options, False)
    decoder = Decoder(dialect, options, wire=True)
    return sum(len(found.rows) for f, d in files if (found := decoder.bulk(d, f)) is not None)


@pytest.mark.parametrize("name", dialect_names())
@pytest.mark.parametrize("faults", [False, True])
def test_renderings_read_in_bulk_as_one_by_one(name: str, faults: bool, tmp_path: Path) -> None:
    w = generate(5, transactions=60, features=renderer_features(name))
    res = renderer(name)(w, tmp_path, seed=5, faults=faults)
    files = [(str(f), f.read_bytes()) for f in res.files]
    _same_rows(files, name, res.options)


@pytest.mark.parametrize("name", dialect_names())
def test_real_samples_read_in_bulk_as_one_by_one(name: str) -> None:
    folders = [SHARED / "conformance" / name, SHARED / "conformance" / "other"]
    files = [(str(p), p.read_bytes()) for f in folders if f.is_dir() for p in sorted(f.iterdir())]
    if not files:
        pytest.skip(f"no real samples for {name} next to the project (CDCFLOW_SHARED)")
    _same_rows(files, name, DialectOptions())


def test_the_plain_shape_is_read_in_bulk() -> None:
    """The bench's shape: every line goes through the bulk reader."""
    lines = [
        {
            "id": f"e{i}",
            "operation": "INSERT" if i % 3 else "DELETE",
            "table": "items",
            "source": "postgres",
            "timestamp": "2025-01-15T10:30:00Z",
            "position": {"lsn": f"0/{i:X}", "sequence": 0},
            ("before" if i % 3 == 0 else "after"): {
                "id": i,
                "name": f"item-{i}",
                "price": f"{i}.5",
                "updated_at": "2025-01-15T10:30:00.123456Z",
            },
        }
        for i in range(1, 40)
    ]
    data = b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
    options = DialectOptions(
        table_keys={"items": ("id",)},
        column_types={"items": {"price": "numeric(10,2)", "updated_at": "timestamptz"}},
    )
    assert _same_rows([("a.jsonl", data)], "savegress", options) == len(lines)


# ---------------------------------------------------------------- generated savegress files

_ABSENT = object()
TEXTS = st.sampled_from(["a", "", "Ünïcode", "null", "x.y", "0", "-0", "12", "true"])
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 7, 2**62, -5]),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXTS,
    st.sampled_from(
        [
            "82.7",
            "007.5",
            "-0.0",
            "1.234",
            "1e3",
            "12345678901.5",
            "2025-01-15T10:30:00.123456Z",
            "2025-02-30T10:30:00.123456Z",
            "2025-01-15T10:30:00Z",
            "2025-01-15",
            "+5",
        ]
    ),
    st.dictionaries(st.sampled_from(["k"]), st.integers(-5, 5), max_size=1),
)
#: Odd values of each top-level field that keep its JSON kind (``_ABSENT``: left out).
ODD_FIELDS: dict[str, list[Any]] = {
    "id": [_ABSENT, "", None],
    "operation": ["insert", "DDL", "BEGIN", "TRUNCATE", None],
    "table": ["", "s.items", None],
    "schema": ["public", "", None],
    "source": ["mysql", "", None],
    "timestamp": [_ABSENT, "2025-01-31T10:30:00Z", "2025-01-15 10:30:00", "bad", None],
    "transaction_id": ["tx", "", None],
    "position": [
        _ABSENT,
        {"sequence": 3, "lsn": "1/2"},
        {"lsn": "0/1"},
        {"lsn": " 0/1"},
        {"lsn": "zz"},
        {"lsn": "0/1", "sequence": -1},
        {"lsn": "FFFFFFFF/FFFFFFFF", "sequence": 99},
        {},
        None,
    ],
    "after": [_ABSENT, None, {}],
    "before": [_ABSENT, None, {}],
}
#: Odd values of the same kind as each image column's plain values.
ODD_COLUMNS: dict[str, list[Any]] = {
    "id": [None, -5, 2**62],
    "name": [None, "", "null", "Ünïcode"],
    "price": [None, "1.234", "1e3", "-0.0", "007.5", "12345678901.5", "+5", "٣"],
    "at": [None, "2025-02-30T10:30:00.123456Z", "2025-01-15T10:30:00Z", "2025-01-15"],
    "flag": [None],
    "qty": [None, 0],
}
#: Values and fields of another kind: whole files go one by one.
WILD_FIELDS: dict[str, list[Any]] = {
    "id": [12],
    "operation": [5],
    "table": [7],
    "timestamp": [5],
    "position": [{"file": "mysql-bin.000001", "position": 4}, "x"],
    "after": ["text"],
    "metadata": [{"database": "db"}],
    "partial": [True],
}


@st.composite
def _image(draw: st.DrawFn) -> dict[str, Any]:
    columns = {
        "id": st.integers(0, 10**6),
        "name": st.text(min_size=1, max_size=5).filter(lambda x: "null" not in x),
        "price": st.sampled_from(["82.7", "0.05", "-3", "7"]),
        "at": st.sampled_from(["2025-01-15T10:30:00.123456Z", "2024-12-01T00:00:00.000000Z"]),
        "flag": st.booleans(),
        "qty": st.integers(-100, 100),
    }
    names = draw(st.lists(st.sampled_from(list(columns)), unique=True, min_size=1))
    return {c: draw(columns[c]) for c in ["id", *names] if c in columns}


@st.composite
def _event(draw: st.DrawFn) -> dict[str, Any]:
    """A plain event, changed in zero to two places by an odd field or value."""
    op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE", "UPSERT", "SNAPSHOT"]))
    event: dict[str, Any] = {
        "id": draw(st.sampled_from(["e1", "e2", "e3"])),
        "operation": op,
        "table": draw(st.sampled_from(["items", "orders"])),
        "timestamp": draw(st.sampled_from(["2025-01-15T10:30:00Z", "2025-01-15T10:30:00.123456Z"])),
        "position": {
            "lsn": f"{draw(st.integers(0, 2**32 - 1)):X}/{draw(st.integers(0, 2**32 - 1)):X}",
            "sequence": draw(st.integers(0, 10**6)),
        },
    }
    event["before" if op == "DELETE" else "after"] = draw(_image())
    if op == "UPDATE" and draw(st.booleans()):
        event["before"] = draw(_image())
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        kind = draw(st.sampled_from(["field", "column", "column", "wild"]))
        image = event.get("after") or event.get("before")
        # an odd field may have replaced the image by one of columns without odd values
        columns = sorted(c for c in image if c in ODD_COLUMNS) if isinstance(image, dict) else []
        if kind == "column" and columns:
            column = draw(st.sampled_from(columns))
            image[column] = draw(st.sampled_from(ODD_COLUMNS[column]))
        elif kind == "wild" and draw(st.integers(0, 3)) == 0:
            name = draw(st.sampled_from(sorted(WILD_FIELDS)))
            event[name] = draw(st.one_of(st.sampled_from(WILD_FIELDS[name]), ODD_VALUES))
        else:
            name = draw(st.sampled_from(sorted(ODD_FIELDS)))
            event[name] = draw(st.sampled_from(ODD_FIELDS[name]))
    return event


EVENTS = _event()


def _line(event: dict[str, Any], spaced: bool) -> bytes:
    doc = {k: v for k, v in event.items() if v is not _ABSENT}
    if spaced:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    return orjson.dumps(doc)


@settings(
    max_examples=int(os.environ.get("CDCFLOW_BULK_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    events=st.lists(EVENTS, min_size=2, max_size=8),
    spaced=st.booleans(),
    blank=st.booleans(),
    keys=st.sampled_from([{}, {"items": ("id",)}, {"items": ("id", "name")}]),
    types=st.sampled_from(
        [
            {},
            {"items": {"price": "numeric(10,2)", "at": "timestamptz", "id": "integer"}},
            {"items": {"price": "numeric(4,1)", "qty": "bigint", "flag": "text"}},
            {"items": {"at": "date", "name": "nosuchtype"}},
        ]
    ),
)
def test_generated_savegress_lines(
    events: list[dict[str, Any]], spaced: bool, blank: bool, keys: Any, types: Any
) -> None:
    lines = [_line(e, spaced) for e in events]
    data = (b"\n\n" if blank else b"\n").join(lines) + b"\n"
    options = DialectOptions(table_keys=keys, column_types=types)
    _same_rows([("gen.jsonl", data)], "savegress", options)


def test_the_generator_reaches_the_bulk_reader() -> None:
    """A plain generated line is read in bulk (the property above compares both readers, not
    only the row decoder with itself)."""
    event = {
        "id": "e1",
        "operation": "UPDATE",
        "table": "items",
        "timestamp": "2025-01-15T10:30:00Z",
        "position": {"lsn": "0/1A", "sequence": 3},
        "after": {"id": 1, "name": "a", "price": "82.7", "at": "2025-01-15T10:30:00.123456Z"},
        "before": {"id": 1, "name": "b", "flag": True},
    }
    data = orjson.dumps(event) + b"\n" + orjson.dumps({**event, "id": "e2"}) + b"\n"
    options = DialectOptions(
        table_keys={"items": ("id",)},
        column_types={"items": {"price": "numeric(10,2)", "at": "timestamptz"}},
    )
    assert _same_rows([("gen.jsonl", data)], "savegress", options) == 2


@settings(max_examples=300, deadline=None)
@given(
    values=st.one_of(
        st.lists(st.one_of(st.none(), st.text(max_size=30)), min_size=1, max_size=12),
        st.lists(
            st.one_of(
                st.none(),
                st.from_regex(r"-?0*[0-9]{0,12}(\.[0-9]{0,8})?", fullmatch=True),
                st.from_regex(
                    r"[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)?",
                    fullmatch=True,
                ),
            ),
            min_size=1,
            max_size=12,
        ),
        st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=12),
        st.lists(st.one_of(st.none(), st.booleans()), min_size=1, max_size=12),
    ),
    t=st.sampled_from(
        [
            "string",
            "json",
            "bigint",
            "int",
            "boolean",
            "decimal(10,2)",
            "decimal(5,5)",
            "decimal(38,0)",
            "timestamp",
            "date",
            "double",
            "uuid",
        ]
    ),
)
def test_bulk_wire_strings_are_those_of_each_value(values: list[Any], t: str) -> None:
    """Where the bulk reader says a value's wire string is read off it, it is the one
    :func:`cdcflow.types.wire_value` gives; a value of the wrong form is never ok."""
    from cdcflow.types import ValueTypeError, wire_value
    from cdcflow.wire import wire_array

    wire, ok = wire_array(pa.array(values), t)
    for value, got, good in zip(values, wire.to_pylist(), ok.to_pylist(), strict=True):
        if not good:
            continue
        try:
            expected = wire_value(value, t)
        except ValueTypeError:
            raise AssertionError(f"{value!r} is no {t} but was read in bulk as {got!r}") from None
        assert got == expected, (value, t)


def test_a_file_unlike_the_one_before_is_read_right() -> None:
    """The bulk reader reuses the last file's schema; a file whose kinds differ is read again
    without it, and a file missing fields the last one had gets no phantom fields."""
    base = {
        "id": "e1",
        "operation": "INSERT",
        "table": "items",
        "timestamp": "2025-01-15T10:30:00Z",
        "position": {"lsn": "0/1", "sequence": 0},
        "schema": "public",
    }
    first = [{**base, "after": {"id": 1, "v": "a"}}, {**base, "after": {"id": 2, "v": "b"}}]
    second = [{**base, "after": {"id": "x", "w": True}}, {**base, "after": {"id": "y"}}]
    third = [
        {k: v for k, v in base.items() if k != "schema"} | {"after": {"v": "c"}},
        {k: v for k, v in base.items() if k != "schema"} | {"after": {"v": "d"}},
    ]
    files = [
        (f"{n}.jsonl", b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
        for n, lines in enumerate((first, second, third))
    ]
    options = DialectOptions(table_keys={"items": ("id",)})
    assert _same_rows(files, "savegress", options) == 4  # the third file names no key column
