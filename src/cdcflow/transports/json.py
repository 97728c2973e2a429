"""JSON transport: documents, lines, arrays and concatenated documents; exact numbers.

A file is one JSON document (pretty-printed or not), a top-level array of messages, JSON lines,
or documents written one after another (console consumers print them so). Parse errors get a
stable code decided from the data and the error position, never from the error's text.
"""

from __future__ import annotations

import io
import json as pyjson
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from cdcflow.errors import DecodeError
from cdcflow.transports.message import RawMessage
from cdcflow.types import json_bytes

if TYPE_CHECKING:
    import pyarrow as pa

_WS = b" \t\r\n"
#: Numbers orjson cannot keep exactly: a fraction or exponent, or 20+ digits.
_RISKY_NUMBER = re.compile(rb"[:\[,]\s*-?(?:\d+[.eE]|\d{20})")
_MISSING = object()
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
#: Bytes that start a line of spaces only (space, tab, carriage return).
_SPACES = (32, 9, 13)


def json_error(data: bytes, exc: pyjson.JSONDecodeError | ValueError) -> DecodeError:
    """A stable code for why ``data`` is not a JSON document: ``NOT_JSON`` (empty or not
    JSON), ``BAD_UTF8`` or ``TRUNCATED_JSON`` (it stops inside a value)."""
    if not data.strip(_WS):
        return DecodeError("empty message", code="NOT_JSON")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as u:
        return DecodeError(
            f"message is not valid UTF-8 (byte 0x{data[u.start]:02x} at offset {u.start})",
            code="BAD_UTF8",
        )
    pos = getattr(exc, "pos", None)
    stripped = data.rstrip(_WS)
    if (
        isinstance(pos, int)
        and pos >= len(stripped)
        and stripped.lstrip(_WS)[:1] in (b"{", b"[", b'"')
    ):
        return DecodeError(
            f"truncated JSON: the message ends at byte {len(stripped)} inside a value",
            code="TRUNCATED_JSON",
        )
    where = f" at byte {pos}" if isinstance(pos, int) else ""
    return DecodeError(f"message is not JSON{where}: {_snippet(data)}", code="NOT_JSON")


def _snippet(data: bytes) -> str:
    text = data[:60].decode("utf-8", "replace")
    return repr(text) + ("..." if len(data) > 60 else "")


def parse(data: bytes | str) -> Any:
    """The JSON value of ``data`` or a coded :class:`DecodeError` (numbers as orjson reads
    them: fractions are floats)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raw = data.encode() if isinstance(data, str) else data
        raise json_error(raw, e) from None


def has_inexact_numbers(data: bytes) -> bool:
    """Whether ``data`` may hold numbers a float cannot carry (fractions, exponents, 20+
    digits)."""
    return _RISKY_NUMBER.search(data) is not None


def loads_exact(data: bytes | str) -> Any:
    """JSON with exact numbers: numbers with a fraction become ``Decimal`` and integers of any
    size stay integers (orjson turns both into floats). Raises ``orjson.JSONDecodeError``."""
    raw = data.encode() if isinstance(data, str) else data
    doc = orjson.loads(raw)
    if _RISKY_NUMBER.search(raw):
        try:
            doc = pyjson.loads(raw.decode("utf-8"), parse_float=Decimal)
        except RecursionError:
            raise orjson.JSONDecodeError(
                "nested too deeply", raw.decode("utf-8", "replace"), 0
            ) from None
    return doc


def parse_exact(data: bytes | str) -> Any:
    """:func:`loads_exact` with a coded :class:`DecodeError`."""
    try:
        return loads_exact(data)
    except (orjson.JSONDecodeError, ValueError) as e:
        raw = data.encode() if isinstance(data, str) else data
        raise json_error(raw, e) from None


def dumps(value: Any) -> bytes:
    """Compact JSON of a decoded value: exact decimals, ISO timestamps, base64 bytes, integers
    of any size, non-text keys as text."""
    return json_bytes(value, orjson.OPT_NON_STR_KEYS)


def kind(value: Any) -> str:
    """How a JSON value is described in error messages: ``an object``, ``a number``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float | Decimal):
        return "a number"
    return type(value).__name__


