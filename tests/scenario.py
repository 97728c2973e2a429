"""Helpers for engine scenarios: savegress messages written into landing zones, pipelines
run against the session-scoped SparkSession."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson

from cdcflow.config import PipelineConfig, load_config
from cdcflow.pipeline.query import Pipeline
from cdcflow.simulation.landing import land as landed

_files = itertools.count()


def ev(
    op: str,
    table: str,
    seq: int,
    *,
    after: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A unified-format event at commit position ``seq`` (an LSN)."""
    doc: dict[str, Any] = {
        "operation": op,
        "table": table,
        "source": "postgres",
        "position": {"lsn": f"0/{seq:X}", "sequence": 0},
    }
    if after is not None:
        doc["after"] = after
    if before is not None:
        doc["before"] = before
    doc.update(extra)
    return doc


def land(landing: Path, messages: list[dict[str, Any]] | bytes) -> Path:
    """Land one file of messages (see :mod:`cdcflow.simulation.landing`)."""
    n = next(_files)
    data = (
        messages
        if isinstance(messages, bytes)
        else b"\n".join(orjson.dumps(m) for m in messages) + b"\n"
    )
    return landed(landing / f"{n:06d}.jsonl", data)


def config(root: Path, name: str, **overrides: Any) -> PipelineConfig:
    """A pipeline over ``root/landing`` writing namespace ``name``."""
    doc: dict[str, Any] = {
        "pipeline": name,
        "checkpoint": str(root / "checkpoint"),
        "namespace": name,
        "catalog": {"name": overrides.pop("catalog", "cdc"), "warehouse": str(root / "warehouse")},
        "sources": [
            {
                "name": "src",
                "path": str(root / "landing"),
                "dialect": "savegress",
                "keys": overrides.pop("keys", {}),
            }
        ],
        "tables": overrides.pop("tables", {}),
    }
    doc.update(overrides)
    return load_config(doc)


def run(spark: Any, cfg: PipelineConfig) -> list[Any]:
    """Run the pipeline until the landing zone is drained."""
    return Pipeline(cfg, spark).run().reports


def rows(
    spark: Any, cfg: PipelineConfig, table: str, cols: str = "*", where: str = ""
) -> list[dict[str, Any]]:
    """Rows of a replica as dicts, sorted."""
    sql = f"SELECT {cols} FROM {cfg.catalog.name}.{cfg.namespace}.{table}"
    if where:
        sql += f" WHERE {where}"
    out = [r.asDict(recursive=True) for r in spark.sql(sql).collect()]
    return sorted(out, key=repr)
