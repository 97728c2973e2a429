"""What every dialect's renderer (``cdcflow.dialects.<name>.render``) shares: the job it is
given, the result it returns, the records of its Kafka form (``<name>.kafka``), and the source
databases' names and positions the producers write.

A renderer module declares ``render(job: RenderJob) -> RenderResult`` (the registry,
:func:`cdcflow.dialects.renderer`, calls it), and where its format needs them ``FEATURES``
(workload features the format can express), ``EVENT_KINDS`` (change kinds that become events),
``event_operations(change, workload) -> list[str]`` (the canonical operations one change becomes
without faults, for formats that write some changes as several events) and
``render_transport(workload, landing, transport, *, seed) -> RenderResult`` (a transport of its
own, beyond those the contract suite builds for every dialect). A Kafka form module declares
``PREFIX`` (the producer's default topic prefix) and ``records(workload, *, seed, faults,
partitions, prefix) -> KafkaDelivery``.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdcflow.dialects.model import DialectOptions
from cdcflow.simulation.workload import Workload

#: Canonical operation of each change kind, when a renderer writes one event per change.
KIND_OPERATIONS: dict[str, str] = {
    "insert": "INSERT",
    "update": "UPDATE",
    "delete": "DELETE",
    "truncate": "TRUNCATE",
    "add_column": "DDL",
}


@dataclass(frozen=True)
class RenderJob:
    """A renderer's task: the workload, the landing zone it writes, the seed of its choices,
    which transactions (``None``: all), and whether to add the producer's delivery faults."""

    workload: Workload
    landing: Path
    seed: int
    transactions: slice | None = None
    faults: bool = True


@dataclass(frozen=True)
class RenderResult:
    """Files written and the decoder options they need."""

    files: list[Path]
    options: DialectOptions
    messages: int


def row_image(
    workload: Workload, table: str, row: Mapping[str, Any] | None, write: Callable[[Any, str], Any]
) -> dict[str, Any] | None:
    """A row image of ``table`` with each value as ``write(value, column type)`` writes it."""
    if row is None:
        return None
    cols = workload.tables[table].columns
    return {c: write(v, cols.get(c, "string")) for c, v in row.items()}


def timestamp_text(value: dt.datetime, *, sep: str = "T", utc: str = "Z") -> str:
    """A timestamp as ISO text with microseconds: a zoned one in UTC followed by ``utc``, a
    zone-less one as it is."""
    if value.tzinfo is None:
        return value.strftime(f"%Y-%m-%d{sep}%H:%M:%S.%f")
    return value.astimezone(dt.UTC).strftime(f"%Y-%m-%d{sep}%H:%M:%S.%f") + utc


# --------------------------------------------------------------------------- the Kafka form


@dataclass(frozen=True)
class KafkaRecord:
    """One record to produce. ``partition`` ``None``: the producer's partitioner picks it from
    the key (murmur2, as Kafka's Java client does)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None


@dataclass
class KafkaDelivery:
    """A workload as a producer delivers it through Kafka, and what decoding it needs."""

    dialect: str
    records: list[KafkaRecord]
    options: DialectOptions
    topics: list[str] = field(default_factory=list)


def resent(records: list[KafkaRecord], rng: random.Random) -> list[KafkaRecord]:
    """Some records twice, and a run of records sent again, as after a producer restart."""
    out = [r for r in records for _ in range(2 if rng.random() < 0.05 else 1)]
    if len(records) > 6:
        start = rng.randrange(len(records) - 6)
        out.extend(records[start : start + rng.randrange(3, 7)])
    return out


# --------------------------------------------------------------------------- source databases

#: Workload column type → PostgreSQL type name.
PG_TYPES: dict[str, str] = {
    "bigint": "bigint",
    "int": "integer",
    "string": "text",
    "decimal(10,2)": "numeric(10,2)",
    "boolean": "boolean",
    "timestamp": "timestamp with time zone",
    "timestamp_ntz": "timestamp without time zone",
    "date": "date",
    "double": "double precision",
    "json": "jsonb",
    "binary": "bytea",
}

#: Workload column type → SQL Server type name.
MSSQL_TYPES: dict[str, str] = {
    "bigint": "bigint",
    "int": "int",
    "string": "nvarchar(200)",
    "decimal(10,2)": "decimal(10,2)",
    "boolean": "bit",
    "timestamp": "datetimeoffset(6)",
    "timestamp_ntz": "datetime2(6)",
    "date": "date",
    "double": "float",
    "json": "json",
    "binary": "varbinary(max)",
}


def pg_lsn(n: int) -> str:
    """Postgres LSN text of a 64-bit position."""
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def mssql_lsn(n: int) -> str:
    """SQL Server LSN text (``VLF:block:slot``) of an integer position."""
    return f"{(n >> 48) & 0xFFFFFFFF:08X}:{(n >> 16) & 0xFFFFFFFF:08X}:{n & 0xFFFF:04X}"
