"""The Arrow column builder: decoded events, rejections and segments as record batches with
the schema of :func:`cdcflow.event.spark_schema_ddl` (pyarrow is imported when a batch is
built).

Row images are ``map<string,string>`` of wire strings (:func:`cdcflow.types.to_wire`);
``position`` is JSON text (keys sorted); a rejection row has ``error_code``,
``error_message`` and ``raw`` set; a segment row has ``operation`` :data:`SEGMENT`, ``id`` =
its group, and its numbering in ``metadata`` (``segment.index``, ``segment.final``,
``segment.total``, ``cdcflow.source``); a message that carries no change on purpose (a Kafka
tombstone) is a row with ``operation`` :data:`SKIPPED` and its reason in ``metadata``
(:data:`SKIPPED_WHY`), so a batch can count it.

One message never fails a batch: a message whose events cannot be added, or whose rows Arrow
cannot take, becomes a ``DECODER_ERROR`` rejection row with the message's bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from cdcflow.dialects.model import Columnar, Segment, Skipped
from cdcflow.event import FIELDS, SPARK_COLUMNS
from cdcflow.types import json_bytes, to_wire

if TYPE_CHECKING:
    import pyarrow as pa

    from cdcflow.decode.decoder import Outcome

#: ``operation`` of rows that are segments of a split message, not events.
SEGMENT = "SEGMENT"
#: ``operation`` of rows that stand for a message without a change (a Kafka tombstone, a
#: heartbeat), not events; ``metadata[SKIPPED_WHY]`` says which.
SKIPPED = "SKIPPED"
SKIPPED_WHY = "skipped"

#: Text columns of an event (``position`` is text too, but built from JSON).
_SCALARS = tuple(f for f, t in SPARK_COLUMNS[: len(FIELDS)] if t == "string" and f != "position")
_MAPS = ("key", "before", "after", "metadata", "types")


def arrow_schema() -> pa.Schema:
    """The decoded-events schema (:data:`cdcflow.event.SPARK_COLUMNS`) as a
    ``pyarrow.Schema``."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        "boolean": pa.bool_(),
        "bigint": pa.int64(),
        "int": pa.int32(),
        "binary": pa.binary(),
    }
    return pa.schema([(name, types[t]) for name, t in SPARK_COLUMNS])


class _MapColumn:
    """A ``map<string,string>`` column kept as flat keys/values and offsets."""

    __slots__ = ("keys", "offsets", "valid", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = [0]
        self.keys: list[str] = []
        self.values: list[str | None] = []
        self.valid: list[bool] = []

    def add(self, value: dict[str, Any] | None, wire: bool) -> None:
        if value is None:
            self.offsets.append(self.offsets[-1])
            self.valid.append(False)
            return
        self.keys.extend(value)
        if wire:
            self.values.extend(value.values())
        else:
            self.values.extend(map(to_wire, value.values()))
        self.offsets.append(len(self.keys))
        self.valid.append(True)

    def add_text(self, value: dict[str, Any]) -> None:
        """A map whose values become text (metadata: JSON for what is not text)."""
        self.keys.extend(value)
        self.values.extend(map(_meta_value, value.values()))
        self.offsets.append(len(self.keys))
        self.valid.append(True)

    def array(self) -> pa.Array:
        import pyarrow as pa

        mask = None if all(self.valid) else pa.array([not v for v in self.valid], pa.bool_())
        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
            mask=mask,
        )


