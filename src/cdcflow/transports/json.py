"""JSON transport: documents, lines, arrays and concatenated documents; exact numbers.

A file is one JSON document (pretty-printed or not), a top-level array of messages, JSON lines,
or documents written one after another (console consumers print them so). Parse errors get a
stable code decided from the data and the error position, never from the error's text.
"""

from __future__ import annotations

import io
import json as pyjson
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from cdcflow.errors import DecodeError
from cdcflow.transports.limits import LIMITS, Limits, check_depth, check_document, check_number
from cdcflow.transports.message import Framed, RawMessage, Unreadable
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
#: A JSON number (where a parser stopped).
_NUMBER = re.compile(rb"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")
#: The UTF-8 byte-order mark some writers put at the start of a file.
BOM = b"\xef\xbb\xbf"


def json_error(
    data: bytes, exc: pyjson.JSONDecodeError | ValueError, limits: Limits = LIMITS
) -> DecodeError:
    """A stable code for why ``data`` is not a JSON document: ``NOT_JSON`` (empty or not
    JSON), ``BAD_UTF8``, ``TRUNCATED_JSON`` (it stops inside a value) or
    ``NUMBER_TOO_LARGE`` (a number over the limits where the parser stopped)."""
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
    number = _NUMBER.match(data, pos) if isinstance(pos, int) else None
    if number is not None:
        text = number.group().decode()
        try:
            check_number(text, limits)
        except DecodeError as e:
            return e
        if math.isinf(float(text)):
            return DecodeError(
                f"the number {text!r} is out of the range of a double", code="NUMBER_TOO_LARGE"
            )
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


def parse(data: bytes | str, limits: Limits = LIMITS) -> Any:
    """The JSON value of ``data`` or a coded :class:`DecodeError` (numbers as orjson reads
    them: fractions are floats), within ``limits``
    (:mod:`cdcflow.transports.limits`)."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise json_error(raw, e) from None
    check_document(raw, doc, limits)
    return doc


def has_inexact_numbers(data: bytes) -> bool:
    """Whether ``data`` may hold numbers a float cannot carry (fractions, exponents, 20+
    digits)."""
    return _RISKY_NUMBER.search(data) is not None


def exact_decoder(limits: Limits = LIMITS) -> pyjson.JSONDecoder:
    """A stdlib JSON decoder reading fractions as ``Decimal`` and integers exactly, with the
    number limits checked before a number is converted (``NUMBER_TOO_LARGE``)."""

    def exact_int(text: str) -> int:
        check_number(text, limits)
        return int(text)

    def exact_decimal(text: str) -> Decimal:
        check_number(text, limits)
        return Decimal(text)

    return pyjson.JSONDecoder(parse_float=exact_decimal, parse_int=exact_int)


def loads_exact(data: bytes | str, limits: Limits = LIMITS) -> Any:
    """JSON with exact numbers: numbers with a fraction become ``Decimal`` and integers stay
    integers (orjson turns both into floats), within ``limits``. Raises
    ``orjson.JSONDecodeError``, or a coded :class:`DecodeError` for a limit."""
    raw = data.encode() if isinstance(data, str) else data
    doc = orjson.loads(raw)
    if _RISKY_NUMBER.search(raw):
        check_document(raw, doc, limits)

        try:
            doc = exact_decoder(limits).decode(raw.decode("utf-8"))
        except RecursionError:
            raise orjson.JSONDecodeError(
                "nested too deeply", raw.decode("utf-8", "replace"), 0
            ) from None
    else:
        check_document(raw, doc, limits)
    return doc


def parse_exact(data: bytes | str, limits: Limits = LIMITS) -> Any:
    """:func:`loads_exact` with a coded :class:`DecodeError`."""
    try:
        return loads_exact(data, limits)
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


def _is_document(line: bytes) -> bool:
    """Whether one line is a whole JSON document (or meant to be one)."""
    first = line.strip(_WS)
    if not first:
        return False
    if first[:1] in (b"{", b"[") and first[-1:] in (b"}", b"]"):
        return True
    try:
        orjson.loads(first)
        return True
    except orjson.JSONDecodeError:
        return False


def _looks_like_lines(data: bytes) -> bool:
    """JSON-lines files start with a line that is a whole document (or meant to be one)."""
    end = data.find(b"\n")
    return _is_document(data if end < 0 else data[:end])


def _some_line_is_document(data: bytes) -> bool:
    """Whether a file of several non-blank lines has a line that is a whole document: JSON
    lines whose first line is bad (each line is then judged on its own)."""
    lines = [line for line in data.split(b"\n") if line.strip(_WS)]
    return len(lines) > 1 and any(_is_document(line) for line in lines)


def _concatenated(data: bytes) -> list[tuple[int, int]] | None:
    """Byte ranges of JSON documents written one after another (more than one, nothing else),
    else ``None``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    spans = _spans(text)
    if spans is None or len(spans) < 2:
        return None
    return _byte_spans(text, spans)


def _spans(text: str) -> list[tuple[int, int]] | None:
    """Character ranges of JSON documents written one after another, else ``None``."""
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
        except (pyjson.JSONDecodeError, RecursionError, ValueError):
            return None
        spans.append((i, end))
        i = end
    return spans


