"""Dead letters: listing them, and replaying them once their cause is fixed.

A replay takes the pipeline's run lock and, source by source:

1. **claims** the chosen dead letters that were never replayed: one ``UPDATE`` sets their
   ``replay_batch`` to the source's next replay batch number;
2. turns them back into the batch's decoded events — a message that failed to decode is
   decoded again with the source's current configuration (from the file it came from when its
   transport cannot be read piece by piece, e.g. an Avro container), an event rejected after
   decoding is read back from its canonical JSON — and runs them through the same batch
   function as ``cdcflow run`` (ledger ``<source ledger>/replay``, so replay batches never
   collide with the streaming query's batches);
3. **marks** the claimed rows ``replayed_at``.

What fails again is dead-lettered again by step 2, with its new reason, and is replayed by the
next replay. A replay killed anywhere is completed by the next one: claimed rows not yet marked
are the batch to finish first (the batch ledger says which of its writes already happened).
Dead letters of split messages (``SEGMENT_*``) are not replayed: a lone segment cannot be
reassembled.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.codes import APPLY_CODES
from cdcflow.config import PipelineConfig
from cdcflow.decode.columns import Columns
from cdcflow.decode.decoder import Decoder, Outcome
from cdcflow.dialects.model import DialectOptions, Rejection
from cdcflow.engine.deadletters import TIMESTAMP_FORMAT
from cdcflow.errors import ConfigError
from cdcflow.event import SPARK_COLUMNS, spark_schema_ddl
from cdcflow.iceberg.catalog import Catalog
from cdcflow.iceberg.layouts import DEAD_LETTERS
from cdcflow.pipeline.batch import BatchRunner, Shared
from cdcflow.pipeline.report import BatchReport
from cdcflow.spark.sql import lit, q
from cdcflow.spark.worker import map_in_arrow
from cdcflow.transports import JSON, transport_of_file
from cdcflow.transports.message import RawMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.config import SourceConfig
    from cdcflow.pipeline.checkpoint import SourceRecord

#: Codes of dead letters a replay leaves alone (a lone segment cannot be reassembled).
NOT_REPLAYED = "SEGMENT_%"
#: The code of a re-decoded message that turns out to be a segment of a split message.
SEGMENT_REPLAY = "SEGMENT_REPLAY"

#: The ``kind`` of a dead letter written before it was recorded: ``event`` when its code is
#: one the engine or an output gives and its ``raw`` is a canonical event's JSON (which starts
#: with the event's ``id``), else ``message``. By content, not by code alone: decoders once
#: gave ``KEY_MISSING`` too, to messages whose ``raw`` is the message itself.
LEGACY_KIND = (
    f"IF(error_code IN ({', '.join(lit(c) for c in sorted(APPLY_CODES))}) "
    """AND startswith(CAST(raw AS string), '{"id":'), 'event', 'message')"""
)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a listing or a replay is about (empty: all)."""

    codes: Sequence[str] = ()
    tables: Sequence[str] = ()
    sources: Sequence[str] = ()
    since: str | None = None
    include_replayed: bool = False

    def where(self, source_ids: Sequence[str] | None = None) -> str:
        """The filter as a SQL condition over the dead-letter table (``source_ids``: the
        checkpoint ids of the named sources)."""
        parts = [] if self.include_replayed else ["replayed_at IS NULL"]
        if self.codes:
            parts.append(f"error_code IN ({_list(self.codes)})")
        if self.tables:
            parts.append(f"`table` IN ({_list(self.tables)})")
        if self.sources:
            parts.append(f"source IN ({_list(source_ids or ())})")
        when = self.since_time()
        if when is not None:
            parts.append(f"first_seen >= timestamp {lit(when.isoformat(sep=' '))}")
        return " AND ".join(parts) or "true"

    def since_time(self) -> dt.datetime | None:
        """``since`` as a time (UTC when it names no zone), ``None`` when not given."""
        if not self.since:
            return None
        try:
            when = dt.datetime.fromisoformat(self.since)
        except ValueError as e:
            raise ConfigError(
                f"--since {self.since!r} is not an ISO-8601 time",
                hint="e.g. 2026-11-20 or 2026-11-20T08:00:00",
            ) from e
        return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _list(values: Sequence[str]) -> str:
    return ", ".join(lit(v) for v in values) if values else "NULL"


