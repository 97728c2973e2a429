"""Renderer: logical changes → CockroachDB changefeed messages, with the spec's delivery
behaviour.

Each table is watched by one changefeed (:data:`FEEDS`, chosen per table from the workload's
seed, so every run over one workload renders a table the same way):

* ``cloudstorage``: cloud-storage sink, ``wrapped`` envelope with ``diff``, ``key`` and
  ``updated``; files named as the sink names them
  (``<date>/<33-digit timestamp>-<uniquer>-<node>-<sink id>-<file id>-<topic>-<schema id>
  .ndjson``) and ``<timestamp>.RESOLVED`` files (some empty: read from the name);
* ``webhook``: webhook sink bodies ``{"payload": [...], "length": N}`` (some without
  ``length``) of ``wrapped`` messages with ``key``, ``topic`` and ``updated`` (no ``diff``:
  inserts and updates are ``UPSERT``), one body per line, resolved bodies between them;
* ``kafka``: Kafka records written as JSON lines (``topic``, ``partition``, ``offset``, ``key``
  = the key array as JSON text, ``value`` = the ``wrapped`` message with ``updated``), resolved
  messages on every partition;
* ``enriched``: ``envelope=enriched`` with ``enriched_properties=source`` and ``diff`` (``op``
  ``c``/``u``/``d``, ``source.primary_keys``/``ts_hlc``/``table_name``...), as JSON lines.

What each feed emits, its values and its delivery faults: :mod:`.feed`.
"""

from __future__ import annotations

import datetime as dt
import random
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from cdcflow.dialects.cockroachdb.feed import (
    EVENT_KINDS,
    FEATURES,
    Message,
    crdb_value,
    decode_options,
    event_operations,
    hlc,
    hlc_text,
    messages,
    redelivered,
    table_feed,
)
from cdcflow.dialects.model import DialectOptions
from cdcflow.dialects.rendering import RenderJob, RenderResult
from cdcflow.simulation.landing import land
from cdcflow.simulation.workload import Workload

#: What the registry reads here (the workload features and event kinds are the feed's).
__all__ = ["EVENT_KINDS", "FEATURES", "event_operations", "render", "render_transport"]


# ---------------------------------------------------------------------- files


def name_timestamp(at: tuple[int, int]) -> str:
    """The 33-digit timestamp of cloud-storage file names for an HLC."""
    wall, logical = at
    secs, nanos = divmod(wall, 1_000_000_000)
    base = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=secs)
    return f"{base.strftime('%Y%m%d%H%M%S')}{nanos:09d}{logical:010d}"


def _lines(docs: list[Any]) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def render(job: RenderJob) -> RenderResult:
    """The registry's renderer: each table's changefeed into the landing zone (cloud-storage
    files, webhook bodies, Kafka records, enriched messages) with resolved messages, and with
    delivery faults and schema-change backfills when ``faults``."""
    rng = random.Random(job.seed)
    window = range(len(job.workload.transactions))[job.transactions or slice(None)]
    msgs = messages(job.workload, window, rng if job.faults else None)
    per_feed: dict[str, dict[str, list[Message]]] = {}
    for m in msgs:
        per_feed.setdefault(table_feed(job.workload, m.table), {}).setdefault(m.table, []).append(m)
    resolved = hlc_text(hlc(job.workload, window[-1], 5)) if len(window) else None
    crc = zlib.crc32(f"{job.workload.seed}-{job.seed}".encode())
    uniquer = f"{crc:08x}{job.seed & 0xFFFFFFFF:08x}"
    written: list[Path] = []
    counter = 0
    total = 0
    for feed, tables in sorted(per_feed.items()):
        for table, tmsgs in sorted(tables.items()):
            if job.faults:
                tmsgs = redelivered(tmsgs, rng)
            total += len(tmsgs)
            size = rng.randrange(3, 15) if job.faults else max(1, len(tmsgs))
            chunks = [tmsgs[i : i + size] for i in range(0, len(tmsgs), size)]
            for chunk in chunks:
                counter += 1
                written.append(
                    _write_chunk(
                        job.workload,
                        job.landing,
                        feed,
                        table,
                        chunk,
                        job.seed,
                        counter,
                        uniquer,
                        rng if job.faults else None,
                    )
                )
    if resolved is not None:
        written.extend(_write_resolved(job.landing, per_feed, resolved, job.seed, rng, job.faults))
    if job.faults and written:
        data_files = [p for p in written if not p.name.endswith(".RESOLVED")]
        if data_files:
            again = rng.choice(data_files)
            written.append(
                land(again.with_name(f"{again.stem}-redelivered{again.suffix}"), again.read_bytes())
                if not _is_cloud(again)
                else land(_cloud_again(again, job.seed), again.read_bytes())
            )
    return RenderResult(files=written, options=decode_options(job.workload), messages=total)


def _is_cloud(path: Path) -> bool:
    return path.suffix == ".ndjson" and path.name[:1].isdigit()


