"""Decoding inside Spark: raw messages → canonical events, Arrow-batched (``mapInArrow``).

Raw messages come as ``binaryFile`` rows (one file each), as rows shaped like Spark's Kafka
source (one message each, :data:`KAFKA_SCHEMA`), or as one binary or string column (one message
per row); :func:`decode_dataframe` decodes them with the functions of
:mod:`cdcflow.decode.batches`, and :func:`decoded_frame` checks canonical events given as they
are. No row-at-a-time UDF,
nothing collected to the driver. pyspark and pyarrow are imported by the functions, never by
this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from cdcflow.decode.batches import decode_files, decode_records
from cdcflow.decode.columns import SEGMENT, SKIPPED, Columns, arrow_schema
from cdcflow.decode.decoder import BAD_TYPE, Decoder
from cdcflow.decode.segments import Piece, assess
from cdcflow.dialects.model import DialectOptions
from cdcflow.errors import ConfigError
from cdcflow.event import ERROR_FIELDS, FIELDS, SPARK_COLUMNS, TRANSPORT_FIELDS, spark_schema_ddl
from cdcflow.spark.sql import lit, q
from cdcflow.spark.worker import map_in_arrow
from cdcflow.types.canonical import CANONICAL_TYPES_TEXT, canonical_type_sql

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The columns of Spark's Kafka source (``headers`` when ``includeHeaders`` is true).
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
#: The Kafka columns the decoder reads, with the type it reads them as (all but ``value`` may
#: be absent).
_RECORD_TYPES: dict[str, str] = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "headers": "array<struct<key:string,value:binary>>",
}

#: Shapes of raw DataFrames (:func:`raw_shape`).
FILES = "files"
RECORDS = "records"
MESSAGES = "messages"

#: Columns :func:`judge_groups` adds to the decoded-events schema.
JUDGED_COLUMNS = "_src string, _grp string, _status string"


class RawShapeError(ConfigError):
    """A DataFrame is neither raw messages nor canonical events."""

    code = "RAW_SHAPE"


def raw_shape(df: DataFrame) -> str:
    """What a DataFrame of raw messages holds: :data:`FILES` (``binaryFile`` rows: ``path`` and
    ``content``), :data:`RECORDS` (the columns of Spark's Kafka source: ``value`` and any of
    the others) or :data:`MESSAGES` (one binary or string column). Raises
    :class:`RawShapeError` naming the columns found otherwise."""
    fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    if "path" in fields and fields.get("content") == "binary":
        return FILES
    if fields.get("value") in ("binary", "string"):
        return RECORDS
    if len(fields) == 1 and next(iter(fields.values())) in ("binary", "string"):
        return MESSAGES
    found = ", ".join(f"{n} {t}" for n, t in fields.items()) or "none"
    # the message says it too: a Python traceback shows the message, not the hint
    raise RawShapeError(
        f"not a DataFrame of raw messages (columns: {found}); a DataFrame of change rows (one "
        "row per change with the table's columns) is applied with cdcflow.api.apply_changes",
        hint="give binaryFile rows (path, content), rows of Spark's Kafka source (key, value, "
        "topic, partition, offset, timestamp, headers), or one binary or string column; or "
        "apply change rows with cdcflow.api.apply_changes(target=..., source=df, keys=[...], "
        "sequence_by=...) (docs/python-api.md)",
    )


def decode_dataframe(
    df: DataFrame, dialect: str = "auto", options: DialectOptions | None = None, source: str = ""
) -> DataFrame:
    """Canonical events (and rejections, and segments of split messages tagged with the source
    name) of a DataFrame of raw messages (see :func:`raw_shape`), batch or streaming."""
    opts = options or DialectOptions()
    shape = raw_shape(df)
    if shape == FILES:
        fn = partial(decode_files, dialect=dialect, options=opts, source=source)
        return map_in_arrow(df, fn, spark_schema_ddl())
    if shape == MESSAGES:
        only = df.schema.fields[0].name
        rows = df.selectExpr(f"CAST({q(only)} AS binary) AS value")
    else:
        present = set(df.columns)
        rows = df.selectExpr(
            *(f"CAST({q(c)} AS {t}) AS {q(c)}" for c, t in _RECORD_TYPES.items() if c in present)
        )
    fn = partial(decode_records, dialect=dialect, options=opts, source=source)
    return map_in_arrow(rows, fn, spark_schema_ddl())


def is_decoded(df: DataFrame) -> bool:
    """Whether a DataFrame holds canonical events (decoded rows) rather than raw messages."""
    return {"table", "operation", "sequence"} <= set(df.columns)


def decoded_frame(df: DataFrame) -> DataFrame:
    """A DataFrame of canonical events in the decoded-frame schema: a frame from
    :func:`decode_dataframe` as it is; canonical events from elsewhere (the fields of
    :data:`cdcflow.event.FIELDS`, by name, at least ``table``, ``operation`` and ``sequence``;
    absent ones null, an absent ``id`` a hash of the event) gain the transport and error
    columns; other columns are left out."""
    if not is_decoded(df):
        raise RawShapeError(
            f"not a DataFrame of canonical events (columns: {', '.join(df.columns)})",
            hint="canonical events have at least the columns table, operation and sequence",
        )
    found_types = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    if found_types == list(SPARK_COLUMNS):
        return _types_checked(df)
    types = dict(found_types)
    exprs = []
    for name, spark_type in SPARK_COLUMNS:
        found = types.get(name)
        if found is None:
            exprs.append(f"{_absent(name, spark_type, types)} AS {q(name)}")
        elif found == spark_type:
            exprs.append(q(name))
        elif spark_type == "string" and found.startswith(("struct<", "map<", "array<")):
            exprs.append(f"to_json({q(name)}) AS {q(name)}")
        else:
            exprs.append(f"CAST({q(name)} AS {spark_type}) AS {q(name)}")
    return _types_checked(df.selectExpr(*exprs))


def _types_checked(frame: DataFrame) -> DataFrame:
    """Canonical events whose ``types`` hold a name that is not a canonical type become
    ``BAD_TYPE`` rejections (``raw``: the event as JSON), as the decoder rejects such events,
    so the name never reaches a table's DDL."""
    bad = f"map_filter(types, (_c, _t) -> NOT {canonical_type_sql('_t')})"
    cond = f"error_code IS NULL AND types IS NOT NULL AND cardinality({bad}) > 0"
    message = (
        f"concat('types of table ', coalesce(`table`, 'null'), ' not canonical (', "
        f"to_json({bad}), '); ', {lit(CANONICAL_TYPES_TEXT)})"
    )
    event = ", ".join(q(f) for f in FIELDS)
    checked = {
        "error_code": f"CASE WHEN {cond} THEN {lit(BAD_TYPE)} ELSE error_code END",
        "error_message": f"CASE WHEN {cond} THEN {message} ELSE error_message END",
        "raw": f"CASE WHEN {cond} THEN CAST(to_json(struct({event})) AS binary) ELSE raw END",
    }
    return frame.selectExpr(
        *(f"{checked[c]} AS {q(c)}" if c in checked else q(c) for c in frame.columns)
    )


