"""What one CockroachDB message is decoded with: where it came from (:class:`Context`), what its
envelope read about the row (:class:`RowChange`), how its columns are typed (:class:`Columns`),
and the HLC fields every envelope reads."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.cockroachdb.types import unwrap
from cdcflow.dialects.model import Item
from cdcflow.transports.message import RawMessage


@dataclass
class Context:
    """Where a message came from: the key and topic that travelled beside it, Avro types."""

    item: Item
    key: Any = None
    topic: str | None = None
    partition: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    avro_types: dict[str, str] = field(default_factory=dict)
    bit_columns: frozenset[str] = frozenset()
    transport: bool = False

    @property
    def msg(self) -> RawMessage:
        return self.item.msg


Where = tuple[str | None, str | None, str, str | None, str]
"""(database, schema, table, column family, topic) of a changefeed message."""


@dataclass(frozen=True, slots=True)
class RowChange:
    """What an envelope read from a message about one row change: the part of the row event
    that differs between envelopes (the rest comes from the message's :class:`Context`)."""

    where: Where
    op: str
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    hlc: Any = None
    hlc_source: str | None = None
    key_value: Any = None
    key_names: tuple[str, ...] | None = None
    extra: Mapping[str, Any] | None = None
    mvcc: Any = None
    commit_ns: int | None = None
    text_values: bool = False


@dataclass
class Columns:
    """How the columns of one row are typed: known ``types`` (declared, Avro), ``bits`` (BIT
    columns in Avro's word arrays), ``text_values`` (CSV: untyped columns stay text), and the
    ``row_types`` the event records."""

    types: Mapping[str, str]
    bits: frozenset[str]
    text_values: bool
    row_types: dict[str, str] = field(default_factory=dict)


def hlc_field(doc: Mapping[str, Any]) -> tuple[Any, str | None]:
    if doc.get("updated") is not None:
        return unwrap(doc["updated"]), "updated"
    if doc.get("mvcc_timestamp") is not None:
        return unwrap(doc["mvcc_timestamp"]), "mvcc_timestamp"
    return None, None


def wall_time(wall_ns: int) -> dt.datetime:
    try:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=wall_ns // 1000)
    except OverflowError:
        raise Dialect.fail("BAD_HLC", f"HLC wall time {wall_ns} ns is out of range") from None