def _header_items(headers: Any) -> list[tuple[str, Any]]:
    if isinstance(headers, Mapping):
        items: list[tuple[Any, Any]] = list(headers.items())
    elif isinstance(headers, list):
        items = [(h.get("key"), h.get("value")) for h in headers if isinstance(h, dict)]
    else:
        return []
    return [(str(k), v) for k, v in items if k is not None]


def header_map(headers: Any) -> dict[str, str]:
    """Transport headers as lower-case names → text, from a mapping or a list of
    ``{"key", "value"}`` records (values as text or bytes)."""
    out: dict[str, str] = {}
    for k, v in _header_items(headers):
        if isinstance(v, bytes | bytearray):
            v = bytes(v).decode("utf-8", "replace")
        out[k.lower()] = "" if v is None else str(v)
    return out


def header_bytes(headers: Any) -> dict[str, bytes]:
    """Transport headers (mapping or list of ``{"key", "value"}``) as names → bytes, names kept
    as written."""
    out: dict[str, bytes] = {}
    for k, v in _header_items(headers):
        if isinstance(v, bytes | bytearray):
            out[k] = bytes(v)
        else:
            out[k] = b"" if v is None else str(v).encode("utf-8")
    return out


def _looks_like_lines(data: bytes) -> bool:
    """JSON-lines files start with a line that is a whole document (or meant to be one)."""
    end = data.find(b"\n")
    first = (data if end < 0 else data[:end]).strip(_WS)
    if not first:
        return False
    if first[:1] in (b"{", b"[") and first[-1:] in (b"}", b"]"):
        return True
    try:
        orjson.loads(first)
        return True
    except orjson.JSONDecodeError:
        return False


def _concatenated(data: bytes) -> list[tuple[int, int]] | None:
    """Byte ranges of JSON documents written one after another (more than one, nothing else),
    else ``None``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = pyjson.JSONDecoder()
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            _, end = decoder.raw_decode(text, i)
        except (pyjson.JSONDecodeError, RecursionError):
            return None
        spans.append((i, end))
        i = end
    if len(spans) < 2:
        return None
    if text.isascii():
        return spans
    # character positions → byte positions
    return [(len(text[:a].encode()), len(text[:b].encode())) for a, b in spans]


def split(data: bytes, origin: str | None) -> Iterator[RawMessage]:
    """Messages of a JSON file: a whole document, the elements of a top-level array, JSON lines,
    or concatenated documents. What is none of these is one message (its dialect or the JSON
    parser says why it is unreadable)."""
    stripped = data.strip(_WS)
    if not stripped:
        return
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = _MISSING
    if doc is not _MISSING:
        if isinstance(doc, list):
            if has_inexact_numbers(data):
                # elements keep their numbers as written (orjson read them as floats)
                for i, element in enumerate(loads_exact(data)):
                    yield RawMessage(data=dumps(element), origin=origin, index=i)
                return
            for i, element in enumerate(doc):
                yield RawMessage(
                    data=orjson.dumps(element), origin=origin, index=i, doc=element, parsed=True
                )
        else:
            yield RawMessage(data=data, origin=origin, offset=0, line=1, doc=doc, parsed=True)
        return
    if _looks_like_lines(data):
        yield from _lines(data, origin)
        return
    spans = _concatenated(data)
    if spans is None:
        yield RawMessage(data=data, origin=origin, offset=0, line=1)
        return
    line, seen = 1, 0
    for start, end in spans:
        line += data.count(b"\n", seen, start)
        seen = start
        yield RawMessage(data=data[start:end], origin=origin, offset=start, line=line)


def _lines(data: bytes, origin: str | None) -> Iterator[RawMessage]:
    offset = 0
    line_no = 0
    for raw_line in data.split(b"\n"):
        line_no += 1
        start = offset
        offset += len(raw_line) + 1
        line = raw_line.strip(_WS)
        if line:
            yield RawMessage(data=line, origin=origin, offset=start, line=line_no)


@dataclass(frozen=True)
class JsonLines:
    """A JSON-lines file read in bulk: one Arrow row per non-blank line, with each line's byte
    ``offsets`` and line ``numbers`` (the coordinates :func:`split` gives the same lines) and
    the lines' ``texts`` (an Arrow string array)."""

    data: bytes
    table: pa.Table
    texts: pa.Array
    offsets: Any  # numpy int64 array
    numbers: Any  # numpy int64 array
    ends: Any  # numpy int64 array

    def line(self, i: int) -> bytes:
        """Row ``i``'s line as :func:`split` gives it (surrounding whitespace removed)."""
        return self.data[self.offsets[i] : self.ends[i]].strip(_WS)


