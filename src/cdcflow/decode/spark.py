"""Decoding inside Spark: files → canonical events, Arrow-batched (``mapInArrow``).

Each ``binaryFile`` row (one file) goes through a :class:`~cdcflow.decode.decoder.Decoder` in
wire mode; events, rejections and segments leave as record batches with the schema of
:func:`cdcflow.event.spark_schema_ddl` (:mod:`cdcflow.decode.columns`). No row-at-a-time UDF,
nothing collected to the driver. pyspark and pyarrow are imported by the functions, never by
this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING

import orjson

from cdcflow.decode.columns import Columns, arrow_schema, columnar_batch
from cdcflow.decode.decoder import Decoder, Outcome
from cdcflow.decode.segments import Piece, assess
from cdcflow.dialects.base import Columnar, DialectOptions
from cdcflow.event import spark_schema_ddl
from cdcflow.transports.message import RawMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

RAW_SCHEMA = "path string, modificationTime timestamp, length long, content binary"

#: Columns :func:`judge_groups` adds to the decoded-events schema.
JUDGED_COLUMNS = "_src string, _grp string, _status string"


def decode_files(
    batches: Iterator[pa.RecordBatch],
    dialect: str,
    options: DialectOptions,
    max_rows: int = 20000,
    source: str = "",
    bulk: bool = True,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function over ``binaryFile`` batches (path, content, ...). ``bulk``:
    plain JSON-lines files are read in bulk where the dialect can (the row decoder reads
    every other line, and every line when ``bulk`` is false). Never raises for bad input: a
    message nothing foresaw is a ``DECODER_ERROR`` row, a zero-byte file an ``EMPTY_FILE``
    row."""
    decoder = Decoder(dialect, options, wire=True)
    cols = Columns(wire=True)
    for batch in batches:
        paths = batch.column("path").to_pylist()
        contents = batch.column("content").to_pylist()
        for path, content in zip(paths, contents, strict=True):
            found = decoder.bulk(content or b"", path) if bulk else None
            read = None
            if found is not None:
                try:
                    read = columnar_batch(decoder.dialect_name, found, path)
                except Exception:  # the row decoder reads the file and names any problem
                    found = None
            if found is not None and read is not None:
                yield read
                outcomes = _the_rest(decoder, found, path)
            else:
                outcomes = decoder.decode_file(content or b"", path)
            for outcome in outcomes:
                cols.add_outcome(outcome, source)
                if cols.rows >= max_rows:
                    yield cols.to_batch()
                    cols = Columns(wire=True)
    if cols.rows:
        yield cols.to_batch()


def _the_rest(decoder: Decoder, found: Columnar, origin: str) -> Iterator[Outcome]:
    """The lines a dialect did not read in bulk, decoded one by one."""
    import numpy as np

    lines = found.lines
    for i in np.setdiff1d(np.arange(len(lines.offsets)), found.rows).tolist():
        msg = RawMessage(
            lines.line(i), origin=origin, offset=int(lines.offsets[i]), line=int(lines.numbers[i])
        )
        yield decoder.decode(msg)


def decode_dataframe(
    df: DataFrame, dialect: str = "auto", options: DialectOptions | None = None, source: str = ""
) -> DataFrame:
    """Canonical events (and rejections, and segments of split messages tagged with the source
    name) of a ``binaryFile`` DataFrame, batch or streaming."""
    fn = partial(decode_files, dialect=dialect, options=options or DialectOptions(), source=source)
    return df.mapInArrow(fn, spark_schema_ddl())


def read_raw(
    spark: SparkSession, path: str, streaming: bool, max_files_per_trigger: int | None = None
) -> DataFrame:
    """Files of a landing zone as ``binaryFile`` rows (sub-folders included).

    Names starting with ``_`` or ``.`` are ignored by Spark (land files by atomic rename);
    ``maxFileAge`` is set far out so files with old modification times are not skipped.
    """
    if not streaming:
        return spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
    reader = spark.readStream.format("binaryFile").schema(RAW_SCHEMA)
    reader = reader.option("maxFileAge", "36500d").option("recursiveFileLookup", "true")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    return reader.load(path)


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


def empty_files(
    spark: SparkSession,
    checkpoint: str,
    batch_id: int,
    seen: set[str],
    dialect: str,
    options: DialectOptions,
    source: str = "",
) -> DataFrame | None:
    """The decoded rows (schema of :func:`cdcflow.event.spark_schema_ddl`) of the zero-byte
    files of one micro-batch of a ``binaryFile`` stream — ``EMPTY_FILE`` rejections, or what a
    dialect reads from such a file (a CockroachDB ``.RESOLVED`` file) — else ``None``.

    Spark's file scan gives a zero-byte file no row at all, so such a file would be skipped
    silently: the files of the batch are read from the file source's log under the query's
    ``checkpoint``, and those not among the batch's ``seen`` origins are checked for size.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    hadoop = jvm.org.apache.hadoop.fs
    paths: list[str] = []
    for name in (str(batch_id), f"{batch_id}.compact"):
        log = hadoop.Path(f"{checkpoint}/sources/0/{name}")
        fs = log.getFileSystem(conf)
        if not fs.exists(log):
            continue
        stream = fs.open(log)
        try:
            text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        for line in str(text).splitlines()[1:]:
            entry = orjson.loads(line) if line.strip() else {}
            if entry.get("batchId") == batch_id and isinstance(entry.get("path"), str):
                paths.append(str(hadoop.Path(jvm.java.net.URI(entry["path"])).toString()))
        break
    decoder = Decoder(dialect, options, wire=True)
    cols = Columns(wire=True)
    for path in paths:
        if path in seen:
            continue
        p = hadoop.Path(path)
        try:
            size = p.getFileSystem(conf).getFileStatus(p).getLen()
        except Exception:  # gone since it was listed: nothing to report
            continue
        if size == 0:
            for outcome in decoder.decode_file(b"", path):
                cols.add_outcome(outcome, source)
    if not cols.rows:
        return None
    # Arrow gives maps as lists of pairs; Spark's row conversion wants dicts
    rows = [
        tuple(dict(v) if isinstance(v, list) else v for v in r.values())
        for r in cols.to_batch().to_pylist()
    ]
    return spark.createDataFrame(rows, spark_schema_ddl())
