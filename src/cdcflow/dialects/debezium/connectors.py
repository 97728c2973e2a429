"""Debezium's connectors: which one wrote an event (``source.connector``, else the fields of
its ``source``), the source engine and type table each reads, the ``source`` fields that order
its events, and the ids and instants its events carry."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from cdcflow import positions
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.common import epoch_instant
from cdcflow.dialects.debezium.envelopes import text
from cdcflow.dialects.model import Item
from cdcflow.types.vendors import vendors

#: ``source.connector`` → canonical source engine (and type table).
CONNECTORS: dict[str, str] = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlserver": "sqlserver",
    "oracle": "oracle",
    "mongodb": "mongodb",
    "db2": "db2",
    "informix": "informix",
    "vitess": "mysql",
    "spanner": "spanner",
}
#: Source fields that tell a connector apart when ``connector`` is missing (Oracle's docs).
_SOURCE_HINTS: tuple[tuple[str, str], ...] = (
    ("commit_scn", "oracle"),
    ("change_lsn", "sqlserver"),
    ("ord", "mongodb"),
    ("file", "mysql"),
    ("lsn", "postgresql"),
)
#: ``source.snapshot`` values of initial (blocking) snapshot reads; ``last`` ends the snapshot.
SNAPSHOT_READS = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
)
#: A PostgreSQL connector's transaction id: ``<txId>:<LSN>``. The LSN is the last one the
#: connector had seen when it wrote the struct, so BEGIN, each event and END of one
#: transaction carry different ids; the transaction is ``txId``.
_PG_TRANSACTION = re.compile(r"^(\d+):(\d+)$")


def _int(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _rs_id(value: Any) -> tuple[int, int, int]:
    text = str(value or "").strip()
    return positions.oracle_rs_id(text if not text or text.startswith("0x") else "0x" + text)


def _pg(src: Mapping[str, Any]) -> tuple[int, ...]:
    seq = src.get("sequence")
    if isinstance(seq, str) and seq.strip():
        pair = orjson.loads(seq)
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"sequence must be [commit_lsn, change_lsn], got {seq!r}")
        change = _int(pair[1]) if pair[1] is not None else _int(src.get("lsn"))
        # the first element is the commit LSN of the transaction before; null for the first
        # transaction a connector streams (and for snapshot reads): the change's own LSN keeps
        # every key's events in commit order (a later change of a key comes after the commit
        # of the earlier one)
        return (_int(pair[0]) if pair[0] is not None else change, change)
    lsn = src.get("lsn")
    n = positions.pg_lsn(lsn) if isinstance(lsn, str) and "/" in lsn else _int(lsn)
    return n, n


#: Connector → the ``source`` fields that order its events.
ORDER: dict[str, Callable[[Mapping[str, Any]], tuple[int, ...]]] = {
    "postgresql": _pg,
    "mysql": lambda s: (
        *positions.mysql_binlog(str(s.get("file") or ""), s.get("pos") or 0),
        _int(s.get("row") or 0),
    ),
    "sqlserver": lambda s: (
        positions.mssql_lsn(str(s.get("commit_lsn") or s.get("change_lsn") or "")),
        positions.mssql_lsn(str(s.get("change_lsn") or s.get("commit_lsn") or "")),
        _int(s.get("event_serial_no") or 0),
    ),
    "oracle": lambda s: (
        positions.oracle_scn(s.get("commit_scn") or s.get("scn") or ""),
        positions.oracle_scn(s.get("scn") or s.get("commit_scn") or ""),
        *_rs_id(s.get("rs_id")),
        _int(s.get("ssn") or 0),
    ),
    "mongodb": lambda s: (_int(s.get("ts_ms")), _int(s.get("ord") or 0)),
    "db2": lambda s: (
        int(str(s.get("commit_lsn")).replace(":", ""), 16),
        int(str(s.get("change_lsn")).replace(":", ""), 16),
    ),
}
ORDER["mariadb"] = ORDER["vitess"] = ORDER["mysql"]
#: Connector → the ``source`` field each element of its ordering tuple comes from (a
#: PostgreSQL event without ``sequence``: both from ``lsn``).
ORDER_FIELDS: dict[str, tuple[str, ...]] = {
    "postgresql": ("sequence", "sequence"),
    "mysql": ("file", "pos", "row"),
    "sqlserver": ("commit_lsn", "change_lsn", "event_serial_no"),
    "oracle": ("commit_scn", "scn", "rs_id", "rs_id", "rs_id", "ssn"),
    "mongodb": ("ts_ms", "ord"),
    "db2": ("commit_lsn", "change_lsn"),
}
ORDER_FIELDS["mariadb"] = ORDER_FIELDS["vitess"] = ORDER_FIELDS["mysql"]
#: Connector → the ``source`` field without which it has no position (e.g. Flink CDC's
#: MySQL source writes ``"file": ""``): such events fall back to delivery order.
REQUIRED: dict[str, tuple[str, ...]] = {
    "postgresql": ("lsn", "sequence"),
    "mysql": ("file",),
    "mariadb": ("file",),
    "vitess": ("file",),
    "sqlserver": ("change_lsn", "commit_lsn"),
    "oracle": ("scn", "commit_scn"),
    "mongodb": ("ord",),
    "db2": ("change_lsn",),
}
#: ``source`` fields kept in ``position``.
POSITION_FIELDS: tuple[str, ...] = (
    "lsn", "sequence", "txId", "xmin", "file", "pos", "row", "gtid", "server_id",
    "change_lsn", "commit_lsn", "event_serial_no", "scn", "commit_scn", "rs_id", "ssn",
    "redo_thread", "ord", "lsid", "txnNumber",
)  # fmt: skip


#: The type tables of the connectors' databases.
TYPE_SOURCES: tuple[str, ...] = tuple(
    dict.fromkeys(s for s in CONNECTORS.values() if s in vendors())
)


def connector_of(src: Mapping[str, Any]) -> str | None:
    """The connector that wrote an event's ``source`` (lower case), else ``None``."""
    found = src.get("connector")
    if isinstance(found, str) and found:
        return found.lower()
    for field, connector in _SOURCE_HINTS:
        if src.get(field) is not None:
            return connector
    return None


def transaction_of(value: Any, item: Item) -> tuple[str | None, dict[str, Any] | None]:
    """(transaction id, position) of a transaction id as a connector writes it: a PostgreSQL
    id ``<txId>:<LSN>`` is ``txId`` (the whole id kept in ``metadata.debezium_transaction``),
    its LSN the position; any other id as it is."""
    ident = text(value)
    found = _PG_TRANSACTION.match(ident) if ident else None
    if found is None:
        return ident, None
    item.meta["debezium_transaction"] = ident
    try:
        lsn = int(found.group(2))
    except ValueError:  # more digits than an integer is read from
        raise Dialect.fail(
            "BAD_POSITION",
            f"transaction id {found.group(1)}:<{len(found.group(2))} digits>: the LSN is too long",
        ) from None
    return found.group(1), {"lsn": lsn}


def ts_ms_instant(value: Any) -> dt.datetime | None:
    """The instant of a ``ts_ms`` field (``None`` when it is not an integer)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if value > 10**15:  # nanoseconds written as ts_ms (SQL Server docs example)
        value //= 1_000_000
    return epoch_instant(value, "ms", "ts_ms")
