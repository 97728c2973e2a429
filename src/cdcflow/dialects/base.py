"""What every dialect provides: a recogniser and a decoder from one raw message.

A dialect module reads like its spec: its docstring names the spec file, maps vendor fields to
canonical ones, lists the quirks handled and the spec's contradictions. Decoders are pure
Python (orjson) so the same code runs in the CLI, the HTTP receiver and inside Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cdcflow.errors import DecodeError


@dataclass(slots=True)
class RawMessage:
    """One message as it arrived, with its transport coordinates.

    ``index`` is the message's position in a file that is one JSON array of messages.
    ``doc`` is the already-parsed JSON value when the framing had to parse it (an element of a
    JSON array file); decoders then skip parsing ``data`` again.
    """

    data: bytes
    origin: str | None = None
    offset: int = 0
    line: int | None = None
    key: bytes | None = None
    headers: Mapping[str, bytes] | None = None
    index: int | None = None
    doc: Any = None
    parsed: bool = False


@dataclass(frozen=True, slots=True)
class Rejection:
    """A message (or one item of a batch message) that could not be decoded."""

    code: str
    message: str
    raw: bytes
    item: int | None = None
    dialect: str | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a message the producer split (e.g. a CES event over the stream group's
    ``max_message_size_kb``). Segments sharing ``group`` are reassembled in ``index`` order
    (:mod:`cdcflow.segments`) before the whole message is decoded.

    ``final`` marks the last segment (``None`` when the producer does not say); ``total`` is the
    segment count when the producer gives one instead. ``raw`` is the segment as the dialect's
    :meth:`Dialect.reassemble` reads it back.
    """

    group: str
    index: int
    final: bool | None
    total: int | None
    raw: bytes
    dialect: str
    item: int | None = None


@dataclass(frozen=True)
class DialectOptions:
    """Per-source decoding options (from configuration).

    ``table_keys``: table → key column names, for producers that send none.
    ``column_types``: table → column → native or canonical type, for producers that send none.
    ``extra``: dialect-specific options.
    """

    table_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    column_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def keys_for(self, table: str | None, schema: str | None = None) -> tuple[str, ...] | None:
        """Configured key columns for a table (``schema.table`` or ``table``)."""
        if table is None:
            return None
        if schema and f"{schema}.{table}" in self.table_keys:
            return tuple(self.table_keys[f"{schema}.{table}"])
        found = self.table_keys.get(table)
        return tuple(found) if found is not None else None

    def types_for(self, table: str | None, schema: str | None = None) -> Mapping[str, str]:
        """Declared column types for a table (``schema.table`` or ``table``)."""
        if table is None:
            return {}
        if schema and f"{schema}.{table}" in self.column_types:
            return self.column_types[f"{schema}.{table}"]
        return self.column_types.get(table, {})


Decoded = dict[str, Any] | Rejection | Segment


class Dialect:
    """Base class of dialects. Subclasses set :attr:`name` and implement :meth:`recognise` and
    :meth:`decode`.

    Capability flags describe what the producer can express, so callers and docs can tell what
    is knowable: ``orders_events`` (gives a commit order), ``has_before_images``,
    ``binary_framing`` (file extensions whose messages are not JSON).
    """

    name: ClassVar[str] = ""
    orders_events: ClassVar[bool] = True
    has_before_images: ClassVar[bool] = True
    binary_extensions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: DialectOptions | None = None) -> None:
        self.options = options or DialectOptions()

    def recognise(self, msg: RawMessage, doc: Any) -> float:
        """How sure (0..1) this dialect is that ``msg`` is one of its messages. ``doc`` is the
        parsed JSON value, or ``None`` when the message is not JSON."""
        raise NotImplementedError

    def decode(self, msg: RawMessage) -> list[Decoded]:
        """Canonical events (and rejections of single items) from one raw message.

        Raises :class:`~cdcflow.errors.DecodeError` when the message as a whole is unusable.
        """
        raise NotImplementedError

    def frame(self, data: bytes, origin: str | None) -> list[RawMessage] | None:
        """Split a binary file into messages when this dialect owns the file's format
        (e.g. length-delimited protobuf), else ``None`` (JSON framing applies)."""
        return None

    def reassemble(self, segments: list[bytes], origin: str | None) -> RawMessage:
        """The whole message from the ``raw`` of its segments, in segment order. Only dialects
        whose decoder returns :class:`Segment` implement it."""
        raise NotImplementedError(f"dialect {self.name!r} does not split messages")

    def reject(self, code: str, message: str, raw: bytes, item: int | None = None) -> Rejection:
        """A rejection attributed to this dialect."""
        return Rejection(code=code, message=message, raw=raw, item=item, dialect=self.name)

    @staticmethod
    def fail(code: str, message: str) -> DecodeError:
        """A whole-message decode error with a stable code."""
        return DecodeError(message, code=code)
