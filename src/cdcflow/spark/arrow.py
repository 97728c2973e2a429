"""Decoding inside Spark: files → canonical events, Arrow-batched (``mapInArrow``).

Each ``binaryFile`` row (one file) goes through :class:`cdcflow.framing.Decoder`; events and
rejections leave as columnar Arrow record batches with the schema of
:func:`cdcflow.event.spark_schema_ddl`. No row-at-a-time UDF, nothing collected to the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import orjson

from cdcflow.dialects.base import DialectOptions, Segment
from cdcflow.event import spark_schema_ddl
from cdcflow.framing import Decoder, Outcome
from cdcflow.types import json_default, to_wire

#: ``operation`` of rows that are segments of a split message, not events.
SEGMENT = "SEGMENT"

RAW_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def arrow_schema() -> Any:
    """The decoded-events schema as a ``pyarrow.Schema``."""
    import pyarrow as pa

    m = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            ("id", pa.string()),
            ("dialect", pa.string()),
            ("source", pa.string()),
            ("database", pa.string()),
            ("schema", pa.string()),
            ("table", pa.string()),
            ("operation", pa.string()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("transaction_id", pa.string()),
            ("sequence", pa.string()),
            ("position", pa.string()),
            ("key", m),
            ("before", m),
            ("after", m),
            ("partial", pa.bool_()),
            ("metadata", m),
            ("ddl_type", pa.string()),
            ("ddl_command", pa.string()),
            ("types", m),
            ("origin", pa.string()),
            ("offset", pa.int64()),
            ("line", pa.int64()),
            ("item", pa.int32()),
            ("error_code", pa.string()),
            ("error_message", pa.string()),
            ("raw", pa.binary()),
        ]
    )


_SCALARS = (
    "id",
    "dialect",
    "source",
    "database",
    "schema",
    "table",
    "operation",
    "transaction_id",
    "sequence",
    "ddl_type",
    "ddl_command",
)


class _Columns:
    """Column lists for one output batch; maps kept as flat keys/values + offsets."""

    def __init__(self) -> None:
        self.scalars: dict[str, list[Any]] = {f: [] for f in _SCALARS}
        self.timestamp: list[Any] = []
        self.position: list[str | None] = []
        self.partial: list[bool] = []
        self.maps: dict[str, tuple[list[int], list[str], list[str | None], list[bool]]] = {
            f: ([0], [], [], []) for f in ("key", "before", "after", "metadata", "types")
        }
        self.origin: list[str | None] = []
        self.offset: list[int] = []
        self.line: list[int | None] = []
        self.item: list[int | None] = []
        self.error_code: list[str | None] = []
        self.error_message: list[str | None] = []
        self.raw: list[bytes | None] = []
        self.rows = 0

    def _map(self, name: str, value: dict[str, Any] | None, conv: Any) -> None:
        offsets, keys, values, valid = self.maps[name]
        if value is None:
            offsets.append(offsets[-1])
            valid.append(False)
            return
        keys.extend(value)
        values.extend(map(conv, value.values()))
        offsets.append(len(keys))
        valid.append(True)

    def add_event(
        self, ev: dict[str, Any], origin: str | None, offset: int, line: int | None, item: int
    ) -> None:
        for f in _SCALARS:
            self.scalars[f].append(ev.get(f))
        self.timestamp.append(ev.get("timestamp"))
        pos = ev.get("position")
        self.position.append(
            None if pos is None else orjson.dumps(pos, default=json_default).decode()
        )
        self.partial.append(bool(ev.get("partial")))
        self._map("key", ev.get("key"), to_wire)
        self._map("before", ev.get("before"), to_wire)
        self._map("after", ev.get("after"), to_wire)
        self._map("metadata", ev.get("metadata") or {}, _meta_value)
        self._map("types", ev.get("types") or {}, _identity)
        self.origin.append(origin)
        self.offset.append(offset)
        self.line.append(line)
        self.item.append(item)
        self.error_code.append(None)
        self.error_message.append(None)
        self.raw.append(None)
        self.rows += 1

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
    ) -> None:
        for f in _SCALARS:
            self.scalars[f].append(None)
        self.scalars["dialect"][-1] = dialect
        self.timestamp.append(None)
        self.position.append(None)
        self.partial.append(False)
        for name in self.maps:
            self._map(name, None, _identity)
        self.origin.append(origin)
        self.offset.append(offset)
        self.line.append(line)
        self.item.append(item)
        self.error_code.append(code)
        self.error_message.append(message)
        self.raw.append(raw)
        self.rows += 1

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
            self._map(name, None, _identity)
        self._map(
            "metadata",
            {
                "segment.index": str(seg.index),
                "segment.final": None if seg.final is None else str(seg.final).lower(),
                "segment.total": None if seg.total is None else str(seg.total),
                "cdcflow.source": source,
            },
            _identity,
        )
        self.origin.append(origin)
        self.offset.append(offset)
        self.line.append(line)
        self.item.append(seg.item)
        self.error_code.append(None)
        self.error_message.append(None)
        self.raw.append(seg.raw)
        self.rows += 1

    def to_batch(self) -> Any:
        import pyarrow as pa

        schema = arrow_schema()
        arrays: dict[str, Any] = {}
        for f in _SCALARS:
            arrays[f] = pa.array(self.scalars[f], pa.string())
        arrays["timestamp"] = pa.array(self.timestamp, pa.timestamp("us", tz="UTC"))
        arrays["position"] = pa.array(self.position, pa.string())
        arrays["partial"] = pa.array(self.partial, pa.bool_())
        for name, (offsets, keys, values, valid) in self.maps.items():
            mask = pa.array([not v for v in valid], pa.bool_())
            arrays[name] = pa.MapArray.from_arrays(
                pa.array(offsets, pa.int32()),
                pa.array(keys, pa.string()),
                pa.array(values, pa.string()),
                mask=mask,
            )
        arrays["origin"] = pa.array(self.origin, pa.string())
        arrays["offset"] = pa.array(self.offset, pa.int64())
        arrays["line"] = pa.array(self.line, pa.int64())
        arrays["item"] = pa.array(self.item, pa.int32())
        arrays["error_code"] = pa.array(self.error_code, pa.string())
        arrays["error_message"] = pa.array(self.error_message, pa.string())
        arrays["raw"] = pa.array(self.raw, pa.binary())
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


def _identity(v: Any) -> Any:
    return v


def _meta_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return orjson.dumps(v, default=json_default).decode()


def outcomes_to_batch(outcomes: Iterable[Outcome], source: str = "") -> Any:
    """Events, rejections and segments of decoded messages as one Arrow record batch."""
    cols = _Columns()
    for o in outcomes:
        _add(cols, o, source)
    return cols.to_batch()


def _add(cols: _Columns, o: Outcome, source: str) -> None:
    m = o.message
    offset = m.offset if m.index is None else m.index
    for i, ev in enumerate(o.events):
        cols.add_event(ev, m.origin, offset, m.line, i)
    for r in o.rejections:
        cols.add_rejection(r.code, r.message, r.raw, r.dialect, m.origin, offset, m.line, r.item)
    for seg in o.segments:
        cols.add_segment(seg, source, m.origin, offset, m.line)


def decode_files(
    batches: Iterator[Any],
    dialect: str,
    options: DialectOptions,
    max_rows: int = 20000,
    source: str = "",
) -> Iterator[Any]:
    """``mapInArrow`` function over ``binaryFile`` batches (path, content, ...)."""
    decoder = Decoder(dialect, options)
    cols = _Columns()
    for batch in batches:
        paths = batch.column("path").to_pylist()
        contents = batch.column("content").to_pylist()
        for path, content in zip(paths, contents, strict=True):
            for outcome in decoder.decode_file(content or b"", path):
                _add(cols, outcome, source)
                if cols.rows >= max_rows:
                    yield cols.to_batch()
                    cols = _Columns()
    if cols.rows:
        yield cols.to_batch()


def decode_dataframe(
    df: Any, dialect: str = "auto", options: DialectOptions | None = None, source: str = ""
) -> Any:
    """Canonical events (and rejections, and segments of split messages tagged with the source
    name) of a ``binaryFile`` DataFrame, batch or streaming."""
    fn = partial(decode_files, dialect=dialect, options=options or DialectOptions(), source=source)
    return df.mapInArrow(fn, spark_schema_ddl())


def read_raw(
    spark: Any, path: str, streaming: bool, max_files_per_trigger: int | None = None
) -> Any:
    """Files of a landing zone as ``binaryFile`` rows (sub-folders included).

    Names starting with ``_`` or ``.`` are ignored by Spark (land files by atomic rename);
    ``maxFileAge`` is set far out so files with old modification times are not skipped.
    """
    if streaming:
        reader = spark.readStream.format("binaryFile").schema(RAW_SCHEMA)
        reader = reader.option("maxFileAge", "36500d")
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    else:
        reader = spark.read.format("binaryFile")
    return reader.option("recursiveFileLookup", "true").load(path)
