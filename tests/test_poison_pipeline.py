"""A pipeline over good files and poison files: every good event applied exactly, every bad
message — and every other producer's message — dead-lettered with its code, the run completes
with the dead-letter exit status."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.config import load_config
from cdcflow.dialects import renderer, renderer_features
from cdcflow.pipeline.query import Pipeline
from cdcflow.pipeline.report import UNDECODED, format_report
from cdcflow.simulation.workload import generate
from cdcflow.testing.compare import compare_replicas
from cdcflow.transports.json import BOM

pytestmark = pytest.mark.spark

DS = b'{"source_metadata":{"table":"t"},"payload":{"id":%s}}'

_CES_DATA = {
    "eventsource": {
        "db": "d",
        "schema": "dbo",
        "tbl": "t",
        "cols": [{"name": "id", "type": "int", "index": 0}],
        "pkkey": [{"columnname": "id", "value": "1"}],
        "transaction": {"commitlsn": "0000002d:00000108:0001", "sequencenumber": 1},
    },
    "eventrow": {"old": "{}", "current": '{"id": "1"}'},
}
#: One message each of Debezium (with its schema), CockroachDB, the unified format and SQL
#: Server CES, all of a table t.
OTHER_DIALECTS = tuple(
    orjson.dumps(doc)
    for doc in (
        {
            "schema": {"type": "struct", "name": "srv.public.t.Envelope"},
            "payload": {
                "before": None,
                "after": {"id": 1},
                "source": {"connector": "postgresql", "table": "t", "lsn": 1},
                "op": "c",
            },
        },
        {"after": {"id": 1}, "key": [1], "updated": "1.0000000000", "topic": "t"},
        {"operation": "INSERT", "table": "t", "after": {"id": 1}, "position": {"lsn": "0/1"}},
        {
            "specversion": "1.0",
            "type": "com.microsoft.SQL.CES.DML.V1",
            "source": "/",
            "id": "1",
            "operation": "INS",
            "segmentindex": 0,
            "finalsegment": True,
            "data": orjson.dumps(_CES_DATA).decode(),
        },
    )
)

#: Poison files (name → bytes) and the dead letters each must give.
POISON: dict[str, tuple[bytes, list[str]]] = {
    # the probe's 71-byte message that used to stop the pipeline for good: its id, beyond 64
    # bits, is a decimal(38,0), and table t has no key known
    "poison/unsigned.json": (DS % b"18446744073709551615", ["KEY_UNKNOWN"]),
    "poison/lines.jsonl": (
        b"garbage\n"
        + DS % (b"[" * 300 + b"]" * 300)
        + b"\n"
        + DS % (b"9" * 5000)
        + b"\n"
        + DS % b"1.0e999999999",
        ["NOT_JSON", "TOO_DEEP", "NUMBER_TOO_LARGE", "NUMBER_TOO_LARGE"],
    ),
    "poison/deep-array.json": (b"[" * 1000 + b"]" * 1000, ["TOO_DEEP"]),
    "poison/array.json": (b"[" + b"[" * 300 + b"]" * 300 + b"]", ["TOO_DEEP"]),
    "poison/empty.avro": (b"", ["EMPTY_FILE"]),
    "poison/empty.jsonl": (b"", ["EMPTY_FILE"]),
    "poison/truncated.avro": (b"Obj\x01\x04\x14avro.codec", ["CORRUPT_AVRO"]),
    # other producers' messages at a datastream source: never columns of a table t
    "poison/other-dialects.jsonl": (b"\n".join(OTHER_DIALECTS), ["OTHER_DIALECT"] * 4),
}


def test_poison_files_among_good_ones(spark: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    w = generate(5, tables=2, transactions=25, features=renderer_features("datastream"))
    options = renderer("datastream")(w, landing, seed=5, faults=False).options
    first, second = sorted(p for p in landing.rglob("*.jsonl"))
    first.write_bytes(BOM + first.read_bytes())  # a byte-order mark loses nothing
    second.write_bytes(b"not json at all\n" + second.read_bytes())  # nor a bad first line
    expected = Counter({"NOT_JSON": 1, "BAD_VALUE": 1, "TYPE_CONFLICT": 1})
    # a value its declared type cannot read: rejected once the table is known, and named; the
    # same value where no type is declared reaches the engine, whose key column it does not fit
    doc = orjson.loads(first.read_bytes().splitlines()[1])
    table = doc["source_metadata"]["table"]
    column = next(c for c, t in w.tables[table].columns.items() if t in ("int", "bigint"))
    declared = {**doc, "payload": {column: "x"}}
    undeclared = {**declared, "source_metadata": {"table": table}}
    (landing / "poison").mkdir()
    (landing / "poison" / "bad_value.jsonl").write_bytes(
        orjson.dumps(declared) + b"\n" + orjson.dumps(undeclared) + b"\n"
    )
    for name, (data, codes) in POISON.items():
        (landing / name).parent.mkdir(parents=True, exist_ok=True)
        (landing / name).write_bytes(data)
        expected.update(codes)

    cfg = load_config(
        {
            "pipeline": "poison",
            "checkpoint": str(tmp_path / "checkpoint"),
            "namespace": "poison",
            "catalog": {"name": "cdc", "warehouse": str(tmp_path / "wh")},
            "sources": [
                {
                    "name": "ds",
                    "path": str(landing),
                    "dialect": "datastream",
                    "types": {t: dict(c) for t, c in options.column_types.items()},
                }
            ],
        }
    )
    result = Pipeline(cfg, spark).run()

    letters = spark.sql("SELECT error_code, origin, `table` FROM cdc.poison__cdcflow.dead_letters")
    found = [(r["error_code"], r["origin"]) for r in letters.collect()]
    named = {r["error_code"]: r["table"] for r in letters.collect()}
    assert (named["BAD_VALUE"], named["TYPE_CONFLICT"]) == (table, table)
    assert (named["KEY_UNKNOWN"], named["NOT_JSON"]) == ("t", None)
    assert Counter(code for code, _ in found) == expected, found
    assert result.exit_status == 3
    assert result.dead_lettered == sum(expected.values())
    # the counts add up, the operation breakdown too: every message that gave no event is in it
    for r in result.reports:
        assert r.events == r.applied + r.duplicates + r.stale + r.conflicts + r.dead_lettered
        assert sum(r.operations.values()) == r.events, (r.operations, r.events)
    undecoded = sum(r.operations.get(UNDECODED, 0) for r in result.reports)
    engine = expected["KEY_UNKNOWN"] + expected["TYPE_CONFLICT"]  # events, with operations
    assert undecoded == sum(expected.values()) - engine
    assert f"{UNDECODED}=" in format_report(result.reports[0])
    compare_replicas(spark, w, "poison").assert_equal()
    # a rerun reads nothing again and changes nothing
    assert Pipeline(cfg, spark).run().dead_lettered == 0
    # other producers' messages are kept whole, with where they came from
    other = spark.sql(
        "SELECT origin, raw FROM cdc.poison__cdcflow.dead_letters "
        "WHERE error_code = 'OTHER_DIALECT'"
    ).collect()
    assert sorted(bytes(r["raw"]) for r in other) == sorted(OTHER_DIALECTS)
    assert all(r["origin"].endswith("/poison/other-dialects.jsonl") for r in other)
