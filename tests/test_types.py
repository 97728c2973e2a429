"""Typed values: conversion, wire strings, type tables, widening."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow import types as T


def test_decimal_strings_are_exact() -> None:
    assert T.convert("123.456", "decimal(6,3)") == Decimal("123.456")
    assert T.convert("12.5", "decimal(10,2)") == Decimal("12.50")
    assert T.to_wire(T.convert("12.5", "decimal(10,2)")) == "12.50"
    with pytest.raises(T.ValueTypeError, match="fractional digits"):
        T.convert("1.234", "decimal(10,2)")
    with pytest.raises(T.ValueTypeError, match="does not fit"):
        T.convert("123456", "decimal(6,3)")


def test_timestamps() -> None:
    ts = T.convert("2025-01-15T10:30:00.123456Z", "timestamp")
    assert ts == dt.datetime(2025, 1, 15, 10, 30, 0, 123456, tzinfo=dt.UTC)
    assert T.convert("2025-01-15T12:30:00+02:00", "timestamp") == dt.datetime(
        2025, 1, 15, 10, 30, tzinfo=dt.UTC
    )
    # SQL Server datetime2(7): 7 fractional digits truncated to microseconds
    assert T.convert("2026-08-07 16:25:00.8833333", "timestamp_ntz") == dt.datetime(
        2026, 8, 7, 16, 25, 0, 883333
    )
    # the unified format writes Postgres `timestamp` with a Z
    assert T.convert("2025-01-15T10:30:00Z", "timestamp_ntz") == dt.datetime(2025, 1, 15, 10, 30)
    with pytest.raises(T.ValueTypeError, match="offset"):
        T.convert("2025-01-15T10:30:00+02:00", "timestamp_ntz")
    assert T.to_wire(ts) == "2025-01-15T10:30:00.123456Z"


def test_binary_json_point_array() -> None:
    assert T.convert("SGVsbG8gV29ybGQ=", "binary") == b"Hello World"
    with pytest.raises(T.ValueTypeError, match="base64"):
        T.convert("not base64!", "binary")
    assert T.convert({"key": "value"}, "json") == '{"key":"value"}'
    assert T.convert({"x": 1.0, "y": 2}, "point") == {"x": 1.0, "y": 2.0}
    assert T.convert("(1.5,2)", "point") == {"x": 1.5, "y": 2.0}
    assert T.convert([1, 2, 3], "array<int>") == [1, 2, 3]
    assert T.to_wire([1, 2]) == "[1,2]"


def test_ints_and_bools() -> None:
    assert T.convert("105", "int") == 105
    with pytest.raises(T.ValueTypeError, match="32 bits"):
        T.convert(2**31, "int")
    with pytest.raises(T.ValueTypeError, match="integer"):
        T.convert("1.5", "bigint")
    assert T.convert("true", "boolean") is True
    assert T.convert(0, "boolean") is False


@pytest.mark.parametrize(
    ("source", "native", "canonical"),
    [
        ("postgres", "integer", "int"),
        ("postgres", "numeric(10,2)", "decimal(10,2)"),
        ("postgres", "NUMERIC", T.DEFAULT_DECIMAL),
        ("postgres", "timestamptz", "timestamp"),
        ("postgres", "timestamp without time zone", "timestamp_ntz"),
        ("postgres", "jsonb", "json"),
        ("postgres", "bytea", "binary"),
        ("postgres", "integer[]", "array<int>"),
        ("postgres", "_int8", "array<bigint>"),
        ("postgres", "varchar(20)", "string"),
        ("postgres", "point", "point"),
        ("mysql", "TINYINT(1)", "boolean"),
        ("mysql", "tinyint", "int"),
        ("mysql", "DECIMAL(12,4)", "decimal(12,4)"),
        ("mysql", "datetime", "timestamp_ntz"),
        ("mysql", "timestamp", "timestamp"),
        ("mysql", "set", "array<string>"),
        ("mysql", "blob", "binary"),
        ("mysql", "enum", "string"),
        ("mysql", "int(11)", "int"),
        ("sqlserver", "float", "double"),
        ("sqlserver", "timestamp", "binary"),
        ("sqlserver", "datetime2(7)", "timestamp_ntz"),
        ("sqlserver", "nvarchar(max)", "string"),
        ("sqlserver", "decimal(10,2)", "decimal(10,2)"),
        ("oracle", "NUMBER(6)", "int"),
        ("oracle", "NUMBER(12)", "bigint"),
        ("oracle", "NUMBER(20)", "decimal(20,0)"),
        ("oracle", "NUMBER(*,2)", "decimal(38,2)"),
        ("oracle", "NUMBER(6,-2)", "int"),
        ("oracle", "DATE", "timestamp_ntz"),
        ("oracle", "TIMESTAMP(6) WITH LOCAL TIME ZONE", "timestamp"),
        ("oracle", "INTERVAL DAY(2) TO SECOND(6)", "string"),
        ("oracle", "VARCHAR2(20 BYTE)", "string"),
        ("spanner", "ARRAY<INT64>", "array<bigint>"),
        ("spanner", "STRING(MAX)", "string"),
        ("cockroachdb", "INT", "bigint"),
        ("cockroachdb", "INT[]", "array<bigint>"),
        ("cockroachdb", "_int4", "array<int>"),
        ("cockroachdb", "TIMESTAMP", "timestamp_ntz"),
        ("cockroachdb", "TIMESTAMPTZ(6)", "timestamp"),
        ("cockroachdb", "DEC(10,2)", "decimal(10,2)"),
        ("cockroachdb", "STRING(20)[]", "array<string>"),
        ("postgres", "numeric(40,2)", "decimal(38,2)"),  # clamped to 38 digits
        ("postgres", "numeric(10,-2)", "decimal(10,0)"),  # a negative scale reads as 0
        ("postgres", "timestamp(3) with time zone", "timestamp"),
        ("", "decimal(10,2)", "decimal(10,2)"),  # no table: canonical names only
    ],
)
def test_source_type_tables(source: str, native: str, canonical: str) -> None:
    assert T.source_type(source, native) == canonical


def test_every_vendor_table_maps_to_canonical_types() -> None:
    from cdcflow.types.vendors import vendors

    found = vendors()
    assert set(found) == {"postgres", "mysql", "sqlserver", "oracle", "spanner", "cockroachdb"}
    for source, table in found.items():
        assert table.source == source
        for native, canonical in table.names.items():
            assert native == native.lower().strip() and T.is_valid_type(canonical), native
            assert T.source_type(source, native) in (canonical, native), (source, native)


def test_unknown_source_type_is_named() -> None:
    with pytest.raises(T.ValueTypeError, match="geography"):
        T.source_type("postgres", "geography")
    with pytest.raises(T.ValueTypeError, match=r"bad precision in 'numeric\(a,b\)'"):
        T.source_type("postgres", "numeric(a,b)")
    with pytest.raises(T.ValueTypeError, match="no type table for source ''"):
        T.source_type("", "decimal(40,2)")  # not canonical
    with pytest.raises(T.ValueTypeError, match="unknown mysql type '_text'"):
        T.source_type("mysql", "_text")  # _name arrays are Postgres' (and CockroachDB's)


@pytest.mark.parametrize("source", ["postgres", "cockroachdb", "oracle"])
@pytest.mark.parametrize("native", ["numeric(10,2", "DECIMAL(10,2))", "array<int"])
def test_a_name_whose_brackets_do_not_pair_up_is_no_type(source: str, native: str) -> None:
    # CockroachDB's names win by the part before the first parenthesis: DECIMAL(10,2 read as
    # decimal(38,18) before
    with pytest.raises(T.ValueTypeError, match="unbalanced brackets"):
        T.source_type(source, native)


@pytest.mark.parametrize(
    ("value", "inferred"),
    [
        (2**63 - 1, "bigint"),
        (-(2**63), "bigint"),
        (2**63, "decimal(38,0)"),
        (-(2**63) - 1, "decimal(38,0)"),
        (10**37, "decimal(38,0)"),  # 38 digits
        (10**38, "decimal(38,0)"),  # 39 digits: the type, and the value does not fit it
        (Decimal("12"), "bigint"),
        (Decimal("1E+3"), "bigint"),
        (Decimal("9223372036854775807"), "bigint"),
        (Decimal("9223372036854775808"), "decimal(38,0)"),
        (Decimal("1E+40"), "decimal(38,0)"),
        (Decimal("12.50"), "decimal(22,2)"),
        (Decimal("-0.5"), "decimal(21,1)"),
        (Decimal("123456789012345678901234.5"), "decimal(25,1)"),
        (Decimal("0." + "1" * 18), "decimal(38,18)"),
        (Decimal("0." + "1" * 19), "decimal(38,19)"),  # beyond 18 fractional digits: kept
        (Decimal("0." + "1" * 40), "decimal(38,38)"),
        (Decimal("NaN"), "decimal(38,18)"),
        (1.5, "double"),
    ],
)
def test_json_number_inference(value: object, inferred: str) -> None:
    assert T.infer_type(value) == inferred


def test_inferred_types_hold_their_values_or_reject_them() -> None:
    # the inferred type holds every value that fits 38 digits ...
    for value in (2**63, 10**37, -(10**38) + 1, Decimal("0." + "1" * 19), Decimal("12.50")):
        assert T.convert(value, T.infer_type(value)) == value
    # ... and a value beyond it is a coded conversion error, never a wrong value
    for value in (10**38, Decimal("1E+40"), Decimal("0." + "1" * 40)):
        with pytest.raises(T.ValueTypeError, match=r"does not fit|fractional digits"):
            T.convert(value, T.infer_type(value))


def test_one_inference_rule_for_every_dialect() -> None:
    """The same untyped JSON numbers get the same types from CockroachDB and Debezium (which
    both read numbers exactly): they used to differ (decimal(22,2) against decimal(38,2), and
    an integer beyond 64 bits a decimal against a bigint that could not hold it)."""
    from cdcflow.decode.decoder import Decoder
    from cdcflow.dialects.model import DialectOptions

    row = b'{"id":1,"p":12.50,"b":18446744073709551616}'
    messages = {
        "cockroachdb": b'{"after":' + row + b',"key":[1]}',
        "debezium": b'{"before":null,"after":' + row + b',"op":"c","source":{"table":"t",'
        b'"connector":"postgresql","lsn":1}}',
    }
    # a CockroachDB cloud-storage file name, which names the table
    origin = "202301020304050000000000000000000-0123456789abcdef-1-2-00000000-t-1.ndjson"
    found = {}
    for dialect, data in messages.items():
        (outcome,) = Decoder(dialect, DialectOptions()).decode_file(data, origin)
        ((event,), ()) = (outcome.events, tuple(outcome.rejections))
        found[dialect] = event["types"]
    expected = {"id": "bigint", "p": "decimal(22,2)", "b": "decimal(38,0)"}
    assert found == {"cockroachdb": expected, "debezium": expected}


def test_widening() -> None:
    assert T.widen("int", "bigint") == "bigint"
    assert T.widen("float", "double") == "double"
    assert T.widen("decimal(10,2)", "decimal(12,2)") == "decimal(12,2)"
    assert T.widen("decimal(10,2)", "decimal(10,3)") is None
    assert T.widen("bigint", "string") is None


def test_inference_never_guesses_text() -> None:
    assert T.infer_type("2025-01-15T10:30:00Z") == "string"
    assert T.infer_type(1) == "bigint"
    assert T.infer_type(1.5) == "double"
    assert T.infer_type(True) == "boolean"
    assert T.infer_type({"a": 1}) == "json"
    assert T.infer_type(None) is None


WIRE_TYPES = [
    "string",
    "json",
    "bigint",
    "int",
    "double",
    "float",
    "boolean",
    "decimal(10,2)",
    "decimal(38,0)",
    "decimal(5,5)",
    "timestamp",
    "timestamp_ntz",
    "date",
    "uuid",
]


@settings(max_examples=400, deadline=None)
@given(
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        st.text(max_size=12),
        st.from_regex(r"-?0*\d{0,12}(\.\d{0,8})?", fullmatch=True),
        st.from_regex(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", fullmatch=True),
    ),
    t=st.sampled_from(WIRE_TYPES),
)
def test_wire_value_is_the_wire_string_of_the_converted_value(value: object, t: str) -> None:
    """The fast path to wire strings agrees with conversion then :func:`to_wire`, errors
    included."""
    try:
        expected: object = T.to_wire(T.convert(value, t))
    except T.ValueTypeError:
        expected = T.ValueTypeError
    try:
        got: object = T.wire_value(value, t)
    except T.ValueTypeError:
        got = T.ValueTypeError
    assert got == expected


@pytest.mark.parametrize(
    ("value", "t"),
    [(1, "bigint"), (1.5, "double"), (True, "boolean"), ("2025-01-15", "date")],
)
def test_wire_json_is_the_json_form_of_the_typed_value(value: object, t: str) -> None:
    import orjson

    typed = T.convert(value, t)
    assert orjson.dumps(T.wire_json(T.to_wire(typed), t)) == orjson.dumps(
        typed, default=T.json_default
    )


# ---------------------------------------------------------------- canonical names only


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("string", True),
        ("decimal(38,0)", True),
        ("decimal(10, 2)", True),
        ("array<array<decimal(5,5)>>", True),
        ("varchar(10)", False),
        ("decimal(39,2)", False),
        ("decimal(0,0)", False),
        ("decimal(5,6)", False),
        ("decimal(38,-3)", False),
        ("decimal(010,2)", False),
        ("array<varchar>", False),
        ("array<int", False),
        ("smallint", False),
        ("", False),
    ],
)
def test_canonical_names_and_spark_types(name: str, canonical: bool) -> None:
    assert T.is_valid_type(name) is canonical
    if canonical:
        assert T.spark_type(name).startswith(name.split("(")[0].split("<")[0])
    else:
        with pytest.raises(T.ValueTypeError, match=r"not a canonical type: .*canonical types"):
            T.spark_type(name)


def test_storage_of_an_existing_columns_spark_type() -> None:
    # an existing table's column types are Spark's: compared, never refused
    assert T.storage_type("json") == "string" and T.storage_type("smallint") == "smallint"
    assert T.widen("string", "json") == "string" and T.widen("smallint", "int") is None
    assert T.spark_from_wire("v", "smallint") == "cast(v as smallint)"
    assert T.spark_from_wire("v", "json") == "v"


def test_an_event_declaring_a_type_that_is_not_canonical_is_rejected_by_the_decoder() -> None:
    """A CockroachDB Connect schema with a negative decimal scale gave ``decimal(38,-3)``,
    which reached the table's DDL; the decoder rejects the message (``BAD_TYPE``), naming the
    column and its type, and decodes the next message."""
    from cdcflow.decode.decoder import Decoder
    from cdcflow.dialects.model import DialectOptions

    def doc(scale: str) -> bytes:
        return (
            b'{"payload":{"after":{"id":1,"x":5},"op":"c","source":{"table_name":"t",'
            b'"primary_keys":["id"]}},"schema":{"fields":[{"field":"after","fields":['
            b'{"field":"id","type":"int64"},{"field":"x","name":"decimal",'
            b'"parameters":{"scale":"' + scale.encode() + b'"}}]}]}}'
        )

    decoder = Decoder("cockroachdb", DialectOptions())
    bad, good = (list(decoder.decode_file(doc(s) + b"\n", "f.json")) for s in ("-3", "2"))
    assert [e for o in bad for e in o.events] == []
    ((rejection,),) = [o.rejections for o in bad]
    assert (rejection.code, rejection.dialect) == ("BAD_TYPE", "cockroachdb")
    assert rejection.message.startswith(
        "types of table 't' not canonical ('x': 'decimal(38,-3)'); canonical types are "
    )
    assert rejection.raw.startswith(b'{"payload"')
    ((event,),) = [o.events for o in good]
    assert event["types"] == {"id": "bigint", "x": "decimal(38,2)"}
