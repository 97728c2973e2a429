"""Split messages: completeness rules, reassembly in `cdcflow inspect`, and in the pipeline
across files, batches and runs (pending segments kept, duplicates tolerated, incomplete
messages dead-lettered after the wait)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdcflow.decode.decoder import Decoder
from cdcflow.decode.segments import Piece, assess
from cdcflow.dialects.model import Segment
from cdcflow.dialects.sqlserver_ces.render import avro_cloudevents, split_event
from tests.test_sqlserver_ces import _event

# ---------------------------------------------------------------- completeness rules


def _pieces(*spec: tuple[int, bool | None, int | None]) -> list[Piece]:
    return [Piece(i, final, total, b"x", first_seen=100.0) for i, final, total in spec]


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        ([(0, False, None), (1, True, None)], "complete"),
        ([(1, True, None), (0, False, None)], "complete"),  # any arrival order
        ([(1, False, None), (2, True, None)], "complete"),  # one-based
        ([(0, False, None), (2, True, None)], "pending"),  # 1 missing
        ([(0, False, None), (1, False, None)], "pending"),  # final not seen
        ([(0, None, 3), (1, None, 3), (2, None, 3)], "complete"),  # preview numbering
        ([(1, None, 2), (2, None, 2)], "complete"),  # preview, one-based
        ([(0, None, 3), (2, None, 3)], "pending"),
        ([(0, False, None), (0, False, None), (1, True, None)], "complete"),  # duplicate
    ],
)
def test_assess_status(spec: list[tuple[int, bool | None, int | None]], status: str) -> None:
    assert assess("g", _pieces(*spec)).status == status


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ([(0, False, None), (1, True, None), (2, False, None)], "SEGMENT_OUT_OF_RANGE"),
        ([(0, None, 2), (3, None, 2)], "SEGMENT_OUT_OF_RANGE"),
        ([(0, None, 2), (2, None, 2)], "SEGMENT_OUT_OF_RANGE"),
        ([(0, None, 2), (1, None, 3)], "SEGMENT_CONFLICT"),
        ([(0, True, None), (1, True, None)], "SEGMENT_CONFLICT"),
    ],
)
def test_assess_invalid(spec: list[tuple[int, bool | None, int | None]], code: str) -> None:
    v = assess("g", _pieces(*spec))
    assert (v.status, v.code) == ("invalid", code)


def test_segments_from_one_without_zero_are_whole_only_if_they_read() -> None:
    pieces = _pieces((1, False, None), (2, True, None))
    assert assess("g", pieces, check=lambda ps: True).status == "complete"
    # zero-based, segment 0 still to come: pending, then expired naming segment 0
    assert assess("g", pieces, check=lambda ps: False).status == "pending"
    v = assess("g", pieces, now=500.0, wait=60, check=lambda ps: False)
    assert "segment(s) 0 missing" in (v.reason or "")


def test_pipeline_check_rejects_a_tail_without_its_head() -> None:
    segs = split_event(_whole(), 3)
    outs = list(
        Decoder("sqlserver_ces").decode_file(b"\n".join(orjson.dumps(s) for s in segs), "s.jsonl")
    )
    got = [Piece(s.index, s.final, s.total, s.raw) for o in outs for s in o.segments]
    decoder = Decoder("sqlserver_ces")
    assert not decoder.reassembles("sqlserver_ces", got[1:])
    assert decoder.reassembles("sqlserver_ces", got)


def test_assess_expires_after_the_wait_and_names_what_is_missing() -> None:
    pieces = _pieces((0, False, None), (3, True, None))
    assert assess("g", pieces, now=150.0, wait=60).status == "pending"
    v = assess("g", pieces, now=161.0, wait=60)
    assert (v.status, v.code) == ("expired", "SEGMENT_MISSING")
    assert "segment(s) 1, 2 missing" in (v.reason or "")
    v = assess("g", _pieces((0, False, None)), now=500.0, wait=60)
    assert "final segment never arrived" in (v.reason or "")


# ---------------------------------------------------------------- decoding and inspect


def _ev(n: int, key: int, v: str) -> dict[str, Any]:
    """A CES update of row ``key`` of table ``t`` committed at LSN ``n`` (its own logicalid)."""
    base = _event(f"00000010:{n:08X}:0001", 1, "00000010:00000001:0001", id=str(key), v=v)
    inner = orjson.loads(base["data"])
    inner["eventsource"]["pkkey"][0]["value"] = str(key)
    return {
        **base,
        "id": f"e{n}",
        "logicalid": f"g:{n:020X}:{1:020d}",
        "data": orjson.dumps(inner).decode(),
    }


def _whole() -> dict[str, Any]:
    return _ev(0x200, 1, "7.25")


def _inspect(cwd: Path, *paths: str) -> tuple[int, list[bytes], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cdcflow", "inspect", *paths],
        cwd=cwd,
        capture_output=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.decode()


def test_decoder_returns_segments_and_reassembly_gives_the_whole_event() -> None:
    whole = _whole()
    [expected] = Decoder("sqlserver_ces").decode_file(orjson.dumps(whole), "w.json")
    segs = split_event(whole, 3)
    outs = list(Decoder("auto").decode_file(b"\n".join(orjson.dumps(s) for s in segs), "s.jsonl"))
    got = [seg for o in outs for seg in o.segments]
    assert [(s.group, s.index, s.final) for s in got] == [
        (whole["logicalid"], 0, False),
        (whole["logicalid"], 1, False),
        (whole["logicalid"], 2, True),
    ]
    assert all(isinstance(s, Segment) and not o.events for o in outs for s in o.segments)
    out = Decoder("auto").decode_segments("sqlserver_ces", [s.raw for s in got], "s.jsonl")
    [event] = out.events
    assert event["metadata"].pop("segments") == 3
    for k in ("segmentindex", "finalsegment"):
        expected.events[0]["metadata"].pop(k)
    assert event == expected.events[0]


def test_avro_segments_cut_inside_a_character_are_joined_as_bytes() -> None:
    whole = {**_ev(0x200, 1, "1"), "datacontenttype": "application/json"}
    data = whole["data"].replace('"cols"', '"note":"žluťoučký","cols"').encode()
    cut = data.index("ž".encode()) + 1  # inside the two-byte 'ž'
    segs = [
        {**whole, "data": data[:cut], "segmentindex": 0, "finalsegment": False},
        {**whole, "data": data[cut:], "segmentindex": 1, "finalsegment": True},
    ]
    import fastavro

    from cdcflow.dialects.sqlserver_ces.render import CLOUDEVENT_AVRO_SCHEMA

    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(CLOUDEVENT_AVRO_SCHEMA), segs)
    outs = list(Decoder("sqlserver_ces").decode_file(buf.getvalue(), "x.avro"))
    raws = [s.raw for o in outs for s in o.segments]
    assert len(raws) == 2 and b"data_base64" in raws[0]
    out = Decoder("sqlserver_ces").decode_segments("sqlserver_ces", raws, "x.avro")
    assert not out.rejections and out.events[0]["after"]["id"] == 1
    # the renderer's Avro files carry segments too
    avro = avro_cloudevents(split_event(_whole(), 2))
    assert sum(len(o.segments) for o in Decoder("auto").decode_file(avro, "y.avro")) == 2


@pytest.mark.services
def test_inspect_reassembles_across_files_and_reports_incomplete(tmp_path: Path) -> None:
    whole = _whole()
    a, b, c = split_event(whole, 3, one_based=True)
    (tmp_path / "1.jsonl").write_bytes(orjson.dumps(c) + b"\n" + orjson.dumps(a) + b"\n")
    (tmp_path / "2.jsonl").write_bytes(orjson.dumps(b) + b"\n" + orjson.dumps(a) + b"\n")
    lonely = {**split_event(_ev(0x300, 2, "1"), 2)[0], "logicalid": "L"}
    (tmp_path / "3.jsonl").write_bytes(orjson.dumps(lonely) + b"\n")
    rc, out, err = _inspect(tmp_path, "1.jsonl", "2.jsonl")
    assert rc == 0, err
    [line] = out
    assert orjson.loads(line)["after"]["v"] == 7.25
    rc, out, err = _inspect(tmp_path, ".")
    assert rc == 1
    assert "[SEGMENT_MISSING] split message 'L' is incomplete" in err
    assert len(out) == 1


# ---------------------------------------------------------------- in the pipeline


def _ces_config(tmp_path: Path, name: str, **extra: Any) -> Any:
    from tests.scenario import config

    cfg = config(tmp_path, name, **extra)
    src = cfg.sources[0].model_copy(update={"dialect": "sqlserver_ces", "max_files_per_batch": 1})
    return cfg.model_copy(update={"sources": [src]})


def _dead(spark: Any, cfg: Any) -> list[tuple[str, str]]:
    ident = f"cdc.{cfg.namespace}__cdcflow.dead_letters"
    if not spark.catalog.tableExists(ident):
        return []
    return sorted(
        (r["error_code"], r["origin"].rsplit("/", 1)[-1])
        for r in spark.sql(f"SELECT error_code, origin FROM {ident}").collect()
    )


@pytest.mark.spark
def test_segments_across_files_batches_and_runs(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import land, rows, run

    landing = tmp_path / "landing"
    cfg = _ces_config(tmp_path, "seg_runs")
    first, second = _ev(0x200, 1, "1.5"), _ev(0x300, 1, "2.5")
    s0, s1, s2 = split_event(second, 3)
    # run 1: two files (two batches) with segments 2 and 0 of the update
    land(landing, [first, s2])
    land(landing, [s0, s0])
    run(spark, cfg)
    assert rows(spark, cfg, "t", "id, v") == [{"id": 1, "v": pytest.approx(1.5)}]
    # run 2: the missing segment, and a redelivered one
    land(landing, [s1, s2])
    reports = run(spark, cfg)
    assert sum(r.reassembled for r in reports) == 1
    assert [(r["id"], str(r["v"])) for r in rows(spark, cfg, "t", "id, v")] == [(1, "2.5000")]
    # run 3: the whole split message again: dropped as duplicates, nothing dead-lettered
    land(landing, [s0, s1, s2])
    run(spark, cfg)
    assert [(r["id"], str(r["v"])) for r in rows(spark, cfg, "t", "id, v")] == [(1, "2.5000")]
    assert _dead(spark, cfg) == []
    pending = spark.sql(
        f"SELECT count(*) AS n FROM cdc.{cfg.namespace}__cdcflow.segments "
        "WHERE resolved_batch IS NULL"
    ).collect()[0]["n"]
    assert pending == 0


@pytest.mark.spark
def test_incomplete_message_is_dead_lettered_after_the_wait(spark: Any, tmp_path: Path) -> None:
    from tests.scenario import land, rows, run

    landing = tmp_path / "landing"
    cfg = _ces_config(tmp_path, "seg_wait", segment_wait="2s")
    a, b, c = split_event(_ev(0x300, 2, "9"), 3)
    bad = split_event(_ev(0x400, 3, "9"), 3)
    bad[1]["finalsegment"], bad[2]["finalsegment"] = True, False  # a segment after the final
    land(landing, [_ev(0x200, 1, "1.5"), a, c, *bad])
    reports = run(spark, cfg)
    assert [code for code, _ in _dead(spark, cfg)] == ["SEGMENT_OUT_OF_RANGE"] * 3
    # the reports count them by code, as the batch's own counts say (no job of their own)
    assert [r.dead_letter_codes for r in reports] == [{"SEGMENT_OUT_OF_RANGE": 3}]
    time.sleep(2.5)
    land(landing, [_ev(0x500, 4, "4")])
    reports = run(spark, cfg)
    codes = [code for code, _ in _dead(spark, cfg)]
    assert codes.count("SEGMENT_MISSING") == 2  # both segments of the incomplete message
    assert codes.count("SEGMENT_OUT_OF_RANGE") == 3
    assert [r.dead_letter_codes for r in reports] == [{"SEGMENT_MISSING": 2}]
    # the missing segment arrives too late: dead-lettered, the replica keeps what it had
    land(landing, [b])
    reports = run(spark, cfg)
    assert [code for code, _ in _dead(spark, cfg)].count("SEGMENT_LATE") == 1
    assert [r.dead_letter_codes for r in reports] == [{"SEGMENT_LATE": 1}]
    assert sorted(r["id"] for r in rows(spark, cfg, "t", "id")) == [1, 4]