def _absent(name: str, spark_type: str, present: Mapping[str, str]) -> str:
    if name == "partial":
        return "false"
    if name in ("metadata", "types"):
        return "CAST(map() AS map<string,string>)"
    if name == "id":
        # a hash of what makes the event (as cdcflow.event.event_id, with another digest)
        parts = ", ".join(
            f"{lit(c)}, {q(c) if c in present else 'CAST(NULL AS string)'}"
            for c in ("dialect", "table", "key", "sequence", "operation")
        )
        return f"concat('cdc-', substring(sha2(to_json(named_struct({parts})), 256), 1, 32))"
    return f"CAST(NULL AS {spark_type})"


@dataclass(frozen=True)
class Decoded:
    """Raw messages decoded (:func:`cdcflow.api.decode`): ``frame`` holds every row — events,
    rejected messages, segments of split messages and messages without a change (Kafka
    tombstones, counted by the batch) — and is what the apply functions take;
    :attr:`events`, :attr:`rejected` and :attr:`segments` are views of it."""

    frame: DataFrame

    @property
    def events(self) -> DataFrame:
        """Canonical events: the fields of the canonical event and the message's coordinates
        (``origin``, ``offset``, ``line``, ``item``)."""
        kept = (
            f"error_code IS NULL AND NOT (operation <=> '{SEGMENT}' OR operation <=> '{SKIPPED}')"
        )
        return self.frame.where(kept).select(*(q(c) for c in (*FIELDS, *TRANSPORT_FIELDS)))

    @property
    def rejected(self) -> DataFrame:
        """Messages that could not be decoded: coordinates, ``dialect`` and ``table`` when
        known, ``error_code``, ``error_message`` and the message's bytes (``raw``)."""
        return self.frame.where("error_code IS NOT NULL").select(
            *(q(c) for c in (*TRANSPORT_FIELDS, "dialect", "table", *ERROR_FIELDS))
        )

    @property
    def segments(self) -> DataFrame:
        """Segments of split messages (SQL Server change event streaming), which the apply
        functions reassemble across batches; ``id`` is the message they belong to."""
        return self.frame.where(f"operation = '{SEGMENT}'")


