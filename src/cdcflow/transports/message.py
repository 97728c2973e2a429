"""What transports yield: raw messages with their coordinates, and unreadable parts of files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``RawMessage.form`` values: how ``data`` is encoded (``bytes``: binary, not yet known).
FORMS = ("json", "protobuf", "avro", "csv", "bytes")


@dataclass(frozen=True, slots=True)
class KafkaCoordinates:
    """Where a Kafka record was read (any field may be unknown)."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp: Any = None


@dataclass(frozen=True, slots=True)
class CaptureCoordinates:
    """Where an Event Hubs Capture record was read."""

    sequence_number: Any = None
    offset: Any = None
    enqueued_time: Any = None


class AvroSchema:
    """An Avro writer schema (its JSON form) shared by every record read with it, with a memo
    for what readers derive from it once (column types, recognisers' verdicts)."""

    __slots__ = ("_memo", "schema", "schema_id")

    def __init__(self, schema: Any, schema_id: int | None = None) -> None:
        self.schema = schema
        self.schema_id = schema_id
        self._memo: dict[str, Any] = {}

    def field_names(self) -> frozenset[str]:
        """Names of the top-level record's fields (empty for other schemas)."""
        return self.memo("field_names", _field_names)

    def memo(self, key: str, derive: Any) -> Any:
        """``derive(schema)``, computed once per schema and key."""
        if key not in self._memo:
            self._memo[key] = derive(self.schema)
        return self._memo[key]


def _field_names(schema: Any) -> frozenset[str]:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return frozenset()
    return frozenset(str(f.get("name")) for f in schema.get("fields", []) if isinstance(f, dict))


@dataclass(frozen=True, slots=True)
class AvroValue:
    """A decoded Avro record (plain Python values) and the schema it was written with."""

    value: Any
    schema: AvroSchema


@dataclass(frozen=True, slots=True)
class CsvRow:
    """One CSV row, with the file's first row (a header for some producers, data for others)."""

    values: tuple[str, ...]
    first: tuple[str, ...]
    number: int


@dataclass(slots=True)
class RawMessage:
    """One message as it arrived, with its transport coordinates.

    ``offset`` is the byte offset (or record number) of the message in its file, ``line`` its
    line, ``index`` its position in a file that is one JSON array of messages. ``doc`` caches
    the parsed JSON value once a transport or dialect parsed ``data`` (``parsed``). ``form``
    says how ``data`` is encoded; ``avro``/``csv`` hold what an Avro or CSV transport decoded,
    ``kafka``/``capture`` where the message was read, ``key``/``headers`` what travelled
    beside it, ``segments`` how many segments it was reassembled from.
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
    form: str = "json"
    avro: AvroValue | None = None
    key_avro: AvroValue | None = None
    csv: CsvRow | None = None
    kafka: KafkaCoordinates | None = None
    capture: CaptureCoordinates | None = None
    segments: int | None = None

    @property
    def position(self) -> int:
        """The message's place in its file: array index, else offset (delivery order)."""
        return self.offset if self.index is None else self.index


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A part of a file no message can be read from (a corrupt Avro block, a truncated
    protobuf stream, a CSV row of the wrong width), with a stable code and a reason."""

    code: str
    message: str
    data: bytes
    origin: str | None = None
    offset: int = 0
    line: int | None = None
    index: int | None = None

    def as_message(self) -> RawMessage:
        """The unreadable bytes with their coordinates, for reporting."""
        return RawMessage(
            data=self.data, origin=self.origin, offset=self.offset, line=self.line, index=self.index
        )


Framed = RawMessage | Unreadable
