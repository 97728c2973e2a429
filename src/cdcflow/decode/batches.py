"""The functions Spark runs on each Arrow batch (``mapInArrow``) to decode raw messages: files
(``binaryFile`` rows, one file each) and records (Kafka-shaped rows or one message column, one
message each) → canonical events, rejections and segments as record batches with the schema of
:func:`cdcflow.event.spark_schema_ddl` (:mod:`cdcflow.decode.columns`). A batch of plain records
(no headers, one dialect that reads columns) is decoded column-wise, in large parts; any other
record one at a time, through a :class:`~cdcflow.decode.decoder.Decoder` in wire mode. pyarrow
is imported by the functions, never by this module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcflow.decode.columns import Columns, columnar_batch
from cdcflow.decode.decoder import Decoder, Outcome, unexpected
from cdcflow.dialects.model import Columnar, DialectOptions, Rejection
from cdcflow.errors import DecodeError
from cdcflow.transports import avro, kafka
from cdcflow.transports.limits import Limits
from cdcflow.transports.message import KafkaCoordinates, RawMessage

if TYPE_CHECKING:
    import pyarrow as pa


def decode_files(
    batches: Iterator[pa.RecordBatch],
    dialect: str,
    options: DialectOptions,
    max_rows: int = 20000,
    source: str = "",
    bulk: bool = True,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function over ``binaryFile`` batches (path, content, ...). ``bulk``:
    plain JSON-lines files are read in bulk where the dialect can (the row decoder reads
    every other line, and every line when ``bulk`` is false). Never raises for bad input: a
    message nothing foresaw is a ``DECODER_ERROR`` row, a zero-byte file an ``EMPTY_FILE``
    row."""
    decoder = Decoder(dialect, options, wire=True)
    cols = Columns(wire=True)
    for batch in batches:
        paths = batch.column("path").to_pylist()
        contents = batch.column("content").to_pylist()
        for path, content in zip(paths, contents, strict=True):
            found = decoder.bulk(content or b"", path) if bulk else None
            read = None
            if found is not None:
                try:
                    read = columnar_batch(decoder.dialect_name, found, path)
                except Exception:  # the row decoder reads the file and names any problem
                    found = None
            if found is not None and read is not None:
                yield read
                outcomes = _the_rest(decoder, found, path)
            else:
                outcomes = decoder.decode_file(content or b"", path)
            for outcome in outcomes:
                cols.add_outcome(outcome, source)
                if cols.rows >= max_rows:
                    yield cols.to_batch()
                    cols = Columns(wire=True)
    if cols.rows:
        yield cols.to_batch()


def _the_rest(decoder: Decoder, found: Columnar, origin: str) -> Iterator[Outcome]:
    """The lines a dialect did not read in bulk, decoded one by one."""
    import numpy as np

    lines = found.lines
    rest = np.ones(len(lines.offsets), dtype=bool)
    rest[found.rows] = False
    for i in np.flatnonzero(rest).tolist():
        msg = RawMessage(
            lines.line(i), origin=origin, offset=int(lines.offsets[i]), line=int(lines.numbers[i])
        )
        yield decoder.decode(msg)


