"""The Python API without Spark: Kafka-shaped rows decoded in the workers' function, and
``apply_changes`` names mapped onto the configuration the YAML file validates into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

import cdcflow.api as cdc
from cdcflow.config import load_config
from cdcflow.decode.batches import decode_records
from cdcflow.decode.columns import SKIPPED
from cdcflow.dialects import dialect_names
from cdcflow.errors import ConfigError
from tests.kafka_shaped import KafkaRendering, kafka_batch, kafka_rendering, reference, same


def _decoded(r: KafkaRendering, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    out = decode_records(iter([kafka_batch(r.rows if rows is None else rows)]), r.name, r.options)
    found = []
    for row in pa.Table.from_batches(list(out)).to_pylist():
        for m in ("key", "before", "after", "metadata", "types"):
            if row[m] is not None:
                row[m] = dict(row[m])
        found.append(row)
    return found


@pytest.mark.parametrize("name", dialect_names())
def test_kafka_records_of_every_dialect_decode_to_the_events_of_the_files(
    name: str, tmp_path: Path
) -> None:
    """Each message of a rendering as a record of Spark's Kafka source: the same events as
    the files give, with the record's coordinates as their origin, offset and metadata."""
    r = kafka_rendering(name, tmp_path)
    expected, segments = reference(r)
    rows = _decoded(r)
    assert not [x for x in rows if x["error_code"]], [x for x in rows if x["error_code"]][:1]
    events = [x for x in rows if x["operation"] not in ("SEGMENT", SKIPPED)]
    assert sorted(map(same, events), key=repr) == expected
    assert sum(x["operation"] == "SEGMENT" for x in rows) == segments
    sent = {(x["topic"], x["partition"], x["offset"]): x for x in r.rows}
    # a message without a change (a Kafka tombstone: no value) is counted, not decoded
    skipped = [x for x in rows if x["operation"] == SKIPPED]
    tombstones = [f"kafka://{t}/{p}#{o}" for (t, p, o), x in sent.items() if not x["value"]]
    assert sorted(f"{x['origin']}#{x['offset']}" for x in skipped) == sorted(tombstones)
    for e in events:
        meta = e["metadata"]
        topic, partition = meta["kafka_topic"], int(meta["kafka_partition"])
        record = sent[(topic, partition, e["offset"])]
        assert e["origin"] == f"kafka://{topic}/{partition}"
        assert int(meta["kafka_offset"]) == e["offset"]
        stamp = record["timestamp"]
        assert int(meta["kafka_timestamp"]) == int(stamp.timestamp() * 1000)


@pytest.mark.parametrize(
    ("name", "header"), [("savegress", "savegress-table"), ("sqlserver_ces", "ce_type")]
)
def test_headers_reach_the_dialects_that_read_them(name: str, header: str, tmp_path: Path) -> None:
    """Records whose headers carry what the value does not (the unified format's table and
    operation, CloudEvents binary content mode) decode only with their headers."""
    r = kafka_rendering(name, tmp_path)
    with_headers = [x for x in r.rows if any(h["key"] == header for h in x["headers"] or ())]
    assert with_headers
    bare = [{**x, "headers": None} for x in with_headers]
    kept = _decoded(r, with_headers)
    lost = _decoded(r, bare)
    assert not [x for x in kept if x["error_code"]]
    if name == "sqlserver_ces":
        # binary content mode: the value is the CloudEvent's data alone
        assert all(x["error_code"] for x in lost)
    else:
        assert all("header_table" in x["metadata"] for x in kept)
        assert not any("header_table" in (x["metadata"] or {}) for x in lost)


def test_a_record_that_cannot_be_read_is_a_coded_rejection_at_its_coordinates(
    tmp_path: Path,
) -> None:
    r = kafka_rendering("debezium", tmp_path)
    confluent = b"\x00\x00\x00\x00\x07not avro"
    rows = [
        {**r.rows[0], "value": confluent, "offset": 41},
        {**r.rows[0], "value": None, "offset": 42},  # a tombstone: counted, not rejected
        {"value": r.rows[0]["value"]},  # a bare message: no coordinates
    ]
    out = _decoded(r, rows)
    rejected = [x for x in out if x["error_code"]]
    assert [(x["error_code"], x["offset"], x["origin"]) for x in rejected] == [
        ("UNKNOWN_SCHEMA_ID", 41, f"kafka://{r.rows[0]['topic']}/{r.rows[0]['partition']}")
    ]
    assert rejected[0]["raw"] == confluent
    assert [x["offset"] for x in out if x["operation"] == SKIPPED] == [42]
    bare = [x for x in out if not x["error_code"] and x["operation"] != SKIPPED]
    assert bare and all(x["origin"] is None and x["offset"] == 0 for x in bare)


