"""Splitting files into raw messages, and decoding them with one dialect or by detection.

File forms: one JSON document (pretty-printed or not), JSON lines, a JSON array of messages,
or a binary format a dialect owns (length-delimited protobuf...). This module is the one place
where bytes become messages, for ``cdcflow inspect``, the receiver and Spark workers alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcflow.dialects import AutoDetector, get_dialect
from cdcflow.dialects.base import Dialect, DialectOptions, RawMessage, Rejection, Segment
from cdcflow.errors import DecodeError

_WS = b" \t\r\n"


def json_error(data: bytes, exc: orjson.JSONDecodeError) -> DecodeError:
    """A stable code for why ``data`` is not a JSON document."""
    text = str(exc)
    if "UTF-8" in text or "surrogates" in text:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as u:
            return DecodeError(
                f"message is not valid UTF-8 (byte 0x{data[u.start]:02x} at offset {u.start})",
                code="BAD_UTF8",
            )
    if "end of data" in text:
        return DecodeError(
            f"truncated JSON: the message ends early ({text})", code="TRUNCATED_JSON"
        )
    if "zero-length" in text:
        return DecodeError("empty message", code="NOT_JSON")
    return DecodeError(f"message is not JSON: {text}", code="NOT_JSON")


def parse_json(msg: RawMessage) -> Any:
    """The message's JSON value (cached on the message), or :class:`DecodeError`."""
    if msg.parsed:
        return msg.doc
    try:
        msg.doc = orjson.loads(msg.data)
    except orjson.JSONDecodeError as e:
        raise json_error(msg.data, e) from None
    msg.parsed = True
    return msg.doc


def header_map(headers: Any) -> dict[str, str]:
    """Kafka headers as a dict of lower-case names → text (from a mapping or a list of
    ``{"key", "value"}`` records)."""
    out: dict[str, str] = {}
    if not headers:
        return out
    items: list[tuple[Any, Any]]
    if isinstance(headers, Mapping):
        items = list(headers.items())
    elif isinstance(headers, list):
        items = [(h.get("key"), h.get("value")) for h in headers if isinstance(h, dict)]
    else:
        return out
    for k, v in items:
        if k is None:
            continue
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v).decode("utf-8", "replace")
        out[str(k).lower()] = "" if v is None else str(v)
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


def split_json(data: bytes, origin: str | None) -> Iterator[RawMessage]:
    """Messages of a JSON file: a whole document, the elements of a top-level array, or lines."""
    stripped = data.strip(_WS)
    if not stripped:
        return
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = _MISSING
    if doc is not _MISSING:
        if isinstance(doc, list):
            for i, element in enumerate(doc):
                yield RawMessage(
                    data=orjson.dumps(element),
                    origin=origin,
                    offset=0,
                    line=None,
                    index=i,
                    doc=element,
                    parsed=True,
                )
        else:
            yield RawMessage(data=data, origin=origin, offset=0, line=1, doc=doc, parsed=True)
        return
    if not _looks_like_lines(data):
        yield RawMessage(data=data, origin=origin, offset=0, line=1)
        return
    offset = 0
    line_no = 0
    for raw_line in data.split(b"\n"):
        line_no += 1
        start = offset
        offset += len(raw_line) + 1
        line = raw_line.strip(_WS)
        if line:
            yield RawMessage(data=line, origin=origin, offset=start, line=line_no)


_MISSING = object()


def split_file(data: bytes, origin: str | None, dialect: Dialect | None) -> Iterator[RawMessage]:
    """Messages of one file, asking the dialect first for binary formats it owns."""
    if dialect is not None:
        framed = dialect.frame(data, origin)
        if framed is not None:
            yield from framed
            return
    yield from split_json(data, origin)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What decoding one message gave: events, rejections and segments of split messages,
    with the message's origin."""

    message: RawMessage
    events: list[dict[str, Any]]
    rejections: list[Rejection]
    segments: list[Segment] = field(default_factory=list)


