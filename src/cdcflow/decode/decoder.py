"""The decoder: raw messages and files → canonical events, with one dialect or by detection.

The one place where bytes become events, for ``cdcflow inspect``, the HTTP receiver and Spark
workers alike. It never raises for bad input: every problem is a coded rejection, within the
limits of :mod:`cdcflow.transports.limits`. An exception nobody foresaw becomes a rejection
``DECODER_ERROR`` of the one message (or the rest of the file) it came from: a last line of
defence, so that one poison message never stops a pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdcflow.decode.detect import MARKED, AutoDetector
from cdcflow.decode.framing import frame_file
from cdcflow.dialects import dialect_names, get_dialect
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.model import Columnar, DialectOptions, Rejection, Segment, Skipped
from cdcflow.errors import DecodeError
from cdcflow.transports import AVRO, JSON, KAFKA, kafka, transport_of_file
from cdcflow.transports.json import parse
from cdcflow.transports.limits import Limits, check_size
from cdcflow.transports.message import Framed, RawMessage, Unreadable
from cdcflow.types.canonical import CANONICAL_TYPES_TEXT, is_valid_type

#: Code of a rejection for an exception no parser path foresaw (the last line of defence).
DECODER_ERROR = "DECODER_ERROR"
#: Code of a message that another dialect recognises better than the configured one.
OTHER_DIALECT = "OTHER_DIALECT"
#: Code of a message whose events declare a column type that is not a canonical type (also
#: the code of a configured type the source's type table cannot read).
BAD_TYPE = "BAD_TYPE"


def unexpected(exc: BaseException, raw: bytes, dialect: str | None = None) -> Rejection:
    """The ``DECODER_ERROR`` rejection of a message whose decoding raised ``exc``."""
    problem = f"the decoder failed on this message ({type(exc).__name__}: {_text(exc)})"
    return Rejection(DECODER_ERROR, problem, raw, dialect=dialect)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:300]
    except Exception:  # an exception whose text cannot be made (a huge or deep value)
        return "(no message)"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What decoding one message gave: events, rejections, segments of split messages and
    what carried no change on purpose (:class:`~cdcflow.dialects.model.Skipped`), with the
    message (and its coordinates)."""

    message: RawMessage
    events: list[dict[str, Any]]
    rejections: list[Rejection]
    segments: list[Segment] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