class Columns:
    """Columns of one output batch: add events, rejections and segments, then
    :meth:`to_batch`.

    ``wire``: events' row images and keys already hold wire strings (a decoder in wire mode).
    """

    def __init__(self, *, wire: bool = False) -> None:
        self.wire = wire
        self.scalars: dict[str, list[Any]] = {f: [] for f in _SCALARS}
        self.timestamp: list[Any] = []
        self.position: list[str | None] = []
        self.partial: list[bool] = []
        self.maps: dict[str, _MapColumn] = {f: _MapColumn() for f in _MAPS}
        self.origin: list[str | None] = []
        self.offset: list[int] = []
        self.line: list[int | None] = []
        self.item: list[int | None] = []
        self.error_code: list[str | None] = []
        self.error_message: list[str | None] = []
        self.raw: list[bytes | None] = []
        self.rows = 0
        #: Per row: the bytes and dialect of the message it came from (for a rejection).
        self.sources: list[tuple[bytes, str | None]] = []

    def _coordinates(
        self, origin: str | None, offset: int, line: int | None, item: int | None
    ) -> None:
        self.origin.append(origin)
        self.offset.append(offset)
        self.line.append(line)
        self.item.append(item)
        self.rows += 1

    def add_event(
        self, ev: dict[str, Any], origin: str | None, offset: int, line: int | None, item: int
    ) -> None:
        """One canonical event."""
        scalars = self.scalars
        for f in _SCALARS:
            scalars[f].append(ev.get(f))
        self.timestamp.append(ev.get("timestamp"))
        pos = ev.get("position")
        self.position.append(None if pos is None else _position_text(pos))
        self.partial.append(bool(ev.get("partial")))
        maps, wire = self.maps, self.wire
        maps["key"].add(ev.get("key"), wire)
        maps["before"].add(ev.get("before"), wire)
        maps["after"].add(ev.get("after"), wire)
        maps["metadata"].add_text(ev.get("metadata") or {})
        maps["types"].add(ev.get("types") or {}, True)
        self.error_code.append(None)
        self.error_message.append(None)
        self.raw.append(None)
        self._coordinates(origin, offset, line, item)

    def add_marker(
        self,
        dialect: str | None,
        code: str | None,
        message: str | None,
        raw: bytes | None,
        origin: str | None,
        offset: int,
        line: int | None,
        item: int | None,
        table: str | None = None,
    ) -> None:
        """A row that is no event: a rejection (``code`` set) or a bare status row."""
        for f in _SCALARS:
            self.scalars[f].append(None)
        self.scalars["dialect"][-1] = dialect
        self.scalars["table"][-1] = table
        self.timestamp.append(None)
        self.position.append(None)
        self.partial.append(False)
        for m in self.maps.values():
            m.add(None, True)
        self.error_code.append(code)
        self.error_message.append(message)
        self.raw.append(raw)
        self._coordinates(origin, offset, line, item)

    def add_rejection(
        self,
        code: str,
        message: str,
        raw: bytes,
        dialect: str | None,
        origin: str | None,
        offset: int,
        line: int | None,
        item: int | None,
        table: str | None = None,
    ) -> None:
        """A message (or item) that could not be decoded (``table``: the one it is about, when
        its dialect had read it)."""
        self.add_marker(dialect, code, message, raw, origin, offset, line, item, table)

    def add_segment(
        self, seg: Segment, source: str, origin: str | None, offset: int, line: int | None
    ) -> None:
        """A segment of a split message: ``operation`` ``SEGMENT``, ``id`` its group, the
        numbering in ``metadata``, the segment itself in ``raw``."""
        for f in _SCALARS:
            self.scalars[f].append(None)
        self.scalars["id"][-1] = seg.group
        self.scalars["dialect"][-1] = seg.dialect
        self.scalars["operation"][-1] = SEGMENT
        self.timestamp.append(None)
        self.position.append(None)
        self.partial.append(False)
        for name in ("key", "before", "after", "types"):
            self.maps[name].add(None, True)
        self.maps["metadata"].add(
            {
                "segment.index": str(seg.index),
                "segment.final": None if seg.final is None else str(seg.final).lower(),
                "segment.total": None if seg.total is None else str(seg.total),
                "cdcflow.source": source,
            },
            True,
        )
        self.error_code.append(None)
        self.error_message.append(None)
        self.raw.append(seg.raw)
        self._coordinates(origin, offset, line, seg.item)

    def add_skipped(
        self, s: Skipped, origin: str | None, offset: int, line: int | None, item: int | None
    ) -> None:
        """A message that carries no change on purpose: ``operation`` ``SKIPPED``, its reason
        in ``metadata``."""
        for f in _SCALARS:
            self.scalars[f].append(None)
        self.scalars["dialect"][-1] = s.dialect
        self.scalars["operation"][-1] = SKIPPED
        self.timestamp.append(None)
        self.position.append(None)
        self.partial.append(False)
        for name in ("key", "before", "after", "types"):
            self.maps[name].add(None, True)
        self.maps["metadata"].add({SKIPPED_WHY: s.why}, True)
        self.error_code.append(None)
        self.error_message.append(None)
        self.raw.append(None)
        self._coordinates(origin, offset, line, item)

    def add_outcome(self, o: Outcome, source: str = "") -> None:
        """Events, rejections and segments of one decoded message (a ``DECODER_ERROR``
        rejection of the message when they cannot be added)."""
        m = o.message
        offset = m.position
        start = self.rows
        dialect = next((e.get("dialect") for e in o.events), None)
        try:
            for i, ev in enumerate(o.events):
                self.add_event(ev, m.origin, offset, m.line, i)
            for r in o.rejections:
                self.add_rejection(
                    r.code, r.message, r.raw, r.dialect, m.origin, offset, m.line, r.item, r.table
                )
            for seg in o.segments:
                self.add_segment(seg, source, m.origin, offset, m.line)
            for s in o.skipped:
                self.add_skipped(s, m.origin, offset, m.line, None)
        except Exception as e:  # the last line of defence: this message only
            self._truncate(start)
            r = _unexpected(e, m.data, dialect)
            self.add_rejection(r.code, r.message, r.raw, r.dialect, m.origin, offset, m.line, None)
        self.sources.extend([(m.data, dialect)] * (self.rows - len(self.sources)))

    def _lists(self) -> list[list[Any]]:
        return [
            *self.scalars.values(),
            self.timestamp,
            self.position,
            self.partial,
            self.origin,
            self.offset,
            self.line,
            self.item,
            self.error_code,
            self.error_message,
            self.raw,
        ]

    def _truncate(self, rows: int) -> None:
        """Drop every row after the first ``rows`` (and any half-added row)."""
        for column in self._lists():
            del column[rows:]
        for m in self.maps.values():
            del m.offsets[rows + 1 :]
            del m.valid[rows:]
            del m.keys[m.offsets[-1] :]
            del m.values[m.offsets[-1] :]
        del self.sources[rows:]
        self.rows = rows

    def _row(self, i: int) -> Columns:
        """Row ``i`` alone."""
        one = Columns(wire=self.wire)
        for name, column in self.scalars.items():
            one.scalars[name] = column[i : i + 1]
        rest = len(_SCALARS)
        for mine, theirs in zip(one._lists()[rest:], self._lists()[rest:], strict=True):
            mine.append(theirs[i])
        for name, m in self.maps.items():
            a, b = m.offsets[i], m.offsets[i + 1]
            target = one.maps[name]
            target.keys, target.values = m.keys[a:b], m.values[a:b]
            target.offsets, target.valid = [0, b - a], m.valid[i : i + 1]
        one.sources = self.sources[i : i + 1]
        one.rows = 1
        return one

    def to_batch(self) -> pa.RecordBatch:
        """The rows added so far as one record batch; rows Arrow cannot take become
        ``DECODER_ERROR`` rejections of their messages."""
        try:
            return self._batch()
        except Exception:  # one bad row: find it, keep the others
            return self._batch_by_rows()

    def _batch_by_rows(self) -> pa.RecordBatch:
        import pyarrow as pa

        batches: list[pa.RecordBatch] = []
        for i in range(self.rows):
            one = self._row(i)
            try:
                batches.append(one._batch())
            except Exception as e:
                data, dialect = self.sources[i]
                r = _unexpected(e, data, dialect)
                bad = Columns(wire=self.wire)
                bad.add_rejection(
                    r.code,
                    r.message,
                    r.raw,
                    r.dialect,
                    one.origin[0],
                    one.offset[0],
                    one.line[0],
                    one.item[0],
                )
                batches.append(bad._batch())
        table = pa.Table.from_batches(batches, schema=arrow_schema()).combine_chunks()
        whole = table.to_batches()
        return whole[0] if whole else Columns(wire=self.wire)._batch()

    def _batch(self) -> pa.RecordBatch:
        import pyarrow as pa

        schema = arrow_schema()
        arrays: dict[str, Any] = {}
        for f in _SCALARS:
            arrays[f] = pa.array(self.scalars[f], pa.string())
        arrays["timestamp"] = pa.array(self.timestamp, pa.timestamp("us", tz="UTC"))
        arrays["position"] = pa.array(self.position, pa.string())
        arrays["partial"] = pa.array(self.partial, pa.bool_())
        for name, column in self.maps.items():
            arrays[name] = column.array()
        arrays["origin"] = pa.array(self.origin, pa.string())
        arrays["offset"] = pa.array(self.offset, pa.int64())
        arrays["line"] = pa.array(self.line, pa.int64())
        arrays["item"] = pa.array(self.item, pa.int32())
        arrays["error_code"] = pa.array(self.error_code, pa.string())
        arrays["error_message"] = pa.array(self.error_message, pa.string())
        arrays["raw"] = pa.array(self.raw, pa.binary())
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


