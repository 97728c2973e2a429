"""One contract suite over every registered dialect: a new dialect is put through it by
registering itself (and its renderer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects import dialect_class, dialect_names
from cdcflow.dialects.base import Dialect
from cdcflow.testing.renderers import (
    renderer,
    renderer_event_operations,
    renderer_features,
    renderer_names,
)
from cdcflow.testing.workload import generate
from cdcflow.transports.message import RawMessage
from tests.golden import GOLDEN_DIR

DIALECTS = dialect_names()


@pytest.mark.parametrize("name", DIALECTS)
def test_registered_and_documented(name: str) -> None:
    cls = dialect_class(name)
    assert issubclass(cls, Dialect)
    assert cls.name == name
    assert cls.__module__ == f"cdcflow.dialects.{name}"
    doc = __import__(cls.__module__, fromlist=["_"]).__doc__ or ""
    assert "Spec:" in doc and "canonical" in doc, "module docstring must map the spec"


@pytest.mark.parametrize("name", DIALECTS)
def test_has_renderer_and_goldens(name: str) -> None:
    assert name in renderer_names(), f"dialect {name} has no renderer in the testing kit"
    assert list((GOLDEN_DIR / name).glob("*.jsonl")), f"no golden cases for {name}"


@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize(
    ("data", "codes"),
    [
        (b"definitely not json", {"NOT_JSON"}),
        (b'{"half": ', {"TRUNCATED_JSON"}),
        (b'{"x": "\xff"}', {"BAD_UTF8"}),
        (b"", {"NOT_JSON"}),
    ],
)
def test_bad_input_is_rejected_never_raised(name: str, data: bytes, codes: set[str]) -> None:
    out = Decoder(name).decode(RawMessage(data, origin="x", offset=0, line=1))
    assert out.events == []
    assert {r.code for r in out.rejections} <= codes and out.rejections


@pytest.mark.parametrize("name", DIALECTS)
def test_render_decode_round_trip_and_detection(name: str, tmp_path: Path) -> None:
    w = generate(21, transactions=40, features=renderer_features(name))
    res = renderer(name)(w, tmp_path, seed=21, faults=False)
    decoded = []
    for decoder in (Decoder(name, res.options), Decoder("auto", res.options)):
        events = []
        for f in res.files:
            for out in decoder.decode_file(f.read_bytes(), str(f)):
                assert not out.rejections, out.rejections
                events.extend(out.events)
        decoded.append(events)
    fixed, auto = decoded
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