class Decoder:
    """Decodes raw messages with one dialect, or detects the dialect per message (``auto``).

    ``wire``: row images, keys and metadata values as wire strings (the Spark side), instead of
    typed Python values (``cdcflow inspect``, the receiver).
    """

    def __init__(
        self, dialect: str = "auto", options: DialectOptions | None = None, *, wire: bool = False
    ) -> None:
        self.dialect_name = dialect
        self.options = options or DialectOptions()
        self.wire = wire
        self.limits = Limits.from_options(self.options.extra.get("limits"))
        self.fixed: Dialect | None = None
        self.detector: AutoDetector | None = None
        #: the other dialects, to tell a message of theirs from the fixed one's
        self._others: AutoDetector | None = None
        if dialect == "auto":
            self.detector = AutoDetector(options, wire=wire)
            self.dialects: list[Dialect] = list(self.detector.dialects)
        else:
            self.fixed = get_dialect(dialect, options, wire=wire)
            self.dialects = [self.fixed]
        self._kafka = any(KAFKA in d.capabilities.transports for d in self.dialects)

    # ------------------------------------------------------------------ files

    def frame(self, data: bytes, origin: str | None) -> Iterator[Framed]:
        """The messages (and unreadable parts) of one file or body; a framing failure nobody
        foresaw makes what is left of it one ``DECODER_ERROR`` part."""
        framed = frame_file(data, origin, self.dialects, self.limits)
        while True:
            try:
                part = next(framed)
            except StopIteration:
                return
            except Exception as e:  # one poison file must not stop a pipeline
                r = unexpected(e, data, self._name())
                yield Unreadable(r.code, r.message, data, origin)
                return
            yield part

    def decode_file(self, data: bytes, origin: str | None) -> Iterator[Outcome]:
        """Decode every message of one file (see :meth:`frame`)."""
        for framed in self.frame(data, origin):
            yield self.decode(framed)

    def _name(self, dialect: Dialect | None = None) -> str | None:
        found = dialect or self.fixed
        return found.name if found is not None else None

    def bulk(self, data: bytes, origin: str | None) -> Columnar | None:
        """The file's plain events read in bulk by the decoder's dialect (wire strings, for
        the Spark side), when it has a fixed dialect that reads this file so, else ``None``.
        The lines not in the result are decoded one by one with :meth:`decode`."""
        d = self.fixed
        if d is None or not self.reads_in_bulk or transport_of_file(origin) != JSON:
            return None
        try:
            if d.frame_file(data, origin) is not None:
                return None
        except Exception:  # the row decoder reads the file and names any problem
            return None
        return self.columnar(data)

    @property
    def reads_in_bulk(self) -> bool:
        """Whether the decoder has a fixed dialect that reads plain JSON lines in bulk, and
        decodes for the Spark side (wire strings)."""
        d = self.fixed
        return d is not None and self.wire and type(d).columnar is not Dialect.columnar

    def columnar(self, data: bytes) -> Columnar | None:
        """Plain JSON lines (one message a line, not a file: no framing) read in bulk by the
        decoder's fixed dialect, else ``None`` (see :meth:`bulk`)."""
        d = self.fixed
        if d is None or not self.reads_in_bulk:
            return None
        try:
            return d.columnar(data)
        except Exception:  # the row decoder reads these lines and names any problem
            return None

    # ------------------------------------------------------------------ messages

    def decode(self, msg: Framed) -> Outcome:
        """Decode one message (an unreadable part gives its rejection); never raises for bad
        input."""
        if isinstance(msg, Unreadable):
            name = self.fixed.name if self.fixed is not None else None
            rej = Rejection(msg.code, msg.message, msg.data, dialect=name)
            return Outcome(msg.as_message(), [], [rej])
        dialect = self.fixed
        try:
            check_size(msg.data, self.limits)
            carried = self.carried(msg)
            if dialect is None:
                dialect = self._detect(carried)
            else:
                self._refuse_other(dialect, carried)
            results = dialect.decode(carried)
        except DecodeError as e:
            name = dialect.name if dialect is not None else None
            return Outcome(msg, [], [Rejection(e.code, e.message, msg.data, dialect=name)])
        except Exception as e:  # one poison message must not stop a pipeline
            return Outcome(msg, [], [unexpected(e, msg.data, self._name(dialect))])
        return _outcome(msg, results)

    def _refuse_other(self, dialect: Dialect, msg: RawMessage) -> None:
        """``OTHER_DIALECT`` for a message the configured dialect finds none of its marks in
        (:data:`~cdcflow.decode.detect.MARKED`) and another dialect recognises better: it is
        never read as the configured dialect's (its fields would become columns)."""
        doc = _document(msg)
        own = dialect.score(msg, doc)
        if own >= MARKED:
            return
        if self._others is None:
            names = [n for n in dialect_names() if n != dialect.name]
            self._others = AutoDetector(self.options, names, wire=self.wire)
        other = self._others.best(msg, doc, own)
        if other is not None:
            raise DecodeError(
                f"not a {dialect.name} message: it looks like a {other.name} message; set "
                f"the source's dialect to {other.name!r} (or 'auto' to detect each message's)",
                code=OTHER_DIALECT,
            )

    def carried(self, msg: RawMessage) -> RawMessage:
        """The message a transport record carries (a Kafka record written as JSON), else
        ``msg`` itself."""
        if not self._kafka or msg.form != "json":
            return msg
        doc = _peek(msg)
        record = kafka.record_fields(doc) if isinstance(doc, dict) else None
        if record is None:
            return msg
        return kafka.unwrap(msg, record, self.options.schema_dir)

    def _detect(self, msg: RawMessage) -> Dialect:
        assert self.detector is not None
        try:
            return self.detector.detect(msg, _document(msg))
        except DecodeError:
            # a message that is not even JSON (or Avro) is reported as such
            if msg.form == "json" and not msg.parsed:
                parse(msg.data)
            if msg.form == "bytes" and transport_of_file(msg.origin) == AVRO:
                raise DecodeError(
                    "neither an Avro object-container file nor a schemaless Avro record of a "
                    "registered dialect",
                    code="CORRUPT_AVRO",
                ) from None
            raise

    # ------------------------------------------------------------------ split messages

    def dialect_named(self, name: str) -> Dialect:
        """The decoder's instance of a dialect (with this decoder's options)."""
        for d in self.dialects:
            if d.name == name:
                return d
        found = get_dialect(name, self.options, wire=self.wire)
        self.dialects.append(found)
        return found

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
        except Exception as e:  # the last line of defence
            raw = b"".join(segments)
            msg = RawMessage(data=raw, origin=origin, offset=offset, line=line)
            return Outcome(msg, [], [unexpected(e, raw, d.name)])
        try:
            check_size(msg.data, self.limits)
            out = _outcome(msg, d.decode(msg))
        except DecodeError as e:
            rej = Rejection(code=e.code, message=e.message, raw=msg.data, dialect=d.name)
            return Outcome(msg, [], [rej])
        except Exception as e:  # the last line of defence
            return Outcome(msg, [], [unexpected(e, msg.data, d.name)])
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
        except Exception:  # a coded rejection, or one nobody foresaw: not readable either way
            return False
        return True


