"""The read commands over a replica with every canonical type, in every output format, read
with pyiceberg and with Spark (the same text); their errors, coded and without a trace unless
``--debug``; nothing created by reading."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import cdcflow.api as cdc
from cdcflow.cli.main import main
from cdcflow.errors import CdcflowError

pytestmark = pytest.mark.spark

NAMESPACE = "readall"
#: column → (canonical type, wire string, JSON value, table text)
COLUMNS: dict[str, tuple[str, str, Any, str]] = {
    "flag": ("boolean", "true", True, "true"),
    "small": ("int", "7", 7, "7"),
    "big": ("bigint", "9007199254740993", 9007199254740993, "9,007,199,254,740,993"),
    "f": ("float", "1.5", 1.5, "1.5"),
    "d": ("double", "-0.125", -0.125, "-0.125"),
    "amount": (
        "decimal(21,2)",
        "12345678901234567.89",
        "12345678901234567.89",
        "12345678901234567.89",
    ),
    "text": ("string", 'naïve\ttab "q"', 'naïve\ttab "q"', 'naïve\\ttab "q"'),
    "bytes": ("binary", "AP9iaW4=", "AP9iaW4=", "\\x00\\xffbin"),
    "day": ("date", "2026-11-25", "2026-11-25", "2026-11-25"),
    "at": (
        "timestamp",
        "2026-11-25T19:14:27.000005Z",
        "2026-11-25T19:14:27.000005Z",
        "2026-11-25 19:14:27.000005",
    ),
    "wall": (
        "timestamp_ntz",
        "2026-01-02T03:04:05",
        "2026-01-02T03:04:05.000000",
        "2026-01-02 03:04:05",
    ),
    "clock": ("time", "12:34:56.789", "12:34:56.789", "12:34:56.789"),
    "uid": (
        "uuid",
        "123e4567-e89b-12d3-a456-426614174000",
        "123e4567-e89b-12d3-a456-426614174000",
        "123e4567-e89b-12d3-a456-426614174000",
    ),
    "doc": ("json", '{"a":[1,2]}', '{"a":[1,2]}', '{"a":[1,2]}'),
    "nums": ("array<int>", "[1,2,3]", [1, 2, 3], "[1,2,3]"),
    "spot": ("point", '{"x":1.5,"y":-2.0}', {"x": 1.5, "y": -2.0}, '{"x":1.5,"y":-2.0}'),
}
#: A message that is not JSON, with bytes a terminal would act on.
BAD = b'{"a":\x00\x1b[2J}'
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture(scope="module")
def config(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline whose replica ``alltypes`` holds a row of every canonical type and a row of
    NULLs, with one dead letter."""
    root = tmp_path_factory.mktemp("read")
    settings: dict[str, Any] = {
        "pipeline": NAMESPACE,
        "checkpoint": str(root / "chk"),
        "namespace": NAMESPACE,
        "dialect": "savegress",
        "keys": ["id"],
    }
    types = {"id": "bigint", **{c: t for c, (t, _, _, _) in COLUMNS.items()}}
    full = {"id": "1", **{c: w for c, (_, w, _, _) in COLUMNS.items()}}
    empty: dict[str, str | None] = {"id": "2", **dict.fromkeys(COLUMNS)}
    events = spark.createDataFrame(
        [
            ("alltypes", "INSERT", "p1!", full, types),
            ("alltypes", "INSERT", "p2!", empty, types),
        ],
        "table string, operation string, sequence string, after map<string,string>, "
        "types map<string,string>",
    )
    with cdc.foreach_batch(spark=spark, **settings) as apply:
        apply(events, 0)
        apply(spark.createDataFrame([(BAD,)], "body binary"), 1)
    path = root / "pipeline.yaml"
    doc = {
        "pipeline": NAMESPACE,
        "checkpoint": str(root / "chk"),
        "namespace": NAMESPACE,
        "catalog": {"name": "cdc", "warehouse": spark.conf.get("spark.sql.catalog.cdc.warehouse")},
        "sources": [{"name": "main", "dialect": "savegress"}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def _check_show(lines: list[str], output: str) -> None:
    if output == "json":
        rows = sorted((json.loads(ln) for ln in lines), key=lambda r: r["id"])
        assert [r["id"] for r in rows] == [1, 2]
        for name, (_, _, value, _) in COLUMNS.items():
            assert rows[0][name] == value, name
            assert rows[1][name] is None, name
        assert ISO_UTC.match(rows[0]["_cdc"]["applied_at"])
        assert rows[0]["_cdc"]["operation"] == "INSERT"
        return
    header, *rows = lines
    assert sorted(header.split()) == sorted(["id", *COLUMNS, "_cdc"])
    (full,) = [r for r in rows if COLUMNS["uid"][3] in r]
    for name, (_, _, _, text) in COLUMNS.items():
        assert re.search(f"(^|  ){re.escape(text)}(  |$)", full), (name, text, full)
    assert "\t" not in full and "\x00" not in "".join(lines)


def _check_tables(lines: list[str], output: str) -> None:
    if output == "json":
        assert lines == [f'{{"table":"cdc.{NAMESPACE}.alltypes","rows":2}}']
    else:
        assert [ln.split() for ln in lines] == [
            ["table", "rows"],
            [f"cdc.{NAMESPACE}.alltypes", "2"],
        ]


def _check_history(lines: list[str], output: str) -> None:
    if output == "json":
        rows = sorted((json.loads(ln) for ln in lines), key=lambda r: r["batch_id"])
        assert [(r["batch_id"], r["events"], r["applied"], r["dead_lettered"]) for r in rows] == [
            (0, 2, 2, 0),
            (1, 1, 0, 1),
        ]
        assert all(ISO_UTC.match(r["started_at"]) for r in rows)
        assert isinstance(rows[0]["stages"]["merge"], float)
        return
    header, *rows = lines
    assert re.split(r"\s{2,}", header) == [
        "source",
        "batch",
        "started",
        "events",
        "applied",
        "duplicates",
        "stale",
        "conflicts",
        "dead-lettered",
        "seconds",
        "slowest stage or action",
    ]
    assert [r.split()[:2] for r in rows] == [["main", "1"], ["main", "0"]]


def _check_dead_letters(lines: list[str], output: str) -> None:
    if output == "json":
        (row,) = (json.loads(ln) for ln in lines)
        assert base64.b64decode(row["raw"]) == BAD and row["error_code"] == "NOT_JSON"
        assert ISO_UTC.match(row["first_seen"])
        return
    header, row = lines
    assert header.split()[:3] == ["source", "batch", "first_seen"]
    assert '{"a":\\x00\\x1b[2J}' in row and "\x00" not in row and "\x1b" not in row


def _check_watermarks(lines: list[str], output: str) -> None:
    assert lines == ["no resolved watermarks yet (the producers sent no RESOLVED events)"]


READS = {
    "show": (["show", "{config}", "alltypes", "--full"], _check_show),
    "sql": (["sql", "{config}", f"SELECT * FROM cdc.{NAMESPACE}.alltypes", "--full"], _check_show),
    "tables": (["tables", "{config}"], _check_tables),
    "history": (["history", "{config}"], _check_history),
    "dead-letters": (["dead-letters", "{config}"], _check_dead_letters),
    "watermarks": (["watermarks", "{config}"], _check_watermarks),
}


@pytest.mark.parametrize("output", ["table", "json"])
@pytest.mark.parametrize("command", sorted(READS))
def test_every_read_command_prints_every_canonical_type_in_every_format(
    config: Path, capsys: pytest.CaptureFixture[str], command: str, output: str
) -> None:
    """Read with pyiceberg (no JVM), then through Spark: the same lines, every type."""
    argv, check = READS[command]
    args = [*[a.format(config=config) for a in argv], "--output", output]
    rc, lines, err = _run(capsys, *args)
    assert rc == 0, err
    check(lines, output)
    if command != "sql":
        rc, through_spark, err = _run(capsys, *args, "--spark")
        assert rc == 0, err
        assert through_spark == lines


def test_show_sorts_by_key_and_says_how_many_more(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for via in ([], ["--spark"]):
        show = ["show", str(config), "alltypes", "--limit", "1", *via]
        rc, lines, err = _run(capsys, *show)
        assert rc == 0, err
        assert len(lines) == 3 and lines[2] == "… 1 more row(s) of 2 (--limit shows more)"
        rc, lines, err = _run(capsys, *show, "--output", "json")
        assert [json.loads(ln)["id"] for ln in lines] == [1]  # the first key
        assert err == "… 1 more row(s) of 2 (--limit shows more)\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["show", "{config}", "alltype"],
            [
                f"[TABLE_NOT_FOUND] no table 'alltype' in cdc.{NAMESPACE}. Did you mean "
                "'alltypes'?",
                f"hint: tables of cdc.{NAMESPACE}: alltypes (cdcflow tables lists them with "
                "their row counts)",
            ],
        ),
        (
            ["sql", "{config}", "SELEC 1"],
            [
                "[SQL_SYNTAX] syntax error near 'SELEC' at line 1, column 1: 'SELEC 1'",
                "hint: tables are named catalog.namespace.table (cdcflow tables lists them)",
            ],
        ),
        (
            ["sql", "{config}", f"SELECT *\nFROM cdc.{NAMESPACE}.custmers"],
            [
                f"[TABLE_NOT_FOUND] no table or view cdc.{NAMESPACE}.custmers",
                f"hint: the pipeline's tables: cdc.{NAMESPACE}.alltypes",
            ],
        ),
    ],
)
def test_read_errors_are_coded_with_a_hint_and_no_trace(
    config: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: list[str]
) -> None:
    rc, lines, err = _run(capsys, *[a.format(config=config) for a in argv])
    assert (rc, lines, err.splitlines()) == (2, [], expected)
    if argv[0] != "sql":
        rc, lines, err = _run(capsys, *[a.format(config=config) for a in argv], "--spark")
        assert (rc, lines, err.splitlines()) == (2, [], expected)
    with pytest.raises(CdcflowError) as e:  # --debug shows the trace: the error is raised
        main(["--debug", *[a.format(config=config) for a in argv]])
    assert str(e.value) == expected[0]
    capsys.readouterr()


