"""Native position parsers."""

from __future__ import annotations

import pytest

from cdcflow import positions


def test_pg_lsn() -> None:
    assert positions.pg_lsn("0/1234ABCD") == 0x1234ABCD
    assert positions.pg_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    with pytest.raises(ValueError, match="Postgres LSN"):
        positions.pg_lsn("1234")


def test_mysql_binlog() -> None:
    assert positions.mysql_binlog("mysql-bin.000001", 12345) == (1, 12345)
    assert positions.mysql_binlog("binlog.000123", "4") == (123, 4)
    with pytest.raises(ValueError, match="sequence number"):
        positions.mysql_binlog("mysql-bin", 4)
    with pytest.raises(ValueError, match="not an integer"):
        positions.mysql_binlog("mysql-bin.000001", "x")


def test_mongodb_cluster_time() -> None:
    assert positions.mongodb_cluster_time({"t": 1234567890, "i": 1}) == (1234567890, 1)
    assert positions.mongodb_cluster_time({"$timestamp": {"t": 5, "i": 2}}) == (5, 2)
    with pytest.raises(ValueError):
        positions.mongodb_cluster_time({"t": "x", "i": 1})


def test_gtid_has_no_order() -> None:
    assert positions.gtid("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5") is None


def test_crdb_hlc_never_through_float() -> None:
    assert positions.crdb_hlc("1532377312562986715.0000000000") == (1532377312562986715, 0)
    assert positions.crdb_hlc("1.0000000002") == (1, 2)
    with pytest.raises(ValueError):
        positions.crdb_hlc("abc")


def test_mssql_lsn_forms_agree() -> None:
    a = positions.mssql_lsn("0000002A:000001B8:0003")
    b = positions.mssql_lsn("0x0000002A000001B80003")
    c = positions.mssql_lsn("0000002A000001B80003")
    assert a == b == c


def test_oracle_scn() -> None:
    assert positions.oracle_scn("  1234 ") == 1234
    with pytest.raises(ValueError):
        positions.oracle_scn("-1")


def test_crdb_hlc_short_fraction_is_a_decimal() -> None:
    # the fraction is the logical counter over 10 digits: "1.5" is logical 5000000000
    assert positions.crdb_hlc("1.5") == (1, 5_000_000_000)
    assert positions.crdb_hlc("1.5") > positions.crdb_hlc("1.0000000009")


def test_timestamp_nanos_takes_offsets_at_the_ends_of_the_calendar() -> None:
    assert positions.timestamp_nanos("2024-01-01T01:00:00.5+01:00") == 1704067200500000000
    assert positions.timestamp_nanos("0001-01-01T00:00:00+01:00") == -62135600400 * 10**9
    assert positions.timestamp_nanos("9999-12-31T23:59:59-01:00") == 253402304399 * 10**9
