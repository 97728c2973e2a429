"""Source kinds behind one interface: the configuration picks the kind in one place, each kind
checks itself before Spark starts, a Kafka source reads its secrets once per start, and the
pipeline and the observers never ask which kind a source is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdcflow.config import load_config
from cdcflow.errors import CdcflowError
from cdcflow.pipeline.session import spark_settings
from cdcflow.sources.base import SourceMissing
from cdcflow.sources.given import GivenSource
from cdcflow.sources.kafka import KafkaSource
from cdcflow.sources.landing import LandingSource

SRC = Path(__file__).resolve().parents[1] / "src" / "cdcflow"


def _sources(tmp_path: Path) -> list[dict[str, object]]:
    secret = tmp_path / "jaas"
    secret.write_text("org.apache.kafka.common.security.plain.PlainLoginModule required;")
    return [
        {"name": "files", "path": str(tmp_path / "landing"), "dialect": "savegress"},
        {
            "name": "topics",
            "dialect": "debezium",
            "kafka": {
                "bootstrap_servers": "broker:9092",
                "topics": ["pg.public.a", "pg.public.b"],
                "secrets": {"kafka.sasl.jaas.config": {"file": str(secret)}},
            },
        },
        {"name": "frame", "dialect": "debezium"},
    ]


def test_the_configuration_picks_each_kind_and_the_kind_says_what_it_reads(
    tmp_path: Path,
) -> None:
    cfg = load_config({"sources": _sources(tmp_path)})
    files, topics, frame = (s.source() for s in cfg.sources)
    assert isinstance(files, LandingSource) and isinstance(topics, KafkaSource)
    assert isinstance(frame, GivenSource)
    assert files.describe() == f"landing zone {tmp_path / 'landing'}"
    assert files.location == str(tmp_path / "landing") == cfg.sources[0].location
    assert topics.describe() == "kafka pg.public.a, pg.public.b"
    assert topics.location == "kafka://broker:9092/pg.public.a,pg.public.b"
    assert frame.describe() == "a DataFrame" and frame.location == ""
    assert topics.options.table_keys == {} and files.dialect == "savegress"
    # what the session loads follows the kinds: a DataFrame may come from Spark's Kafka source
    one = lambda i: load_config({"sources": [_sources(tmp_path)[i]]})  # noqa: E731
    assert [spark_settings(one(i)).kafka for i in range(3)] == ["none", "required", "optional"]
    assert spark_settings(cfg).kafka == "required"


def test_each_kind_checks_itself_before_spark(tmp_path: Path) -> None:
    cfg = load_config({"sources": _sources(tmp_path)})
    files, _, frame = (s.source() for s in cfg.sources)
    with pytest.raises(SourceMissing) as e:
        files.check()
    assert e.value.code == "SOURCE_PATH_MISSING" and "does not exist" in e.value.message
    (tmp_path / "landing").write_text("")
    with pytest.raises(SourceMissing, match="is not a folder"):
        files.check()
    (tmp_path / "landing").unlink()
    made = {**_sources(tmp_path)[0], "create_path": True}
    load_config({"sources": [made]}).sources[0].source().check()
    assert (tmp_path / "landing").is_dir()
    files.check()
    remote = {**_sources(tmp_path)[0], "path": "s3a://bucket/landing"}
    load_config({"sources": [remote]}).sources[0].source().check()  # left to Spark
    with pytest.raises(SourceMissing, match="no DataFrame was given"):
        frame.check()
    with pytest.raises(SourceMissing):
        frame.read(None)  # type: ignore[arg-type]


def test_a_kafka_source_reads_its_secrets_once_per_start_and_never_shows_them(
    tmp_path: Path,
) -> None:
    cfg = load_config({"sources": _sources(tmp_path)})
    first = cfg.sources[1].source()
    assert isinstance(first, KafkaSource)
    jaas = "kafka.sasl.jaas.config"
    assert first.spark_options[jaas].endswith("PlainLoginModule required;")
    (tmp_path / "jaas").write_text("rotated")
    # the queries of one start go on with what they read; the next start reads it again
    assert first.spark_options[jaas].endswith("PlainLoginModule required;")
    assert cfg.sources[1].source().spark_options[jaas] == "rotated"
    assert "rotated" not in repr(first) and "PlainLoginModule" not in repr(first)
    assert repr(first) == "KafkaSource('topics': kafka pg.public.a, pg.public.b)"
    (tmp_path / "jaas").unlink()
    with pytest.raises(CdcflowError) as e:
        cfg.sources[1].source().spark_options  # noqa: B018
    assert "secret 'kafka.sasl.jaas.config'" in str(e.value) and "rotated" not in str(e.value)


def test_a_kafka_source_refuses_landing_zone_settings(tmp_path: Path) -> None:
    kafka = {**_sources(tmp_path)[1], "max_files_per_batch": 5, "create_path": True}
    with pytest.raises(CdcflowError, match="max_files_per_batch and create_path are for landing"):
        load_config({"sources": [kafka]})
    archive = {**_sources(tmp_path)[1], "archive": str(tmp_path / "done")}
    with pytest.raises(CdcflowError, match="archive is where a landing zone's processed files go"):
        load_config({"sources": [archive]})


@pytest.mark.parametrize("folder", ["pipeline", "observe"])
def test_the_pipeline_and_the_observers_never_ask_which_kind_a_source_is(folder: str) -> None:
    """What differs between kinds is behind ``Source``: no module of the pipeline or of the
    observers reads a kind's own settings off a source's configuration."""
    own = re.compile(r"\b(?:src|source|s)\.(kafka|path|archive|create_path|max_files_per_batch)\b")
    found = [
        f"{p.name}:{n}: {line.strip()}"
        for p in sorted((SRC / folder).glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if own.search(line)
    ]
    assert found == []


def test_a_pipeline_checks_each_source_once_until_it_closes(tmp_path: Path) -> None:
    """``cdcflow run`` checks before Spark starts, and the start checks what it was not asked
    to check yet: brokers are asked once, secrets read once per start."""
    from cdcflow.pipeline.query import Pipeline

    (tmp_path / "landing").mkdir()
    pipe = Pipeline(load_config({"sources": _sources(tmp_path)[:1]}))
    pipe.check_paths()
    reader = pipe._reader("files")
    (tmp_path / "landing").rmdir()
    pipe.check_paths()  # checked already: not asked again
    assert pipe._reader("files") is reader
    pipe.close()
    with pytest.raises(SourceMissing):
        pipe.check_paths()
    assert pipe._reader("files") is not reader