@dataclass
class ReplayResult:
    """What a replay did, source by source."""

    claimed: dict[str, int] = field(default_factory=dict)
    reports: list[BatchReport] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)

    @property
    def dead_lettered(self) -> int:
        """Dead letters the replay wrote (undelivered events included)."""
        return sum(r.dead_lettered + r.undelivered for r in self.reports)

    @property
    def exit_status(self) -> int:
        """0: everything replayed applied; 3: some failed again (dead-lettered anew)."""
        return 3 if self.dead_lettered else 0

    def summary(self) -> str:
        total = sum(self.claimed.values())
        if not total:
            return "replay: nothing to replay"
        events = sum(r.events for r in self.reports)
        parts = [f"{name}: {n:,}" for name, n in sorted(self.claimed.items())]
        head = f"replay: {total:,} dead letter(s) ({', '.join(parts)})"
        if self.resumed:
            head += f", completing an interrupted replay of {', '.join(sorted(self.resumed))}"
        head += f"; {events:,} event(s), {self.dead_lettered:,} dead-lettered again"
        if self.dead_lettered:
            head += " (exit status 3: see cdcflow dead-letters)"
        return head


# ---------------------------------------------------------------------------- listing


def source_ids(
    cfg: PipelineConfig, names: Sequence[str], session: Callable[[], SparkSession] | None = None
) -> list[str]:
    """The checkpoint ids of the sources named (a checkpoint off the local disk is read through
    ``session()``); an unknown name is refused, naming the sources."""
    from cdcflow.pipeline.checkpoint import Checkpoint

    known = Checkpoint(cfg, session).records()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--source {', '.join(unknown)}: no such source in this pipeline's checkpoint",
            hint=f"sources: {', '.join(sorted(known)) or 'none yet'}",
        )
    return [known[n].id for n in names]


# ---------------------------------------------------------------------------- replay


def replay_dead_letters(
    cfg: PipelineConfig, spark: SparkSession, chosen: DeadLetterFilter
) -> ReplayResult:
    """Replay the chosen dead letters (see the module's description)."""
    from cdcflow.pipeline.checkpoint import Checkpoint

    result = ReplayResult()
    catalog = Catalog(cfg.catalog.name)
    internal = cfg.namespace + "__cdcflow"
    if not catalog.exists(spark, internal, DEAD_LETTERS):
        return result
    checkpoint = Checkpoint(cfg, lambda: spark)
    pid = checkpoint.pipeline_id()
    checkpoint.acquire()
    try:
        pairs = checkpoint.sources(pid)
        ids = [r.id for s, r in pairs if s.name in chosen.sources] if chosen.sources else None
        unknown = set(chosen.sources) - {s.name for s, _ in pairs}
        if unknown:
            raise ConfigError(
                f"--source {', '.join(sorted(unknown))}: no such source in this pipeline",
                hint=f"sources: {', '.join(s.name for s, _ in pairs)}",
            )
        shared = Shared(catalog)
        ident = catalog.ident(internal, DEAD_LETTERS)
        record_kinds(spark, ident)
        for src, record in pairs:
            if ids is not None and record.id not in ids:
                continue
            _replay_source(cfg, spark, shared, ident, src, record, chosen, ids, result)
    finally:
        checkpoint.release()
    return result


def record_kinds(spark: SparkSession, ident: str) -> None:
    """Give dead letters written before their ``kind`` was recorded one (:data:`LEGACY_KIND`),
    once: a replay then decides by the recorded kind alone."""
    if spark.sql(f"SELECT 1 FROM {ident} WHERE kind IS NULL LIMIT 1").collect():
        spark.sql(f"UPDATE {ident} SET kind = {LEGACY_KIND} WHERE kind IS NULL")