def _cloud_again(path: Path, seed: int) -> Path:
    """A redelivered cloud-storage file: the same content under a new file id."""
    parts = path.name.split("-")
    parts[4] = f"{99_000_000 + seed % 1_000_000:08d}"
    return path.with_name("-".join(parts))


def _write_chunk(
    workload: Workload,
    landing: Path,
    feed: str,
    table: str,
    chunk: list[Message],
    seed: int,
    counter: int,
    uniquer: str,
    rng: random.Random | None,
) -> Path:
    if feed == "cloudstorage":
        first = min(m.hlc for m in chunk)
        ts = name_timestamp(first)
        folder = landing / f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}"
        if rng is not None and rng.random() < 0.3:
            folder = folder / ts[8:10]
        name = f"{ts}-{uniquer}-1-{seed % 100}-{counter:08d}-{table}-1.ndjson"
        return land(folder / name, _lines([m.doc for m in chunk]))
    if feed == "webhook":
        bodies: list[Any] = []
        size = 1 if rng is None else rng.randrange(1, 5)
        for i in range(0, len(chunk), size):
            payload = [m.doc for m in chunk[i : i + size]]
            body: dict[str, Any] = {"payload": payload, "length": len(payload)}
            if rng is not None and rng.random() < 0.2:
                del body["length"]
            bodies.append(body)
        return land(landing / f"webhook-{seed}-{counter:05d}.ndjson", _lines(bodies))
    if feed == "kafka":
        records = []
        for i, m in enumerate(chunk):
            partition = zlib.crc32(orjson.dumps(m.key)) % 2
            records.append(
                {
                    "topic": table,
                    "partition": partition,
                    "offset": counter * 1000 + i,
                    "key": orjson.dumps(m.key).decode(),
                    "value": None if m.doc is None else orjson.dumps(m.doc).decode(),
                }
            )
        return land(landing / f"kafka-{seed}-{counter:05d}.jsonl", _lines(records))
    return land(landing / f"enriched-{seed}-{counter:05d}.ndjson", _lines([m.doc for m in chunk]))


def _write_resolved(
    landing: Path,
    per_feed: Mapping[str, Mapping[str, list[Message]]],
    resolved: str,
    seed: int,
    rng: random.Random,
    faults: bool,
) -> list[Path]:
    """Resolved messages in each feed's form, at the end of the rendered window."""
    out: list[Path] = []
    wall, _, logical = resolved.partition(".")
    at = (int(wall), int(logical))
    if "cloudstorage" in per_feed:
        ts = name_timestamp(at)
        content = b"" if faults and rng.random() < 0.5 else orjson.dumps({"resolved": resolved})
        out.append(land(landing / f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}" / f"{ts}.RESOLVED", content))
    if "webhook" in per_feed:
        out.append(
            land(landing / f"webhook-{seed}-resolved.ndjson", _lines([{"resolved": resolved}]))
        )
    records = []
    for table in sorted(per_feed.get("kafka", {})):
        value = {"resolved": resolved}
        for partition in (0, 1):
            records.append(
                {
                    "topic": table,
                    "partition": partition,
                    "offset": 10**9 + partition,
                    "key": None,
                    "value": orjson.dumps(value).decode(),
                }
            )
    if records:
        out.append(land(landing / f"kafka-{seed}-resolved.jsonl", _lines(records)))
    return out


def render_transport(
    workload: Workload, landing: Path, transport: str, *, seed: int
) -> RenderResult:
    """The workload in a transport of the changefeed's own: ``csv`` (a ``format=csv``
    initial scan of each table's final rows, one cloud-storage CSV file per table)."""
    if transport != "csv":
        raise ValueError(f"changefeeds have no transport {transport!r} of their own")
    import csv
    import io

    from cdcflow.simulation import oracle

    state = oracle.apply(workload)
    ts = name_timestamp(hlc(workload, len(workload.transactions) - 1, 9))
    files: list[Path] = []
    rows_written = 0
    columns: dict[str, list[str]] = {}
    for n, (table, rows) in enumerate(sorted(state.items())):
        cols = list(workload.tables[table].columns)
        columns[table] = cols
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for row in oracle.rows(rows):
            writer.writerow([_csv_text(row[c], workload.tables[table].columns[c]) for c in cols])
            rows_written += 1
        name = f"{ts[:4]}-{ts[4:6]}-{ts[6:8]}/{ts}-{seed:016x}-1-1-{n:08d}-{table}-1.csv"
        files.append(land(landing / name, out.getvalue().encode()))
    opts = decode_options(workload)
    options = DialectOptions(
        table_keys=opts.table_keys,
        column_types=opts.column_types,
        extra={"csv_columns": columns},
    )
    return RenderResult(files=files, options=options, messages=rows_written)


def _csv_text(value: Any, ctype: str) -> str:
    """A value as CockroachDB's CSV output writes it (NULL as an empty field)."""
    written = crdb_value(value, ctype)
    if written is None:
        return ""
    if isinstance(written, orjson.Fragment):
        return orjson.dumps(written).decode()
    if isinstance(written, bool):
        return "true" if written else "false"
    if isinstance(written, dict | list):
        return orjson.dumps(written).decode()
    return str(written)
