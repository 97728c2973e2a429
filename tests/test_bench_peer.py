"""The peer bench's pure parts: the Flink job's settings and SQL text, and the catch-up fill."""

from __future__ import annotations

from pathlib import Path

from bench import peer_flink, peer_stack, peer_systems


def _spec() -> dict[str, object]:
    flink = peer_systems.Flink(Path("/py"), Path("/r"), "127.0.0.1:9", Path("/r/wh"))
    return flink.spec("10s")


def test_flink_sql_reads_debezium_and_upserts_by_key() -> None:
    ddl, inserts = peer_flink.statements(_spec())
    assert ddl[0].startswith("CREATE CATALOG `cdc` WITH (")
    assert "'uri' = 'jdbc:sqlite:/r/wh/catalog.db'" in ddl[0]
    assert "'jdbc.schema-version' = 'V1'" in ddl[0]
    source = next(s for s in ddl if "`src_t3`" in s)
    assert "PRIMARY KEY (`id`) NOT ENFORCED" in source
    assert "'topic' = 'peer.public.t3'" in source
    assert "'format' = 'debezium-json'" in source
    assert "'debezium-json.schema-include' = 'true'" in source
    assert "`updated_at` TIMESTAMP_LTZ(6)" in source
    sink = next(s for s in ddl if "`peer_flink`.`t3`" in s)
    assert "'write.upsert.enabled' = 'true'" in sink and "'format-version' = '2'" in sink
    assert len(inserts) == len(peer_stack.TABLES) + 1
    assert inserts[3] == (
        "INSERT INTO `cdc`.`peer_flink`.`t3` SELECT `id`, `name`, `qty`, `score`, `flag`, "
        "`updated_at` FROM `src_t3`"
    )


def test_flink_settings_resume_from_retained_checkpoints() -> None:
    spec = _spec()
    conf = peer_flink.job_settings(spec)
    assert conf["parallelism.default"] == "2"
    assert conf["execution.checkpointing.interval"] == "10s"
    assert conf["table.exec.source.cdc-events-duplicate"] == "true"
    assert "execution.state-recovery.path" not in conf
    conf = peer_flink.job_settings({**spec, "restore": "/r/c/j/chk-7"})
    assert conf["execution.state-recovery.path"] == "file:///r/c/j/chk-7"


def test_fill_adds_up_to_the_changes_asked_for() -> None:
    made = list(peer_stack.fill_statements(100_000))
    assert sum(n for _, n in made) == 100_000
    assert sum(s.startswith("INSERT") for s, _ in made) == len(peer_stack.TABLES)
