"""A pipeline's status read from its catalog and checkpoint, without a running pipeline: the
batch history, the replicas' current snapshots, the dead letters and the resolved watermarks,
and the files of each landing zone its query has not read yet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcflow.observe.status import (
    WINDOW_SECONDS,
    BatchPoint,
    SourceStatus,
    Status,
    TableStatus,
    unix,
)

if TYPE_CHECKING:
    from cdcflow.config import PipelineConfig
    from cdcflow.observe.tables import Results


def status_of(cfg: PipelineConfig, results: Results, now: float) -> Status:
    """A pipeline's status read from its catalog and checkpoint (no running pipeline)."""
    from cdcflow.pipeline.checkpoint import Checkpoint, local_folder

    names = results.replica_names()
    files = results.files(names)
    seen = results.table_batches()
    dead = results.open_dead_letters()
    marks = results.watermarks() or []
    records = Checkpoint(cfg).records() if local_folder(cfg.checkpoint) is not None else {}
    ids = {r.id: name for name, r in records.items()}
    sources = []
    for src in cfg.sources:
        record = records.get(src.name)
        mine = [b for b in seen.batches if ids.get(b.source, b.source) == src.name]
        resolved = [w.resolved_to for w in marks if ids.get(w.source, w.source) == src.name]
        points = [p for p in (unix(r) for r in resolved) if p is not None]
        reader = src.source()
        waiting = None
        if record is not None:
            waiting = reader.files_waiting(f"{cfg.checkpoint}/sources/{record.id}/query")
        sources.append(
            SourceStatus(
                source=src.name,
                reads=reader.describe(),
                last_batch=max((b.at for b in mine), default=None),
                batches=len(mine),
                events=sum(b.events for b in mine),
                files_waiting=waiting,
                resolved_lag=now - min(points) if points else None,
            )
        )
    tables = []
    for name in names:
        f = files.get(name)
        wrote = seen.tables.get(name)
        tables.append(
            TableStatus(
                table=name,
                source=ids.get(wrote.source, wrote.source) if wrote else "",
                rows=f.rows if f else None,
                source_time=wrote.source_time if wrote else None,
                last_batch=wrote.last_batch if wrote else None,
                dead_letters=dead.get(name, 0),
                data_files=f.data_files if f else None,
                delete_files=f.delete_files if f else None,
                snapshots=f.snapshots if f else None,
                bytes=f.bytes if f else None,
            )
        )
    recent = tuple(
        BatchPoint(ids.get(b.source, b.source), b.batch_id, b.at, b.seconds, b.events)
        for b in sorted(seen.batches, key=lambda b: b.at)
        if b.at >= now - WINDOW_SECONDS
    )
    return Status(
        pipeline=cfg.pipeline,
        namespace=cfg.namespace,
        at=now,
        sources=tuple(sources),
        tables=tuple(tables),
        recent=recent,
        dead_letters=sum(dead.values()),
    )