def _replay_source(
    cfg: PipelineConfig,
    spark: SparkSession,
    shared: Shared,
    ident: str,
    src: SourceConfig,
    record: SourceRecord,
    chosen: DeadLetterFilter,
    ids: Sequence[str] | None,
    result: ReplayResult,
) -> None:
    mine = f"source = {lit(record.id)}"
    row = spark.sql(
        f"SELECT max(replay_batch) AS last, "
        f"max(CASE WHEN replayed_at IS NULL THEN replay_batch END) AS open "
        f"FROM {ident} WHERE {mine}"
    ).collect()[0]
    if row["open"] is not None:
        batch = int(row["open"])
        result.resumed.append(src.name)
    else:
        batch = int(row["last"] or 0) + 1
        spark.sql(
            f"UPDATE {ident} SET replay_batch = {batch} WHERE {mine} AND replay_batch IS NULL "
            f"AND {chosen.where(ids)} AND replayed_at IS NULL "
            f"AND NOT (error_code LIKE {lit(NOT_REPLAYED)})"
        )
    claimed = spark.sql(
        f"SELECT * FROM {ident} WHERE {mine} AND replay_batch = {batch} AND replayed_at IS NULL"
    ).localCheckpoint()
    n = claimed.count()
    if not n:
        return
    result.claimed[src.name] = n
    events = replayed_events(claimed, src, record)
    ledger = dataclasses.replace(record, ledger=record.ledger + "/replay")
    runner = BatchRunner(cfg, ledger, src, shared, replay=True)
    runner(events, batch)
    result.reports.extend(runner.reports)
    spark.sql(
        f"UPDATE {ident} SET replayed_at = current_timestamp() "
        f"WHERE {mine} AND replay_batch = {batch} AND replayed_at IS NULL"
    )


def replayed_events(claimed: DataFrame, src: SourceConfig, record: SourceRecord) -> DataFrame:
    """The decoded-events frame of claimed dead letters: messages decoded again, events read
    back from their canonical JSON."""
    from cdcflow.spark.kind import functions

    F = functions(claimed.sparkSession)
    options = src.decoder_options()
    messages = claimed.where("kind <> 'event'").selectExpr(
        "raw", "origin", "offset", "line", "item", "dialect"
    )
    decoded = map_in_arrow(
        messages,
        partial(redecode, dialect=src.dialect, options=options, source=record.id),
        spark_schema_ddl(),
    )
    event_schema = ", ".join(f"`{n}` {t}" for n, t in SPARK_COLUMNS[: -len(_TRANSPORT)])
    parsed = claimed.where("kind = 'event'").select(
        F.from_json(
            F.col("raw").cast("string"),
            event_schema,
            {"timestampFormat": TIMESTAMP_FORMAT},
        ).alias("e"),
        "origin",
        "offset",
        "line",
        "item",
    )
    events = parsed.selectExpr(
        *(f"e.{q(n)} AS {q(n)}" for n, _ in SPARK_COLUMNS[: -len(_TRANSPORT)]),
        "origin",
        "offset",
        "line",
        "item",
        "CAST(NULL AS string) AS error_code",
        "CAST(NULL AS string) AS error_message",
        "CAST(NULL AS binary) AS raw",
    )
    return decoded.unionByName(events)


_TRANSPORT = ("origin", "offset", "line", "item", "error_code", "error_message", "raw")


def redecode(
    batches: Iterator[pa.RecordBatch], dialect: str, options: DialectOptions, source: str
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over dead-lettered messages: each decoded again at its original
    coordinates; a segment of a split message is rejected (it cannot be reassembled alone)."""
    decoders: dict[str, Decoder] = {}
    files: dict[str, list[Any]] = {}
    cols = Columns(wire=True)
    for batch in batches:
        for row in batch.to_pylist():
            name = dialect if dialect != "auto" else (row["dialect"] or "auto")
            if name not in decoders:
                decoders[name] = Decoder(name, options, wire=True)
            decoder = decoders[name]
            outcome = _decode_again(decoder, row, files)
            if outcome.segments:
                rej = Rejection(
                    SEGMENT_REPLAY,
                    "the message is a segment of a split message: it cannot be reassembled alone",
                    outcome.message.data,
                    dialect=decoder.dialect_name,
                )
                outcome = Outcome(outcome.message, [], [rej])
            cols.add_outcome(outcome, source)
    if cols.rows:
        yield cols.to_batch()


def _decode_again(decoder: Decoder, row: dict[str, Any], files: dict[str, list[Any]]) -> Outcome:
    origin = row["origin"]
    offset, line = int(row["offset"] or 0), row["line"]
    if transport_of_file(origin) != JSON:
        # pieces of binary containers are read from their file, when it is still there
        local = _local_path(origin)
        if local is not None:
            if origin not in files:
                files[origin] = list(decoder.frame(local.read_bytes(), origin))
            for framed in files[origin]:
                if framed.offset == offset and framed.line == line:
                    return decoder.decode(framed)
    return decoder.decode(RawMessage(row["raw"] or b"", origin=origin, offset=offset, line=line))


def _local_path(origin: str | None) -> Path | None:
    if not origin:
        return None
    text = origin.removeprefix("file://").removeprefix("file:")
    if "://" in text:
        return None
    path = Path(text)
    return path if path.is_file() else None
