"""Length-delimited protobuf: each message preceded by its size as a base-128 varint (the
framing of ``writeDelimitedTo`` in the protobuf libraries)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from cdcflow.errors import DecodeError
from cdcflow.transports.message import Framed, RawMessage, Unreadable

#: Largest message accepted from a length prefix: guards against reading garbage as a size.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def _corrupt(message: str) -> DecodeError:
    return DecodeError(message, code="CORRUPT_PROTOBUF")


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read a base-128 varint at ``pos``; return (value, position after it)
    (``CORRUPT_PROTOBUF`` when it is truncated or longer than 10 bytes)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise _corrupt(f"length prefix truncated at byte {pos}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _corrupt(f"length prefix longer than 10 bytes at byte {pos}")


def split_delimited(data: bytes) -> list[tuple[int, bytes]]:
    """Split a length-delimited stream into ``(offset, message bytes)`` pairs.

    The offset is the byte position of the message's length prefix. A truncated or impossible
    length raises ``CORRUPT_PROTOBUF`` naming the byte where the stream stops making sense.
    """
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(data):
        start = pos
        size, pos = read_varint(data, pos)
        if size > MAX_MESSAGE_BYTES:
            raise _corrupt(
                f"message at byte {start} claims {size} bytes (limit {MAX_MESSAGE_BYTES})"
            )
        end = pos + size
        if end > len(data):
            raise _corrupt(
                f"message at byte {start} claims {size} bytes but only {len(data) - pos} remain"
            )
        out.append((start, data[pos:end]))
        pos = end
    return out


def messages(data: bytes, origin: str | None) -> Iterator[Framed]:
    """Messages of a length-delimited file; a stream that stops making sense is one
    ``CORRUPT_PROTOBUF`` part (nothing after a bad prefix can be trusted)."""
    try:
        parts = split_delimited(data)
    except DecodeError as e:
        yield Unreadable(
            e.code, f"corrupt length-delimited protobuf stream: {e.message}", data, origin
        )
        return
    for offset, body in parts:
        yield RawMessage(data=body, origin=origin, offset=offset, form="protobuf")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def write_delimited(messages: Iterable[bytes]) -> bytes:
    """Join serialized messages into one length-delimited stream."""
    return b"".join(_encode_varint(len(m)) + m for m in messages)