def _peek(msg: RawMessage) -> Any:
    """The message's JSON value when it parses (cached), else ``None``."""
    if not msg.parsed:
        try:
            msg.doc = parse(msg.data)
        except DecodeError:
            return None
        msg.parsed = True
    return msg.doc


def _document(msg: RawMessage) -> Any:
    """What recognition reads of a message: its JSON value or Avro record, else ``None``."""
    if msg.form == "avro" and msg.avro is not None:
        return msg.avro.value
    return _peek(msg) if msg.form == "json" else None


def _outcome(msg: RawMessage, results: list[Any]) -> Outcome:
    """What a dialect gave for a message; a message whose events declare a type that is not
    canonical is rejected whole (``BAD_TYPE``), so such a type never reaches a table."""
    events: list[dict[str, Any]] = []
    rejections: list[Rejection] = []
    segments: list[Segment] = []
    skipped: list[Skipped] = []
    for r in results:
        if type(r) is dict:
            bad = bad_types(r.get("types"))
            if bad:
                return Outcome(msg, [], [_bad_type(msg, r, bad)])
            events.append(r)
        elif isinstance(r, Rejection):
            rejections.append(r)
        elif isinstance(r, Skipped):
            skipped.append(r)
        else:
            segments.append(r)
    return Outcome(msg, events, rejections, segments, skipped)


def bad_types(types: Any) -> dict[str, Any]:
    """The columns of an event's ``types`` whose type is not a canonical type name."""
    if not types:
        return {}
    if not isinstance(types, dict):
        return {"": types}
    return {c: t for c, t in types.items() if not (isinstance(t, str) and is_valid_type(t))}


def _bad_type(msg: RawMessage, ev: dict[str, Any], bad: dict[str, Any]) -> Rejection:
    table = ev.get("table")
    named = ", ".join(f"{c!r}: {t!r}" for c, t in sorted(bad.items(), key=lambda ct: ct[0]))
    return Rejection(
        BAD_TYPE,
        f"types of table {table!r} not canonical ({named}); {CANONICAL_TYPES_TEXT}",
        msg.data,
        dialect=ev.get("dialect"),
        table=table,
    )