def read_lines(
    data: bytes, text_fields: Sequence[str] = (), known: pa.Schema | None = None
) -> JsonLines | None:
    """The file read by Arrow's JSON reader when :func:`split` would frame it as JSON lines and
    the reader takes every line (valid UTF-8, one object per line, no key twice), else
    ``None``. Top-level ``text_fields``, and any field the reader would read as a date or
    time, stay text. ``known``: the schema of a similar file (the reader need not infer what
    it says; a file that does not fit it is read again without it)."""
    if not _more_than_one_document(data):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = np.frombuffer(data, dtype=np.uint8)
    breaks = np.flatnonzero(raw == 10)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(data)]))
    offsets = pa.array(np.concatenate((starts, [ends[-1]])).astype(np.int64))
    all_lines = pa.LargeStringArray.from_buffers(
        len(starts), offsets.buffers()[1], pa.py_buffer(data)
    )
    keep = np.flatnonzero(ends > starts)
    spaced = keep[np.isin(raw[starts[keep]], _SPACES)]
    if len(spaced):  # lines that start with a space may be spaces only
        blank = pc.equal(pc.binary_length(pc.utf8_trim(all_lines.take(spaced), " \t\r")), 0)
        keep = np.setdiff1d(keep, spaced[np.asarray(blank.to_numpy(zero_copy_only=False))])
    table = None
    if known is not None:
        table = _arrow_lines(data, known)
    if table is None:
        table = _arrow_lines(data, pa.schema([(f, pa.string()) for f in text_fields]))
    if table is not None and _has_temporal(table.schema):
        table = _arrow_lines(data, _as_text(table.schema))
    if table is None or table.num_rows != len(keep):
        return None
    return JsonLines(
        data,
        table,
        all_lines.take(pa.array(keep)),
        starts[keep],
        keep + 1,
        ends[keep],
    )


def known_schema(schema: pa.Schema) -> pa.Schema:
    """The part of a file's schema that holds for the next file read with it: fields whose
    type the reader found (not all-null ones)."""
    import pyarrow as pa

    def known(t: pa.DataType) -> pa.DataType | None:
        if pa.types.is_null(t):
            return None
        if pa.types.is_struct(t):
            fields = [
                pa.field(t.field(i).name, k)
                for i in range(t.num_fields)
                if (k := known(t.field(i).type)) is not None
            ]
            return pa.struct(fields) if fields else None
        return t

    return pa.schema([pa.field(f.name, k) for f in schema if (k := known(f.type)) is not None])


def _more_than_one_document(data: bytes) -> bool:
    """Whether :func:`split` frames ``data`` as lines: its first line is a whole document and
    more follows (so the data is not one document)."""
    end = data.find(b"\n")
    if end < 0 or _NOT_SPACE.search(data, end) is None:
        return False
    try:
        orjson.loads(data[:end])
    except orjson.JSONDecodeError:
        return False
    return True


def _arrow_lines(data: bytes, schema: pa.Schema) -> pa.Table | None:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        return pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
    except pa.ArrowInvalid:
        return None


def _temporal(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_temporal(t) or (
        pa.types.is_struct(t) and any(_temporal(t.field(i).type) for i in range(t.num_fields))
    )


def _has_temporal(schema: pa.Schema) -> bool:
    return any(_temporal(f.type) for f in schema)


def _as_text(schema: pa.Schema) -> pa.Schema:
    """The schema with every date/time type (also inside structs) read as text."""
    import pyarrow as pa

    def text(t: pa.DataType) -> pa.DataType:
        if pa.types.is_temporal(t):
            return pa.string()
        if pa.types.is_struct(t):
            return pa.struct(
                [pa.field(t.field(i).name, text(t.field(i).type)) for i in range(t.num_fields)]
            )
        return t

    return pa.schema([pa.field(f.name, text(f.type)) for f in schema])