def decode_records(
    batches: Iterator[pa.RecordBatch],
    dialect: str,
    options: DialectOptions,
    source: str = "",
    max_rows: int = 20000,
    bulk: bool = True,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function over messages, one per row, in the columns of Spark's Kafka
    source (``value``, and any of ``key``, ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``headers``). A row with coordinates is a Kafka record: its origin is
    ``kafka://<topic>/<partition>``, its offset the record's, its key and headers reach the
    dialects that read them; a row with a ``value`` only is a bare message. ``bulk``: values
    that are plain JSON lines are read in bulk where the dialect can (the row decoder reads
    every other record, and every record when ``bulk`` is false). Never raises for bad
    input."""
    decoder = Decoder(dialect, options, wire=True)
    reading = _bulk_reading(decoder) if bulk else None
    cols = Columns(wire=True)
    for batch in batches:
        if reading is not None:
            read, batch = _bulk_records(decoder, reading, batch)
            for events in read:
                for start in range(0, events.num_rows, max_rows):
                    yield events.slice(start, max_rows)
        columns = _reader(batch)
        values, keys, topics = columns("value"), columns("key"), columns("topic")
        partitions, offsets, headers = columns("partition"), columns("offset"), columns("headers")
        stamps = columns("timestamp")
        for i in range(batch.num_rows):
            outcome = _record(
                decoder,
                values[i],
                keys[i],
                headers[i],
                topics[i],
                partitions[i],
                offsets[i],
                stamps[i],
            )
            cols.add_outcome(outcome, source)
            if cols.rows >= max_rows:
                yield cols.to_batch()
                cols = Columns(wire=True)
    if cols.rows:
        yield cols.to_batch()


def _reader(batch: pa.RecordBatch) -> Callable[[str], list[Any]]:
    """A reader of a batch's columns as Python lists (an absent column: nulls); timestamps as
    epoch milliseconds, as Kafka itself gives them."""
    names = set(batch.schema.names)

    def read(name: str) -> list[Any]:
        if name not in names:
            return [None] * batch.num_rows
        return list(_as_read(batch.column(name)).to_pylist())

    return read


def _as_read(array: pa.Array) -> pa.Array:
    """A column of a Kafka batch as the decoder reads it: timestamps as epoch milliseconds."""
    import pyarrow as pa

    if pa.types.is_timestamp(array.type):
        return array.cast(pa.timestamp("ms", tz=array.type.tz), safe=False).cast(pa.int64())
    return array


# ---------------------------------------------------------------------- Kafka records in bulk

#: The metadata a dialect's lineage may give a Kafka record for the bulk path to read its
#: records, with the value each has for a probe record (topic ``t``, partition 0, offset 1,
#: timestamp 2, key ``k``; see :func:`_bulk_reading`).
_LINEAGE: dict[str, Any] = {
    "kafka_topic": "t",
    "kafka_partition": 0,
    "kafka_offset": 1,
    "kafka_timestamp": 2,
    "kafka_key": "k",
}
#: A part of a batch's records the dialect refuses in bulk as a whole is halved down to
#: parts of about this many records.
_SMALLEST_PART = 256


@dataclass(frozen=True)
class _BulkReading:
    """How a decoder reads Kafka records in bulk: the metadata its dialect gives a record
    (names, in the dialect's order) and the prefix of the headers the dialect reads."""

    lineage: tuple[str, ...]
    header_prefix: str


def _bulk_reading(decoder: Decoder) -> _BulkReading | None:
    """How the decoder reads Kafka records in bulk, or ``None`` when it does not: its fixed
    dialect must read JSON lines in bulk, name the headers it reads (``header_prefix``) and
    give a record no metadata but its coordinates and key, as they are."""
    d = decoder.fixed
    prefix = getattr(d, "header_prefix", None)
    if d is None or not decoder.reads_in_bulk or not isinstance(prefix, str) or not prefix:
        return None
    probe = RawMessage(b"", key=b"k", kafka=KafkaCoordinates("t", 0, 1, 2))
    try:
        meta = d.lineage(probe)
    except Exception:  # a dialect that cannot say: its records are read one by one
        return None
    if any(name not in _LINEAGE or _LINEAGE[name] != v for name, v in meta.items()):
        return None
    return _BulkReading(tuple(meta), prefix.lower())


def _bulk_records(
    decoder: Decoder, reading: _BulkReading, batch: pa.RecordBatch
) -> tuple[list[pa.RecordBatch], pa.RecordBatch]:
    """The events of a batch's records whose values are plain JSON lines, read in bulk as the
    row decoder reads each record, and the records left to the row decoder (the whole batch
    when reading in bulk fails)."""
    import numpy as np
    import pyarrow as pa

    n = batch.num_rows
    try:
        if not _bulk_columns(batch):
            return [], batch
        picked, bare = _plain_records(batch, reading.header_prefix, decoder.limits)
        if len(picked) < 2:
            return [], batch
        values = batch.column("value").to_pylist()
        read: list[pa.RecordBatch] = []
        seen = np.zeros(n, dtype=bool)
        events = 0
        for found, part in _read_parts(decoder, values, picked):
            rows = part[found.lines.numbers[found.rows] - 1]
            read.append(_bulk_batch(decoder.dialect_name, found, batch, rows, bare, reading))
            seen[rows] = True
            events += len(rows)
        if int(seen.sum()) != events:
            raise ValueError("a record read twice in bulk")
    except Exception:  # the row decoder reads every record and names any problem
        return [], batch
    if not events:
        return [], batch
    return read, batch.take(pa.array(np.flatnonzero(~seen)))


def _bulk_columns(batch: pa.RecordBatch) -> bool:
    """Whether a batch's columns have the types the bulk path reads (those of Spark's Kafka
    source; an absent or all-null column will do but for ``value``)."""
    import pyarrow as pa

    types = pa.types
    kinds: dict[str, tuple[Callable[[pa.DataType], bool], ...]] = {
        "key": (types.is_binary, types.is_large_binary),
        "topic": (types.is_string, types.is_large_string),
        "partition": (types.is_integer,),
        "offset": (types.is_integer,),
        "timestamp": (types.is_integer, types.is_timestamp),
        "headers": (types.is_list, types.is_large_list),
    }
    schema = batch.schema
    if "value" not in schema.names:
        return False
    value = schema.field("value").type
    if not (types.is_binary(value) or types.is_large_binary(value)):
        return False
    for name, checks in kinds.items():
        if name in schema.names:
            t = schema.field(name).type
            if not (types.is_null(t) or any(check(t) for check in checks)):
                return False
    return True


def _plain_records(batch: pa.RecordBatch, prefix: str, limits: Limits) -> tuple[Any, Any]:
    """The rows of the records the bulk path may read — a value that is one JSON object on
    one line (no Confluent frame, within the size limit), a key that is no Confluent frame,
    no header the dialect reads (named ``prefix...``) — and for every row whether it is a
    bare message (no coordinates, key or headers: no lineage)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdcflow.wire import mask

    n = batch.num_rows
    names = set(batch.schema.names)

    def column(name: str) -> pa.Array:
        return batch.column(name) if name in names else pa.nulls(n)

    data, starts, ends = _bytes_of(batch.column("value"))
    lengths = ends - starts
    ok = (lengths > 0) & (lengths <= limits.max_message_bytes)
    ok &= _first_bytes(data, starts) == ord("{")
    at = _line_breaks(data)
    owner = np.searchsorted(starts, at, side="right") - 1
    ok[owner[(owner >= 0) & (at < ends[np.maximum(owner, 0)])]] = False
    key = column("key")
    if pa.types.is_null(key.type):
        keyless = np.ones(n, dtype=bool)
    else:
        data, starts, ends = _bytes_of(key)
        keyless = ends == starts
        ok &= ~((ends - starts >= 5) & (_first_bytes(data, starts) == avro.CONFLUENT_MAGIC[0]))
    headers = column("headers")
    if pa.types.is_null(headers.type):
        with_headers = np.zeros(n, dtype=bool)
    else:
        with_headers = mask(pc.greater(pc.list_value_length(headers), 0))
    for i in np.flatnonzero(ok & with_headers).tolist():
        ok[i] = _plain_headers(headers[i].as_py(), prefix)
    bare = keyless & ~with_headers
    for name in ("topic", "partition", "offset"):
        bare &= mask(pc.is_null(column(name)))
    return np.flatnonzero(ok), bare


def _bytes_of(array: pa.Array) -> tuple[Any, Any, Any]:
    """A binary column's bytes and each value's start and end in them (numpy arrays; a null
    is empty)."""
    import numpy as np
    import pyarrow as pa

    from cdcflow.wire import mask

    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64), np.zeros(0, np.int64)
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(
        offsets_buffer, dtype=width, count=n + 1, offset=array.offset * np.dtype(width).itemsize
    ).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.zeros(0, dtype=np.uint8)
    if data_buffer is not None and last > first:
        data = np.frombuffer(data_buffer, dtype=np.uint8, count=last - first, offset=first)
    starts = offsets[:-1] - first
    ends = np.where(mask(array.is_valid()), offsets[1:] - first, starts)
    return data, starts, ends


def _line_breaks(data: Any) -> Any:
    """Where a binary column's bytes hold a line break (``\\n`` or ``\\r``), read a megabyte at
    a time."""
    import numpy as np

    step = 1 << 20
    found = [np.zeros(0, dtype=np.int64)]
    for start in range(0, len(data), step):
        chunk = data[start : start + step]
        hits = np.flatnonzero((chunk == ord("\n")) | (chunk == ord("\r")))
        if len(hits):
            found.append(hits + start)
    return np.concatenate(found)


def _first_bytes(data: Any, starts: Any) -> Any:
    """The first byte of each value (of values that have one) of a binary column's bytes."""
    import numpy as np

    if not len(data):
        return np.full(len(starts), -1, dtype=np.int16)
    return data[np.minimum(starts, len(data) - 1)].astype(np.int16)


def _plain_headers(headers: Any, prefix: str) -> bool:
    """Whether a record's headers hold none the dialect reads (named ``prefix...``, in any
    case)."""
    if not isinstance(headers, list):
        return False
    for h in headers:
        if not isinstance(h, dict):
            return False
        name = h.get("key")
        if name is not None and str(name).lower().startswith(prefix):
            return False
    return True


def _read_parts(decoder: Decoder, values: list[Any], picked: Any) -> list[tuple[Columnar, Any]]:
    """The ``picked`` records' values read in bulk, as (what the dialect read, the rows of
    its lines' records). A part the dialect refuses as a whole (one odd record spoils it) is
    halved and its halves read, while the records read again come to at most twice those
    picked."""
    out: list[tuple[Columnar, Any]] = []
    todo = [picked]
    budget = 2 * len(picked)
    while todo:
        part = todo.pop(0)
        found = decoder.columnar(b"\n".join([values[i] for i in part.tolist()]))
        if found is not None:
            out.append((found, part))
        elif len(part) >= 2 * _SMALLEST_PART and budget >= len(part):
            budget -= len(part)
            half = len(part) // 2
            todo.extend((part[:half], part[half:]))
    return out


def _bulk_batch(
    dialect: str,
    found: Columnar,
    batch: pa.RecordBatch,
    rows: Any,
    bare: Any,
    reading: _BulkReading,
) -> pa.RecordBatch:
    """The events read in bulk from the records ``rows`` of a batch, with each record's
    coordinates (origin, offset, no line) and the metadata the dialect's lineage gives it
    (none for a bare message)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdcflow.wire import struct_map

    n = len(rows)
    index = pa.array(rows, pa.int64())
    names = set(batch.schema.names)

    def column(name: str) -> pa.Array:
        if name not in names:
            return pa.nulls(n)
        return _as_read(batch.column(name)).take(index)

    def text(values: pa.Array) -> pa.Array:
        return pc.cast(values, pa.string())

    topic, partition, offset = text(column("topic")), text(column("partition")), column("offset")
    texts = {
        "kafka_topic": topic,
        "kafka_partition": partition,
        "kafka_offset": text(offset),
        "kafka_timestamp": text(column("timestamp")),
        "kafka_key": _key_texts(column("key")),
    }
    coordinates = pa.array(~bare[rows])
    listed = [texts[name] for name in reading.lineage]
    present = [pc.and_(pc.is_valid(c), coordinates) for c in listed]
    metadata = struct_map(list(reading.lineage), listed, present, pa.repeat(True, n))
    empty = pa.scalar("", pa.string())
    origins = pc.binary_join_element_wise(
        "kafka://", topic, "/", pc.fill_null(partition, empty), ""
    )
    return columnar_batch(
        dialect,
        found,
        None,
        origins=origins,
        offsets=pc.fill_null(pc.cast(offset, pa.int64()), 0),
        lines=pa.nulls(n, pa.int64()),
        metadata=metadata,
    )


def _key_texts(keys: pa.Array) -> pa.Array:
    """Records' keys as text, as the dialects read them (bad UTF-8 replaced)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(keys, pa.string())
    except pa.ArrowInvalid:
        found = keys.to_pylist()
        return pa.array(
            [None if k is None else k.decode("utf-8", "replace") for k in found], pa.string()
        )


def _record(
    decoder: Decoder,
    value: bytes | None,
    key: bytes | None = None,
    headers: Any = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    timestamp: int | None = None,
) -> Outcome:
    """The outcome of one row: a Kafka record when it has a topic, partition, offset, key or
    headers, else a bare message."""
    body = value or b""
    try:
        if topic is None and partition is None and offset is None and not key and not headers:
            msg = RawMessage(b"")
            kafka.read_value(msg, body, decoder.options.schema_dir)
        else:
            msg = kafka.record_message(
                body, key, headers, topic, partition, offset, timestamp, decoder.options.schema_dir
            )
    except Exception as e:  # an unreadable Confluent frame, or what nobody foresaw
        where = RawMessage(body, origin=kafka.origin(topic, partition), offset=offset or 0)
        name = decoder.fixed.name if decoder.fixed is not None else None
        if isinstance(e, DecodeError):
            rejection = Rejection(e.code, e.message, body, dialect=name)
        else:
            rejection = unexpected(e, body, name)
        return Outcome(where, [], [rejection])
    return decoder.decode(msg)