def _position_text(position: Any) -> str:
    """``position`` as JSON text with its keys sorted: the same text however the producer
    ordered them."""
    return json_bytes(position, orjson.OPT_SORT_KEYS).decode()


def _meta_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json_bytes(v).decode()


def _unexpected(exc: BaseException, raw: bytes, dialect: str | None) -> Any:
    from cdcflow.decode.decoder import unexpected

    return unexpected(exc, raw, dialect)


def columnar_batch(
    dialect: str,
    found: Columnar,
    origin: str | None,
    *,
    origins: pa.Array | None = None,
    offsets: pa.Array | None = None,
    lines: pa.Array | None = None,
    metadata: pa.Array | None = None,
) -> pa.RecordBatch:
    """The events a dialect read in bulk as one record batch (their lines' coordinates; item
    0; the canonical fields the dialect did not give are null, ``metadata`` empty and
    ``partial`` false, as the row decoder has them for such events). ``origins``,
    ``offsets``, ``lines`` and ``metadata``, one per event (in ``found.rows`` order), replace
    those of lines of one file (the coordinates and lineage of Kafka records)."""
    import pyarrow as pa

    from cdcflow.wire import constant_map

    schema = arrow_schema()
    rows = found.rows
    n = len(rows)
    given = found.columns
    read = found.lines
    fixed: dict[str, Any] = {
        "dialect": pa.repeat(pa.scalar(dialect, pa.string()), n),
        "metadata": constant_map([], [], n) if metadata is None else metadata,
        "partial": pa.repeat(pa.scalar(False), n),
        "origin": pa.repeat(pa.scalar(origin, pa.string()), n) if origins is None else origins,
        "offset": pa.array(read.offsets[rows], pa.int64()) if offsets is None else offsets,
        "line": pa.array(read.numbers[rows], pa.int64()) if lines is None else lines,
        "item": pa.repeat(pa.scalar(0, pa.int32()), n),
    }
    arrays = []
    for field in schema:
        found_array = given.get(field.name, fixed.get(field.name))
        arrays.append(pa.nulls(n, field.type) if found_array is None else found_array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
