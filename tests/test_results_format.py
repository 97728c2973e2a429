"""How the read commands print: lags as durations, counts with separators, aligned columns,
JSON lines."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from cdcflow.cli.render import json_value, text_value
from cdcflow.cli.results import duration, emit
from cdcflow.observe.values import arrow_shape, python_value, spark_shape


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (114_220_245.3, "1321d 23:50:45"),  # what used to print as 1.142202453E8
        (245, "00:04:05"),
        (-3725, "-01:02:05"),
        (None, ""),
    ],
)
def test_lags_print_as_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_tables_align_and_separate_thousands(capsys: pytest.CaptureFixture[str]) -> None:
    emit(["scope", "lag", "events"], [("t", duration(114_220_245.3), 1_234_567)], "table")
    assert capsys.readouterr().out.splitlines() == [
        "scope  lag                events",
        "t      1321d 23:50:45  1,234,567",
    ]


def test_json_output_is_one_compact_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    emit(["scope", "events"], [("t", 12), ("u", 3)], "json")
    assert capsys.readouterr().out.splitlines() == [
        '{"scope":"t","events":12}',
        '{"scope":"u","events":3}',
    ]


def _types() -> dict[str, Any]:
    from pyspark.sql import types as T

    point = T.StructType([T.StructField("x", T.DoubleType()), T.StructField("y", T.DoubleType())])
    return {
        "boolean": T.BooleanType(),
        "bigint": T.LongType(),
        "double": T.DoubleType(),
        "decimal": T.DecimalType(21, 2),
        "string": T.StringType(),
        "binary": T.BinaryType(),
        "date": T.DateType(),
        "timestamp": T.TimestampType(),
        "timestamp_ntz": T.TimestampNTZType(),
        "array": T.ArrayType(T.DecimalType(5, 1)),
        "map": T.MapType(T.StringType(), T.TimestampType()),
        "struct": point,
    }


#: PySpark returns a ``timestamp`` as a naive datetime in the process's local time zone.
_INSTANT = dt.datetime(2026, 11, 25, 19, 14, 27, 5, tzinfo=dt.UTC)
_LOCAL = _INSTANT.astimezone().replace(tzinfo=None)

_VALUES: dict[str, tuple[Any, Any, str]] = {
    # type: (value as PySpark returns it, JSON value, table text)
    "boolean": (True, True, "true"),
    "bigint": (1_234_567, 1_234_567, "1,234,567"),
    "double": (float("nan"), "NaN", "NaN"),
    "decimal": (
        Decimal("1234567890123456789.50"),
        "1234567890123456789.50",
        "1234567890123456789.50",
    ),
    "string": ("a\x00b\x1b[31m", "a\x00b\x1b[31m", "a\\x00b\\x1b[31m"),
    "binary": (b"\x00\xffok", "AP9vaw==", "\\x00\\xffok"),
    "date": (dt.date(2026, 11, 25), "2026-11-25", "2026-11-25"),
    "timestamp": (_LOCAL, "2026-11-25T19:14:27.000005Z", "2026-11-25 19:14:27.000005"),
    "timestamp_ntz": (
        dt.datetime(2026, 1, 2, 3, 4, 5),
        "2026-01-02T03:04:05.000000",
        "2026-01-02 03:04:05",
    ),
    "array": ([Decimal("1.5"), None], ["1.5", None], '["1.5",null]'),
    "map": (
        {"at": _LOCAL},
        {"at": "2026-11-25T19:14:27.000005Z"},
        '{"at":"2026-11-25T19:14:27.000005Z"}',
    ),
    "struct": ((1.0, float("inf")), {"x": 1.0, "y": "Infinity"}, '{"x":1.0,"y":"Infinity"}'),
}


def _arrow(name: str) -> tuple[Any, Any]:
    """The Arrow type pyiceberg reads a column of Spark type ``name`` as, and the value of
    :data:`_VALUES` as Arrow gives it back (``to_pylist``)."""
    import pyarrow as pa

    types = {
        "boolean": pa.bool_(),
        "bigint": pa.int64(),
        "double": pa.float64(),
        "decimal": pa.decimal128(21, 2),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
        "array": pa.list_(pa.decimal128(5, 1)),
        "map": pa.map_(pa.string(), pa.timestamp("us", tz="UTC")),
        "struct": pa.struct([("x", pa.float64()), ("y", pa.float64())]),
    }
    value = _VALUES[name][0]
    if name == "timestamp":
        value = _INSTANT
    elif name == "map":
        value = {"at": _INSTANT}
    elif name == "struct":
        value = dict(zip("xy", value, strict=True))
    array = pa.array([value], types[name])
    return types[name], array.to_pylist()[0]


@pytest.mark.parametrize("name", sorted(_VALUES))
def test_every_spark_type_has_one_json_and_one_table_rendering(name: str) -> None:
    """A value prints the same whether PySpark gave it (Spark's type) or pyiceberg (Arrow's
    type, the value as Arrow gives it back)."""
    value, as_json, as_text = _VALUES[name]
    arrow_type, arrow_value = _arrow(name)
    for shape, found in (
        (spark_shape(_types()[name]), value),
        (arrow_shape(arrow_type), python_value(arrow_value, arrow_shape(arrow_type))),
    ):
        assert json_value(found, shape) == as_json
        assert text_value(found, shape) == as_text
        assert json_value(None, shape) is None and text_value(None, shape) == ""


def test_a_json_line_is_valid_json_whatever_the_values(capsys: pytest.CaptureFixture[str]) -> None:
    names = sorted(_VALUES)
    shapes = [spark_shape(_types()[n]) for n in names]
    emit(names, [tuple(_VALUES[n][0] for n in names)], "json", shapes=shapes)
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {n: _VALUES[n][1] for n in names}


def test_table_cells_escape_what_a_terminal_would_act_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit(["raw"], [(b'{"a":\x00\x07\n}',), ("\u202eevil",)], "table")
    assert capsys.readouterr().out.splitlines() == [
        "raw",
        '{"a":\\x00\\x07\\n}',
        "\\u202eevil",
    ]


def test_timestamps_print_in_utc_whatever_the_local_time_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setenv("TZ", "America/St_Johns")  # UTC-03:30 in November
    time.tzset()
    try:
        local = _INSTANT.astimezone().replace(tzinfo=None)  # what PySpark would return
        assert local.hour == 15
        timestamp = spark_shape(_types()["timestamp"])
        assert json_value(local, timestamp) == "2026-11-25T19:14:27.000005Z"
        assert text_value(local, timestamp) == "2026-11-25 19:14:27.000005"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_run_keeps_totals_of_every_batch_and_only_the_recent_reports() -> None:
    """A ``--follow`` run reports a batch every few seconds for months: its result counts
    every batch, event and dead letter, and keeps only the most recent reports in memory."""
    from cdcflow.pipeline.report import BatchReport, Reports, RunResult

    def report(n: int) -> BatchReport:
        return BatchReport(
            batch_id=n,
            events=10,
            operations={"u": 10},
            duplicates=0,
            conflicts=0,
            stale=0,
            dead_lettered=n % 2,
            tables={"t": 10},
            seconds=1.0,
            undelivered=1 if n == 7 else 0,
        )

    reports = Reports(keep=5)
    for n in range(12):
        reports.add(report(n))
    assert [r.batch_id for r in reports] == [7, 8, 9, 10, 11] and reports[-1].batch_id == 11
    assert (len(reports), reports.batches, reports.events) == (5, 12, 120)
    result = RunResult(reports=reports)
    assert (result.events, result.dead_lettered) == (120, 6 + 1)
    assert result.summary().startswith("done: 12 batch(es), 120 events, 7 dead-lettered")