@pytest.mark.parametrize("command", ["tables", "history", "dead-letters", "watermarks", "status"])
def test_a_read_never_creates_a_catalog_or_a_namespace(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A typo in ``warehouse`` or ``namespace`` is an error naming what exists, whichever way
    the command reads, and leaves nothing behind."""
    doc = yaml.safe_load(config.read_text())
    typo = tmp_path / "warehous"
    bad_warehouse = tmp_path / "w.yaml"
    bad_warehouse.write_text(
        yaml.safe_dump({**doc, "catalog": {"name": "cdc", "warehouse": str(typo)}})
    )
    bad_namespace = tmp_path / "n.yaml"
    bad_namespace.write_text(yaml.safe_dump({**doc, "namespace": "readal"}))
    for via in ([], ["--spark"]):
        rc, lines, err = _run(capsys, command, str(bad_warehouse), *via)
        assert (rc, lines) == (2, []), err
        assert err.startswith(f"[CATALOG_NOT_FOUND] catalog 'cdc': warehouse {typo} does not exist")
        assert not typo.exists()
        rc, lines, err = _run(capsys, command, str(bad_namespace), *via)
        assert (rc, lines) == (2, []), err
        head, hint = err.splitlines()
        wanted = "[NAMESPACE_NOT_FOUND] no namespace 'readal' in catalog 'cdc'. Did you mean"
        assert head == f"{wanted} '{NAMESPACE}'?"
        assert f" {NAMESPACE}" in hint and "__cdcflow" not in hint
        assert re.search(r"\breadal\b", hint) is None
