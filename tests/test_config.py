"""Configuration validation names the bad key and the allowed values."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import load_config, load_config_file
from cdcflow.config_base import parse_duration
from cdcflow.errors import ConfigError

BASE = {"sources": [{"name": "s", "path": "/tmp/x", "dialect": "savegress"}]}


def test_defaults() -> None:
    cfg = load_config(BASE)
    assert cfg.table("anything").mode == "merge"
    assert cfg.retention_seconds == 7 * 86400
    assert cfg.catalog.type == "jdbc"


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError) as e:
        load_config({**BASE, "tabels": {}})
    assert e.value.code == "CONFIG_INVALID"
    assert "tabels: unknown key" in e.value.message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {**BASE, "namepsace": "shop"},
            "namepsace: unknown key. Did you mean 'namespace'? Allowed keys: catalog, checkpoint, "
            "consistency, follow_interval, maintenance, metrics, namespace, outputs, "
            "parallel_tables, pipeline, segment_wait, sources, spark, tables, tombstone_retention",
        ),
        (
            {"sources": [{"name": "s", "path": "/x", "dialekt": "debezium"}]},
            "sources.0.dialekt: unknown key. Did you mean 'dialect'? Allowed keys: archive, "
            "create_path, dialect, kafka, keys, max_files_per_batch, name, options, path, "
            "renamed_from, replica_name, types",
        ),
        (
            {**BASE, "tables": {"orders": {"delete": "soft"}}},
            "tables.orders.delete: unknown key. Did you mean 'deletes'? Allowed keys: "
            "apply_as_deletes, apply_as_truncates, columns, deletes, except_columns, "
            "ignore_null_updates, keys, maintenance, mode, name, sequence_by, table_properties, "
            "track_history_columns, track_history_except_columns",
        ),
        (
            {"sources": [{"name": "s", "kafka": {"bootstrap_servers": "b:9092", "topic": ["t"]}}]},
            "sources.0.kafka.topic: unknown key. Did you mean 'topics'? Allowed keys: "
            "bootstrap_servers, fail_on_data_loss, max_offsets_per_trigger, options, pattern, "
            "secrets, starting_offsets, topics",
        ),
        (
            {**BASE, "tables": {"t": {"maintenance": {"often": 1}}}},
            "tables.t.maintenance.often: unknown key. Allowed keys: enabled, every_batches, "
            "keep_snapshots, orphan_age, orphan_interval, rewrite_data_files, "
            "rewrite_delete_files, snapshot_retention",
        ),
    ],
    ids=["top", "source", "table", "kafka", "no-close-match"],
)
def test_unknown_key_gets_the_closest_and_the_allowed_keys(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(data)
    assert e.value.message == f"invalid configuration: {message}"


def test_bad_literal_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as e:
        load_config({**BASE, "tables": {"t": {"mode": "upsert"}}})
    assert "tables.t.mode" in e.value.message
    assert "'merge'" in e.value.message and "'append'" in e.value.message
    assert "'upsert'" in e.value.message


def test_unknown_dialect_suggests_closest() -> None:
    with pytest.raises(ConfigError) as e:
        load_config({"sources": [{"name": "s", "path": "/x", "dialect": "savegres"}]})
    assert "Did you mean 'savegress'" in e.value.message


def _source(dialect: str, types: dict[str, str]) -> dict[str, Any]:
    return {"sources": [{"name": "s", "path": "/x", "dialect": dialect, "types": {"t": types}}]}


@pytest.mark.parametrize(
    ("dialect", "declared", "found"),
    [
        ("debezium", "numeric(10,2", "unbalanced brackets in type 'numeric(10,2'"),
        ("cockroachdb", "DECIMAL(10,2", "unbalanced brackets in type 'DECIMAL(10,2'"),
        ("auto", "numerik", "no type any dialect reads: unknown postgres type 'numerik'"),
        ("savegress", "io.debezium.time.MicroTimestamp", "no type savegress reads"),
        ("debezium", "org.apache.kafka.connect.data.Decimal", "without its precision and scale"),
        ("sqlserver_ces", "timestamptz", "unknown sqlserver type 'timestamptz'"),
    ],
)
def test_declared_types_are_read_before_any_message(
    dialect: str, declared: str, found: str
) -> None:
    """A declared type the source's dialect cannot read is a configuration error naming the
    column, and what to declare — not a dead letter of every event at run time."""
    with pytest.raises(ConfigError) as e:
        load_config(_source(dialect, {"c": declared}))
    assert e.value.message.startswith("invalid configuration: sources.0.types: t.c: ")
    assert found in e.value.message and "declare" in e.value.message, e.value.message


def test_declared_types_a_dialect_reads_pass() -> None:
    declared = {
        "a": "io.debezium.time.MicroTimestamp",
        "b": "org.apache.kafka.connect.data.Decimal(10,2)",
        "c": "timestamp_micros",
        "d": "numeric(10,2)",
        "e": "timestamp_ntz",
    }
    load_config(_source("debezium", declared))
    load_config(_source("auto", declared))
    load_config(_source("cockroachdb", {"p": "DECIMAL(10,2)", "at": "TIMESTAMPTZ"}))


def test_an_endpoints_declared_types_are_read_by_its_dialect(tmp_path: Path) -> None:
    from cdcflow.serve.config import load_serve_config

    endpoint = {"path": "/d", "dialect": "debezium", "types": {"t": {"c": "numeric(10,2"}}}
    with pytest.raises(ConfigError) as e:
        load_serve_config({"landing": str(tmp_path), "endpoints": [endpoint]})
    assert "endpoints.0.types: t.c: no type debezium reads: unbalanced" in e.value.message


def test_durations() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("2h") == 7200
    with pytest.raises(ConfigError, match="tombstone_retention"):
        load_config({**BASE, "tombstone_retention": "a week"})


def test_file_paths_resolve_relative_to_the_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("pipeline: p\nsources:\n  - {name: s, path: landing}\n")
    cfg = load_config_file(f)
    assert cfg.sources[0].path == str(tmp_path / "landing")
    assert cfg.catalog.warehouse == str(tmp_path / "warehouse")


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config_file(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_file(bad)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"track_history_columns": ["a"]}, "need mode scd2"),
        (
            {"mode": "scd2", "track_history_columns": ["a"], "track_history_except_columns": ["b"]},
            "not both",
        ),
        ({"mode": "scd2", "deletes": "soft"}, "deletes: soft is for merge tables"),
        ({"mode": "history"}, "'merge', 'append' or 'scd2'"),
        ({"keys": "none", "mode": "scd2"}, "keys: none is for mode merge"),
        ({"keys": "none", "mode": "append"}, "keys: none is for mode merge"),
        ({"keys": "none", "deletes": "soft"}, "deletes: soft needs keys"),
        ({"keys": "none", "sequence_by": "v"}, "sequence_by has nothing to order"),
        ({"keys": "nothing"}, "Input should be 'none'"),
    ],
)
def test_history_settings_are_checked(table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config({"sources": [{"name": "s", "path": "x"}], "tables": {"t": table}})


def test_a_table_without_a_key_needs_a_producer_of_before_images() -> None:
    """``keys: none`` over sources whose every dialect sends no before images (Datastream's
    updates carry the new row only) is refused before Spark, naming the table and the
    dialect; one source that sends them (or detection) is enough to take it."""

    def pipeline(*dialects: str) -> dict[str, object]:
        sources = [{"name": f"s{i}", "path": "x", "dialect": d} for i, d in enumerate(dialects)]
        return {"sources": sources, "tables": {"readings": {"keys": "none"}}}

    with pytest.raises(ConfigError) as caught:
        load_config(pipeline("datastream"), "pipeline.yaml")
    assert caught.value.code == "CONFIG_INVALID"
    assert caught.value.message == (
        "invalid configuration pipeline.yaml: (top level): tables.readings.keys: none keeps a "
        "table without a "
        "key as the multiset of its rows, where an update or a delete removes the row equal to "
        "its before image; dialect datastream sends no before images: keep the table as a "
        "changelog (mode: append) or give it keys"
    )
    for ok in (("debezium",), ("datastream", "debezium"), ("auto",)):
        assert load_config(pipeline(*ok)).table("readings").keys == "none"


def test_an_archive_holds_no_landing_zone_and_sits_in_none() -> None:
    def source(**extra: str) -> dict[str, object]:
        return {"sources": [{"name": "s", "dialect": "savegress", **extra}]}

    for path, archive in (("/land", "/land/done"), ("/land/in", "/land"), ("/land", "/land/")):
        with pytest.raises(ConfigError, match="must not hold one another"):
            load_config(source(path=path, archive=archive))
    with pytest.raises(ConfigError, match="give path"):
        load_config(source(archive="/done"))
    assert load_config(source(path="/land", archive="/landed")).sources[0].archive == "/landed"


def test_a_relative_archive_is_the_configuration_files(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "sources: [{name: s, dialect: savegress, path: in, archive: done}]\n"
    )
    src = load_config_file(tmp_path / "p.yaml").sources[0]
    assert src.archive == str((tmp_path / "done").resolve())


# ---------------------------------------------------------------- secrets: one spelling

VALUE = "s3cr3t-value-never-shown"


def _receiver(tmp_path: Path, bearer: Any, signature: Any) -> Any:
    from cdcflow.serve.config import load_serve_config

    endpoint = {"path": "/e", "dialect": "savegress", "auth": {"bearer": bearer}}
    endpoint["auth"]["signature"] = signature
    grpc = {"endpoints": [{"name": "g", "auth": {"bearer": bearer}}]}
    return load_serve_config(
        {"landing": str(tmp_path), "endpoints": [endpoint], "grpc": grpc}, "(t)", tmp_path
    )


def _webhook(secret: dict[str, Any]) -> Any:
    return load_config(
        {**BASE, "outputs": [{"type": "webhook", "name": "hook", "url": "http://h/x", **secret}]}
    )


def test_a_secret_is_spelt_one_way_and_the_old_receiver_spelling_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every secret, the pipeline's and the receiver's, is a key holding ``{env: NAME}`` or
    ``{file: PATH}``; the receiver's and the webhook output's earlier ``token_env``/
    ``token_file``/``secret_env``/``secret_file`` read the same secrets, each with a warning
    naming the new spelling. The value is in no log, error or ``repr``."""
    from cdcflow.outputs.stream import load_secret

    monkeypatch.setenv("CDCFLOW_T_TOKEN", VALUE)
    (tmp_path / "sig").write_text(VALUE + "\n")
    caplog.set_level(logging.DEBUG, logger="cdcflow")
    new = _receiver(tmp_path, {"token": {"env": "CDCFLOW_T_TOKEN"}}, {"secret": {"file": "sig"}})
    hook = _webhook({"secret": {"env": "CDCFLOW_T_TOKEN"}})
    assert not caplog.records  # the one spelling: nothing to say
    old = _receiver(tmp_path, {"token_env": "CDCFLOW_T_TOKEN"}, {"secret_file": "sig"})
    old_hook = _webhook({"secret_env": "CDCFLOW_T_TOKEN"})
    assert old.config == new.config and old_hook == hook
    for found in (new, old):
        ep = found.endpoints["/e"]
        assert ep.bearer_token.reveal() == ep.signing_secret.reveal() == VALUE.encode()
        assert found.grpc_endpoints["g"].bearer_token.reveal() == VALUE.encode()
    said = "is deprecated, write"
    assert sorted(r.getMessage() for r in caplog.records) == sorted(
        [
            f"auth.signature: 'secret_file: sig' {said} 'secret: {{file: sig}}' (a secret is "
            "spelt so everywhere)",
            f"auth.bearer: 'token_env: CDCFLOW_T_TOKEN' {said} 'token: {{env: CDCFLOW_T_TOKEN}}' "
            "(a secret is spelt so everywhere)",
            f"auth.bearer: 'token_env: CDCFLOW_T_TOKEN' {said} 'token: {{env: CDCFLOW_T_TOKEN}}' "
            "(a secret is spelt so everywhere)",
            f"output 'hook': 'secret_env: CDCFLOW_T_TOKEN' {said} 'secret: {{env: "
            "CDCFLOW_T_TOKEN}' (a secret is spelt so everywhere)",
        ]
    )
    assert all(r.levelname == "WARNING" for r in caplog.records)
    # both spellings at once, or a value where a name belongs: errors that never echo it
    errors = []
    for bearer in (
        {"token": {"env": "CDCFLOW_T_TOKEN"}, "token_env": "CDCFLOW_T_TOKEN"},
        {"token": VALUE},
        {"token": {"env": "CDCFLOW_T_TOKEN", "file": "sig"}},
    ):
        with pytest.raises(ConfigError) as e:
            _receiver(tmp_path, bearer, {"secret": {"file": "sig"}})
        errors.append(e.value.message)
    assert "endpoints.0.auth.bearer: give token alone: token_env/token_file are its " in errors[0]
    assert "endpoints.0.auth.bearer.token: Input should be a valid dictionary" in errors[1]
    assert "endpoints.0.auth.bearer.token: give exactly one of env or file" in errors[2]
    with pytest.raises(ConfigError) as e:
        _receiver(tmp_path, {"token": {"env": "CDCFLOW_T_UNSET"}}, {"secret": {"file": "nope"}})
    errors.append(e.value.message)
    assert "endpoints.0.auth.signature.secret: cannot read secret file" in errors[-1]
    secret = load_secret(hook.outputs[0])
    assert secret is not None and secret.get_secret_value() == VALUE
    shown = [caplog.text, *errors, repr(new), repr(old), repr(hook), str(hook), repr(secret)]
    shown += [repr(new.endpoints), repr(new.grpc_endpoints), str(new.endpoints["/e"].bearer_token)]
    assert not [s for s in shown if VALUE in s]
