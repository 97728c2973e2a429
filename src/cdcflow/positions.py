"""Parsers for producers' native positions, shared by every dialect.

Each parser turns a native position into a tuple of integers/strings for
:func:`cdcflow.sequence.encode`. Raw positions are never compared as text: ``0/A`` > ``0/1000``
as text but not as an LSN.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_PG_LSN = re.compile(r"^\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*$")
_BINLOG_NUMBER = re.compile(r"(\d+)\s*$")
_MSSQL_LSN_COLON = re.compile(r"^\s*([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,4})\s*$")
_MSSQL_LSN_HEX = re.compile(r"^\s*(?:0x)?([0-9A-Fa-f]{20})\s*$")


def pg_lsn(text: str) -> int:
    """Postgres LSN ``X/Y`` (two hex numbers) → one 64-bit integer."""
    m = _PG_LSN.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not a Postgres LSN (expected 'X/Y' in hex): {text!r}")
    return (int(m.group(1), 16) << 32) | int(m.group(2), 16)


def mysql_binlog(file: str, position: int | str | float) -> tuple[int, int]:
    """MySQL binlog file + position → (file number, position).

    ``mysql-bin.000123`` → 123: the file number orders files; their names share one base.
    """
    if not isinstance(file, str):
        raise ValueError(f"binlog file must be a string, got {file!r}")
    m = _BINLOG_NUMBER.search(file)
    if not m:
        raise ValueError(f"binlog file name has no sequence number: {file!r}")
    if isinstance(position, float) and not (position.is_integer() and abs(position) < 2**53):
        # JSON read without exact numbers makes an integer past 64 bits a float
        raise ValueError(f"binlog position is not an exact integer: {position!r}")
    try:
        pos = int(position)
    except (TypeError, ValueError):
        raise ValueError(f"binlog position is not an integer: {position!r}") from None
    if pos < 0:
        raise ValueError(f"binlog position is negative: {pos}")
    return int(m.group(1)), pos


def mongodb_cluster_time(value: Any) -> tuple[int, int]:
    """MongoDB cluster time ``{"t": seconds, "i": increment}`` (or extended JSON
    ``{"$timestamp": {"t":..., "i":...}}``) → (t, i)."""
    if isinstance(value, dict) and "$timestamp" in value:
        value = value["$timestamp"]
    if not isinstance(value, dict) or "t" not in value or "i" not in value:
        raise ValueError(f"not a MongoDB cluster_time {{t, i}}: {value!r}")
    t, i = value["t"], value["i"]
    for name, n in (("t", t), ("i", i)):
        if not isinstance(n, int) or isinstance(n, bool):
            raise ValueError(f"cluster_time {name} must be an integer, got {n!r}")
    return t, i


def gtid(value: str) -> None:
    """A MySQL GTID set is kept in ``position`` for audit but carries no total order."""
    return None


def crdb_hlc(text: str | int) -> tuple[int, int]:
    """CockroachDB HLC ``wall.logical`` (``1532377312562986715.0000000000``) → (wall, logical),
    compared as numbers, never through a float; the same reading as :func:`crdb_hlc_decimal`
    (the fraction is the logical counter over 10 digits)."""
    return crdb_hlc_decimal(text)


def mssql_lsn(text: str) -> int:
    """SQL Server LSN (``0000002A:000001B8:0003``, ``0x0000002A000001B80003`` or 20 hex digits)
    → one integer (VLF, block, slot)."""
    if not isinstance(text, str):
        raise ValueError(f"SQL Server LSN must be a string: {text!r}")
    m = _MSSQL_LSN_COLON.match(text)
    if m:
        return (int(m.group(1), 16) << 48) | (int(m.group(2), 16) << 16) | int(m.group(3), 16)
    m = _MSSQL_LSN_HEX.match(text)
    if m:
        return int(m.group(1), 16)
    raise ValueError(f"not a SQL Server LSN: {text!r}")


def oracle_scn(value: int | str) -> int:
    """Oracle SCN (number or numeric string) → integer."""
    try:
        scn = int(str(value).strip())
    except ValueError:
        raise ValueError(f"not an Oracle SCN: {value!r}") from None
    if scn < 0:
        raise ValueError(f"Oracle SCN is negative: {scn}")
    return scn


_ORACLE_RS_ID = re.compile(r"^\s*0x([0-9A-Fa-f]+)\.([0-9A-Fa-f]+)\.([0-9A-Fa-f]+)\s*$")
_RFC3339 = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*"
    r"(Z|z|[+-]\d{2}:?\d{2})?\s*$"
)


def oracle_rs_id(text: str | None) -> tuple[int, int, int]:
    """Oracle LogMiner record set id ``0x0000d4.000091be.0010`` (redo log sequence, block,
    offset in hex; LogMiner pads it with spaces) → three integers. Empty or ``None`` (backfill
    rows) → (0, 0, 0)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return 0, 0, 0
    m = _ORACLE_RS_ID.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not an Oracle RS_ID '0x<log>.<block>.<offset>': {text!r}")
    return int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)


def timestamp_nanos(text: str) -> int:
    """An RFC 3339 timestamp with up to nanosecond digits (Spanner ``commit_timestamp``) →
    nanoseconds since the epoch, exactly (no float). No zone means UTC."""
    import datetime as dt

    m = _RFC3339.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    day, h, mi, s, frac, tz = m.groups()
    try:
        base = dt.datetime.fromisoformat(f"{day}T{h}:{mi}:{s}").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"not a valid timestamp: {text!r}") from None
    seconds = int(base.timestamp())
    if tz and tz not in ("Z", "z"):  # in whole seconds: no datetime past year 1 or 9999
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


_CRDB_DECIMAL_HLC = re.compile(r"^\s*(\d+)(?:\.(\d*))?\s*$")


def crdb_hlc_decimal(value: str | int | Any) -> tuple[int, int]:
    """CockroachDB HLC as the decimal ``wall.logical`` it is printed as (``updated``,
    ``resolved``, ``mvcc_timestamp``, ``ts_hlc``) → (wall nanoseconds, logical), exactly.

    The fraction is the logical counter over 10 digits, so short forms written by hand
    (``"3.0"``, ``"20.0"``) are read as decimals: ``1.5`` is logical 5000000000, ``1.0000000002``
    logical 2. Quoted text, integers and exact decimals (``decimal.Decimal``, as an unquoted JSON
    number must be parsed) are accepted; a float never is (it has lost the digits).
    """
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(
            f"not a CockroachDB HLC timestamp (a float has lost its digits): {value!r}"
        )
    if not isinstance(value, str | int | Decimal):
        raise ValueError(f"not a CockroachDB HLC timestamp 'wall.logical': {type(value).__name__}")
    if isinstance(value, Decimal) and not -40 < value.as_tuple().exponent <= 0:  # type: ignore[operator]
        raise ValueError(f"not a CockroachDB HLC timestamp 'wall.logical': {value!r}")
    text = format(value, "f") if isinstance(value, Decimal) else str(value)
    if len(text) > 40:
        raise ValueError(f"not a CockroachDB HLC timestamp 'wall.logical': {text[:40]!r}...")
    m = _CRDB_DECIMAL_HLC.match(text)
    if not m:
        raise ValueError(f"not a CockroachDB HLC timestamp 'wall.logical': {value!r}")
    frac = m.group(2) or ""
    if len(frac) > 10:
        if frac[10:].strip("0"):
            raise ValueError(f"HLC logical part has more than 10 digits: {value!r}")
        frac = frac[:10]
    return int(m.group(1)), int(frac.ljust(10, "0")) if frac else 0