# ---------------------------------------------------------------- settings


def test_apply_changes_names_map_onto_the_yaml_configuration() -> None:
    """Keyword arguments are one configuration: the one the equivalent YAML gives."""
    got = cdc.pipeline_config(
        pipeline="shop",
        checkpoint="/chk/shop",
        namespace="shop",
        source="orders",
        dialect="debezium",
        keys={"users": ["id"]},
        sequence_by="updated_at",
        apply_as_deletes="after['op'] = 'D'",
        except_column_list=["secret"],
        stored_as_scd_type=2,
        track_history_column_list=["status"],
        table_names={"users": "customers"},
        tables={"audit": {"mode": "append"}},
        consistency="transactions",
    )
    common = {
        "mode": "scd2",
        "sequence_by": "updated_at",
        "apply_as_deletes": "after['op'] = 'D'",
        "except_columns": ["secret"],
        "track_history_columns": ["status"],
    }
    text = yaml.safe_dump(
        {
            "pipeline": "shop",
            "checkpoint": "/chk/shop",
            "namespace": "shop",
            "sources": [{"name": "orders", "dialect": "debezium", "keys": {"users": ["id"]}}],
            "tables": {
                "default": common,
                "users": {**common, "keys": ["id"], "name": "customers"},
                "audit": {"mode": "append"},
            },
            "consistency": "transactions",
        }
    )
    assert got == load_config(yaml.safe_load(text))
    assert got.table("users").name == "customers" and got.table("orders").keys is None


def test_more_apply_changes_names_map_onto_the_yaml_configuration() -> None:
    got = cdc.pipeline_config(
        ignore_null_updates=True,
        apply_as_truncates="after['op'] = 'T'",
        column_list=["id", "name"],
        sequence_by=["epoch", "n"],
    )
    yaml_form = """
        sources: [{name: main}]
        tables:
          default:
            ignore_null_updates: true
            apply_as_truncates: "after['op'] = 'T'"
            columns: [id, name]
            sequence_by: [epoch, n]
    """
    assert got == load_config(yaml.safe_load(yaml_form))
    assert load_config(yaml.safe_load(yaml_form.replace("[epoch, n]", "epoch"))).table(
        "t"
    ).sequence_by == ("epoch",)
    with pytest.raises(ConfigError) as e:
        cdc.pipeline_config(column_list=["a"], except_column_list=["b"])
    assert str(e.value) == (
        "[CONFIG_INVALID] invalid configuration (Python API): tables.default: "
        "give columns or except_columns, not both"
    )


def test_defaults_are_the_yaml_defaults() -> None:
    cfg = cdc.pipeline_config(keys=["id"], sequence_by="sequence")
    assert cfg.table("anything") == load_config(
        {"sources": [{"name": "main"}], "tables": {"default": {"keys": ["id"]}}}
    ).table("anything")
    assert cfg.table("anything").sequence_by == () and cfg.table("anything").mode == "merge"
    assert cfg.sources[0].path is None and cfg.sources[0].name == "main"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"stored_as_scd_type": 3},
            "[CONFIG_INVALID] stored_as_scd_type must be 1 (current state) or 2 (history), got 3",
        ),
        (
            {"track_history_column_list": ["status"]},
            "[CONFIG_INVALID] invalid configuration (Python API): tables.default: "
            "track_history_columns/track_history_except_columns need mode scd2",
        ),
        (
            {"sequenceBy": "ts"},
            "[CONFIG_INVALID] invalid configuration (Python API): sequenceBy: unknown key. "
            "Did you mean 'sequence_by'? Allowed keys: apply_as_deletes, apply_as_truncates, "
            "catalog, checkpoint, column_list,",
        ),
        (
            {"apply_as_deletes": " "},
            "[CONFIG_INVALID] invalid configuration (Python API): tables.default.apply_as_deletes:"
            " must be a Spark SQL condition, e.g. after['op'] = 'D'",
        ),
        (
            {"dialect": "debezum"},
            "[CONFIG_INVALID] invalid configuration (Python API): sources.0.dialect:",
        ),
    ],
)
def test_bad_settings_are_named(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        cdc.pipeline_config(**settings)
    assert str(e.value).startswith(message)


def test_a_configuration_or_settings_not_both(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("pipeline: p\nsources: [{name: s, path: ./landing, dialect: savegress}]\n")
    with pytest.raises(ConfigError) as e:
        cdc.foreach_batch(path, keys=["id"])
    assert str(e.value) == (
        "[CONFIG_INVALID] give a configuration or settings, not both (settings: keys)"
    )
    assert cdc.table_config(keys=["id"], stored_as_scd_type="2").mode == "scd2"