class Decoder:
    """Decodes raw messages with one dialect, or detects the dialect per message (``auto``)."""

    def __init__(self, dialect: str = "auto", options: DialectOptions | None = None) -> None:
        self.dialect_name = dialect
        self.options = options or DialectOptions()
        self.fixed: Dialect | None = None if dialect == "auto" else get_dialect(dialect, options)
        self.detector = AutoDetector(options) if dialect == "auto" else None

    def framing_dialect(self, origin: str | None) -> Dialect | None:
        """The dialect whose binary framing applies to a file, if any."""
        if self.fixed is not None:
            return self.fixed
        assert self.detector is not None
        name = (origin or "").lower()
        for d in self.detector.dialects:
            if d.binary_extensions and name.endswith(d.binary_extensions):
                return d
        return None

    def decode(self, msg: RawMessage) -> Outcome:
        """Decode one message; never raises for bad input."""
        dialect: Dialect | None = self.fixed
        try:
            if dialect is None:
                assert self.detector is not None
                doc: Any = None
                json_problem: DecodeError | None = None
                try:
                    doc = parse_json(msg)
                except DecodeError as e:
                    if not self._binary_capable():
                        raise
                    json_problem = e
                try:
                    dialect = self.detector.detect(msg, doc)
                except DecodeError:
                    # a message that is not even JSON is reported as such
                    if json_problem is not None:
                        raise json_problem from None
                    raise
            results = dialect.decode(msg)
        except DecodeError as e:
            rej = Rejection(
                code=e.code,
                message=e.message,
                raw=msg.data,
                dialect=dialect.name if dialect else None,
            )
            return Outcome(msg, [], [rej])
        events = [r for r in results if isinstance(r, dict)]
        rejections = [r for r in results if isinstance(r, Rejection)]
        segments = [r for r in results if isinstance(r, Segment)]
        return Outcome(msg, events, rejections, segments)

    def dialect_named(self, name: str) -> Dialect:
        """The decoder's instance of a dialect (with this decoder's options)."""
        if self.fixed is not None and self.fixed.name == name:
            return self.fixed
        if self.detector is not None:
            for d in self.detector.dialects:
                if d.name == name:
                    return d
        return get_dialect(name, self.options)

    def decode_segments(
        self,
        dialect: str,
        segments: list[bytes],
        origin: str | None,
        offset: int = 0,
        line: int | None = None,
    ) -> Outcome:
        """Reassemble a complete split message (segments in order) and decode it."""
        d = self.dialect_named(dialect)
        try:
            msg = d.reassemble(segments, origin)
            msg.offset, msg.line = offset, line
        except DecodeError as e:
            raw = b"".join(segments)
            msg = RawMessage(data=raw, origin=origin, offset=offset, line=line)
            return Outcome(msg, [], [Rejection(e.code, e.message, raw, dialect=d.name)])
        out = self._decode_with(d, msg)
        if out.segments:
            rej = Rejection(
                "BAD_SEGMENT", "a reassembled message is itself a segment", msg.data, dialect=d.name
            )
            return Outcome(msg, out.events, [*out.rejections, rej])
        return out

    def reassembles(self, dialect: str, pieces: Sequence[Any]) -> bool:
        """Whether segments (objects with ``raw``, in order) join into a readable message."""
        try:
            self.dialect_named(dialect).reassemble([p.raw for p in pieces], None)
        except DecodeError:
            return False
        return True

    def _decode_with(self, dialect: Dialect, msg: RawMessage) -> Outcome:
        try:
            results = dialect.decode(msg)
        except DecodeError as e:
            rej = Rejection(code=e.code, message=e.message, raw=msg.data, dialect=dialect.name)
            return Outcome(msg, [], [rej])
        return Outcome(
            msg,
            [r for r in results if isinstance(r, dict)],
            [r for r in results if isinstance(r, Rejection)],
            [r for r in results if isinstance(r, Segment)],
        )

    def _binary_capable(self) -> bool:
        assert self.detector is not None
        return any(d.binary_extensions for d in self.detector.dialects)

    def decode_file(self, data: bytes, origin: str | None) -> Iterator[Outcome]:
        """Decode every message of one file."""
        for msg in split_file(data, origin, self.framing_dialect(origin)):
            yield self.decode(msg)