def judge_groups(
    batches: Iterator[pa.RecordBatch],
    now: float,
    wait: float,
    options: Mapping[str, DialectOptions],
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over groups of segments (``src``, ``dialect``, ``grp``, ``pieces``): one
    status row per group (``_status`` complete/pending/invalid/expired, the verdict's code and
    reason in the error columns), and for complete groups the events (or rejections) of the
    reassembled message. Output schema: the decoded-events schema plus
    :data:`JUDGED_COLUMNS`."""
    import pyarrow as pa

    decoders: dict[tuple[str, str], Decoder] = {}
    out_schema = arrow_schema()
    for name in ("_src", "_grp", "_status"):
        out_schema = out_schema.append(pa.field(name, pa.string()))

    for batch in batches:
        cols = Columns(wire=True)
        tags: list[tuple[str, str, str | None]] = []
        for row in batch.to_pylist():
            src, dialect, grp = row["src"], row["dialect"], row["grp"]
            rows = sorted(
                row["pieces"],
                key=lambda p: (p["batch_id"], p["origin"] or "", p["offset"] or 0),
            )
            pieces = [
                Piece(
                    p["idx"],
                    p["final"],
                    p["total"],
                    p["raw"],
                    p["origin"],
                    p["offset"] or 0,
                    p["line"],
                    p["seen"] / 1_000_000,
                )
                for p in rows
            ]
            key = (src, dialect)
            if key not in decoders:
                decoders[key] = Decoder(dialect, options.get(src, DialectOptions()), wire=True)
            decoder = decoders[key]
            verdict = assess(
                grp,
                pieces,
                now,
                wait,
                partial(decoder.reassembles, dialect),
                decoder.limits.max_segments,
            )
            # a status row is a marker, not a rejection: its error fields carry the verdict
            cols.add_marker(dialect, verdict.code, verdict.reason, b"", None, 0, None, None)
            tags.append((src, grp, verdict.status))
            if verdict.status != "complete":
                continue
            first = verdict.pieces[0]
            outcome = decoder.decode_segments(
                dialect, [p.raw for p in verdict.pieces], first.origin, first.offset, first.line
            )
            before = cols.rows
            cols.add_outcome(outcome, src)
            tags.extend([(src, grp, None)] * (cols.rows - before))
        arrays = list(cols.to_batch().columns)
        arrays.append(pa.array([t[0] for t in tags], pa.string()))
        arrays.append(pa.array([t[1] for t in tags], pa.string()))
        arrays.append(pa.array([t[2] for t in tags], pa.string()))
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)
