"""Settings for the short-lived ``cdcflow`` processes that tests start (crashes, signals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: A driver JVM tuned for a short life: the quick (C1) compiler only and a serial collector
#: start a pipeline process about a third faster; long-running pipelines should not copy it.
#: The C1-only JVM reserves 48 MB for compiled code by default, which a pipeline process of a
#: few batches can fill (the JVM then stops compiling and crawls): it gets the usual 240 MB.
SHORT_RUN_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
    ),
}


def pipeline_config(
    root: Path,
    warehouse: str,
    options: Any,
    namespace: str = "crash",
    dialect: str = "savegress",
    files_per_batch: int | None = 1,
    kafka: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """``root/pipeline.yaml`` for one source over ``root/landing`` (or the Kafka topics of
    ``kafka``, the source's ``kafka:`` section) with the decoder options a renderer gave (keys,
    types, options), on the test session's warehouse."""
    source: dict[str, Any] = {
        "name": "s",
        **({"kafka": kafka} if kafka else {"path": str(root / "landing")}),
        "dialect": dialect,
        "keys": {t: list(k) for t, k in options.table_keys.items()},
        "types": {t: dict(c) for t, c in options.column_types.items()},
        "options": dict(options.extra),
    }
    if files_per_batch is not None and not kafka:
        source["max_files_per_batch"] = files_per_batch
    cfg = {
        "pipeline": namespace,
        "checkpoint": str(root / "checkpoint"),
        "namespace": namespace,
        "catalog": {"name": "cdc", "warehouse": warehouse},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": SHORT_RUN_CONF},
        "sources": [source],
        **extra,
    }
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
