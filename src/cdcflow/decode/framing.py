"""Framing: which transport reads a file, and the messages it holds.

Extensions pick the binary transports (``.avro``, ``.pb``/``.protobuf``/``.pbd``, ``.csv``)
when a dialect in play declares them; everything else is JSON. An Avro file is read once,
whatever dialect its records belong to (Event Hubs Capture files give their bodies); a dialect
may own a file form beyond its transports (:meth:`~cdcflow.dialects.base.Dialect.frame_file`).
A file with nothing in it is an ``EMPTY_FILE`` rejection (a dead letter), never skipped
silently, unless a dialect owns it (a CockroachDB ``.RESOLVED`` file is its name).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from cdcflow.dialects.base import Dialect
from cdcflow.errors import DecodeError
from cdcflow.transports import (
    AVRO,
    CSV,
    EVENTHUBS,
    PROTOBUF,
    avro,
    csv,
    eventhubs,
    json,
    protobuf,
    transport_of_file,
)
from cdcflow.transports.limits import LIMITS, Limits
from cdcflow.transports.message import Framed, RawMessage, Unreadable


def frame_file(
    data: bytes, origin: str | None, dialects: Iterable[Dialect], limits: Limits = LIMITS
) -> Iterator[Framed]:
    """The messages (and unreadable parts) of one file, for the dialects in play, within
    ``limits``."""
    dialects = list(dialects)
    for d in dialects:
        own = d.frame_file(data, origin)
        if own is not None:
            yield from own
            return
    if not data:
        yield Unreadable("EMPTY_FILE", "the file holds no message (zero bytes)", data, origin)
        return
    carried: set[str] = set()
    for d in dialects:
        carried |= d.capabilities.transports
    transport = transport_of_file(origin)
    if transport not in carried:
        yield from json.split(data, origin, limits)
    elif transport == AVRO:
        yield from _avro_file(data, origin, EVENTHUBS in carried)
    elif transport == PROTOBUF:
        yield from protobuf.messages(data, origin)
    elif transport == CSV:
        yield from csv.rows(data, origin)
    else:
        yield from json.split(data, origin, limits)


def _avro_file(data: bytes, origin: str | None, capture: bool) -> Iterator[Framed]:
    if not data.startswith(avro.OCF_MAGIC):
        # one schemaless record: its dialect knows the schema
        yield RawMessage(data=data, origin=origin, form="bytes")
        return
    try:
        records, schema = avro.open_container(data)
    except DecodeError as e:
        yield Unreadable(e.code, e.message, data, origin)
        return
    to_message = eventhubs.message if capture and eventhubs.is_capture(schema) else avro.message
    yield from avro.read_records(records, schema, data, origin, to_message)
