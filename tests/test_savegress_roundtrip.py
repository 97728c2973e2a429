"""Rendering a workload in the unified format and decoding it gives the changes back."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.savegress.render import decode_options, render_messages
from cdcflow.simulation.workload import generate
from cdcflow.transports.message import RawMessage

_OPS = {
    "insert": "INSERT",
    "update": "UPDATE",
    "delete": "DELETE",
    "truncate": "TRUNCATE",
    "add_column": "DDL",
}


@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=0, max_value=10**6))
def test_render_then_decode_returns_the_changes(seed: int) -> None:
    w = generate(seed, transactions=40)
    decoder = Decoder("savegress", decode_options(w))
    changes = list(w.changes())
    events = []
    for doc in render_messages(w):
        out = decoder.decode(RawMessage(orjson.dumps(doc)))
        assert not out.rejections, out.rejections
        events.extend(out.events)
    assert len(events) == len(changes)
    for ch, ev in zip(changes, events, strict=True):
        assert ev["table"] == ch.table
        assert ev["operation"] == _OPS[ch.kind]
        if ch.kind in ("insert", "update", "delete"):
            assert ev["key"] == ch.key
            assert ev["after"] == ch.after
            assert ev["before"] == ch.before
        if ch.kind == "add_column":
            assert ev["types"] == {ch.column: ch.column_type}
    # sorting by sequence gives commit order
    by_seq = sorted(range(len(events)), key=lambda i: events[i]["sequence"])
    assert by_seq == list(range(len(events)))