def _byte_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character ranges of ``text`` as byte ranges of its UTF-8 form."""
    if text.isascii():
        return spans
    out: list[tuple[int, int]] = []
    at, byte_at = 0, 0
    for a, b in spans:
        byte_at += len(text[at:a].encode())
        start = byte_at
        byte_at += len(text[a:b].encode())
        at = b
        out.append((start, byte_at))
    return out


class _NotOneArray(Exception):
    """The text is not one JSON array the stdlib scanner can read element by element."""


def _array_spans(text: str) -> Iterator[tuple[int, int]]:
    """Character ranges of the elements of ``text``, one JSON array, one at a time; raises
    :class:`_NotOneArray` where it turns out not to be one."""
    decoder = pyjson.JSONDecoder()
    n = len(text)
    i = text.find("[") + 1
    if i == 0 or text[: i - 1].strip():
        raise _NotOneArray
    first = True
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            raise _NotOneArray
        if text[i] == "]":
            if text[i + 1 :].strip():
                raise _NotOneArray
            return
        if not first:
            if text[i] != ",":
                raise _NotOneArray
            i += 1
            while i < n and text[i].isspace():
                i += 1
        first = False
        try:
            _, end = decoder.raw_decode(text, i)
        except (pyjson.JSONDecodeError, RecursionError, ValueError):
            raise _NotOneArray from None
        yield i, end
        i = end


def _one_array(data: bytes) -> str | None:
    """The text of ``data`` when it is one JSON array (read through once, keeping nothing),
    else ``None``."""
    stripped = data.lstrip(_WS)
    if stripped[:1] != b"[":
        return None
    try:
        text = data.decode("utf-8")
        for _ in _array_spans(text):
            pass
    except (UnicodeDecodeError, _NotOneArray):
        return None
    return text


def _element_spans(text: str) -> Iterator[tuple[int, int]]:
    """Byte ranges of the elements of ``text`` (one JSON array, see :func:`_one_array`)."""
    if text.isascii():
        yield from _array_spans(text)
        return
    at, byte_at = 0, 0
    for i, end in _array_spans(text):
        byte_at += len(text[at:i].encode())
        start = byte_at
        byte_at += len(text[i:end].encode())
        at = end
        yield start, byte_at


def split(data: bytes, origin: str | None, limits: Limits = LIMITS) -> Iterator[Framed]:
    """Messages of a JSON file: a whole document, the elements of a top-level array, JSON lines
    (each line judged on its own), or concatenated documents. What is none of these is one
    message (its dialect or the JSON parser says why it is unreadable). A UTF-8 byte-order
    mark at the start is skipped; a file with nothing in it is ``EMPTY_FILE``; a document or
    array element over the :mod:`~cdcflow.transports.limits` is unreadable with the limit's
    code."""
    skip = len(BOM) if data.startswith(BOM) else 0
    body = data[skip:] if skip else data
    if not body.strip(_WS):
        yield Unreadable("EMPTY_FILE", "the file holds no message", data, origin)
        return
    text = _one_array(body)
    if text is not None:
        yield from _elements(body, text, origin, limits)
        return
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = _MISSING
    if doc is not _MISSING:
        if isinstance(doc, list):
            yield from _array(body, doc, origin, limits)
            return
        try:
            check_document(body, doc, limits)
        except DecodeError as e:
            yield Unreadable(e.code, e.message, body, origin, skip, 1)
            return
        yield RawMessage(data=body, origin=origin, offset=skip, line=1, doc=doc, parsed=True)
        return
    if _looks_like_lines(body):
        yield from _lines(data, origin, skip)
        return
    spans = _concatenated(body)
    if spans is None:
        if _some_line_is_document(body):
            yield from _lines(data, origin, skip)
            return
        yield RawMessage(data=body, origin=origin, offset=skip, line=1)
        return
    line, seen = 1, 0
    for start, end in spans:
        line += body.count(b"\n", seen, start)
        seen = start
        yield RawMessage(data=body[start:end], origin=origin, offset=skip + start, line=line)


def _elements(body: bytes, text: str, origin: str | None, limits: Limits) -> Iterator[Framed]:
    """The elements of a file that is one JSON array, each parsed from its bytes as written
    when it is reached: memory stays proportional to the file, not to its parsed form, and
    numbers stay as written for dialects that read them exactly."""
    i = -1
    for i, (a, b) in enumerate(_element_spans(text)):
        raw = body[a:b]
        try:
            element = parse(raw, limits)
        except DecodeError as e:
            yield Unreadable(e.code, f"item {i}: {e.message}", raw, origin, index=i)
            continue
        yield RawMessage(data=raw, origin=origin, index=i, doc=element, parsed=True)
    if i < 0:
        yield Unreadable("EMPTY_FILE", "the file is an empty JSON array", body, origin)


def _array(body: bytes, doc: list[Any], origin: str | None, limits: Limits) -> Iterator[Framed]:
    """The elements of a JSON array the stdlib scanner cannot read (nested too deeply for
    it), from the parsed document."""
    for i, element in enumerate(doc):
        raw = b""
        try:
            check_depth(element, limits)  # before re-serialising it
            raw = dumps(element)
            check_document(raw, element, limits)
        except DecodeError as e:
            yield Unreadable(e.code, f"item {i}: {e.message}", raw, origin, index=i)
            continue
        except (TypeError, ValueError) as e:  # an encoder limit (a user's max_depth over 255)
            problem = f"item {i} cannot be written as JSON ({e})"
            yield Unreadable("TOO_DEEP", problem, raw, origin, index=i)
            continue
        yield RawMessage(data=raw, origin=origin, index=i, doc=element, parsed=True)


def _lines(data: bytes, origin: str | None, skip: int = 0) -> Iterator[RawMessage]:
    offset = skip
    line_no = 0
    for raw_line in data[skip:].split(b"\n"):
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
