"""A landing zone: a folder (local path or any Hadoop filesystem URI) whose files are the
messages, read with Spark's ``binaryFile`` stream.

Names starting with ``_`` or ``.`` are not read (land files by atomic rename); processed files
may be archived. A zero-byte file gets no row from Spark's scan, so each batch looks for such
files in the stream's file log and decodes them itself (an ``EMPTY_FILE`` rejection, or what a
dialect reads from it: a CockroachDB ``.RESOLVED`` file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import orjson
from pydantic import Field, model_validator

from cdcflow.config_base import ConfigModel
from cdcflow.sources.base import Source, SourceMissing

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from cdcflow.dialects.model import DialectOptions

RAW_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


class LandingFields(ConfigModel):
    """A source's landing-zone settings: ``path`` (the folder), ``create_path`` (create it when
    absent), ``max_files_per_batch`` (bounds a batch) and ``archive``: a landing zone's
    processed files are moved there (under their own path, as Spark's file source archives
    them) once the batch that read them is committed, so the listing each batch makes stays
    the size of what waits, whatever months of files went through; without it they stay where
    they landed."""

    path: str | None = None
    archive: str | None = None
    max_files_per_batch: int | None = Field(default=None, ge=1)
    create_path: bool = False

    @model_validator(mode="after")
    def _archive(self) -> LandingFields:
        if self.archive is not None:
            if self.path is None:
                raise ValueError("archive is where a landing zone's processed files go: give path")
            if _nested(self.archive, self.path):
                raise ValueError(
                    f"archive {self.archive!r} and path {self.path!r} must not hold one "
                    "another: archived files would be read again, or the archive moved into "
                    "itself"
                )
        return self

    @property
    def landing_only(self) -> list[str]:
        """The landing-zone settings given (for sources of another kind, which refuse them)."""
        return [
            name
            for name in ("archive", "max_files_per_batch", "create_path")
            if getattr(self, name)
        ]

    def landing_relative_to(self, fix: Callable[[str], str]) -> dict[str, str | None]:
        """The folders resolved by ``fix`` (a configuration file's folder), as updates."""
        if self.path is None:
            return {}
        return {"path": fix(self.path), "archive": fix(self.archive) if self.archive else None}


def _nested(a: str, b: str) -> bool:
    """Whether one of two folders (local paths or URIs) is, or is inside, the other."""
    left, right = (p.rstrip("/") + "/" for p in (a, b))
    if "://" not in a and "://" not in b:
        left, right = (str(Path(p).resolve()).rstrip("/") + "/" for p in (a, b))
    return left.startswith(right) or right.startswith(left)


class LandingSource(Source):
    """A landing zone, read as a ``binaryFile`` stream."""

    def __init__(
        self, name: str, dialect: str, options: DialectOptions, landing: LandingFields
    ) -> None:
        super().__init__(name, dialect, options)
        assert landing.path is not None
        self.path = landing.path
        self.landing = landing

    @property
    def location(self) -> str:
        return self.path

    def describe(self) -> str:
        return f"landing zone {self.path}"

    def check(self) -> None:
        """Refuse a landing zone that does not exist (``SOURCE_PATH_MISSING``), unless
        ``create_path`` creates it; a URI is left to Spark."""
        if "://" in self.path:
            return
        path = Path(self.path)
        if path.is_dir():
            return
        if self.landing.create_path and not path.exists():
            path.mkdir(parents=True, exist_ok=True)
            return
        raise SourceMissing(
            f"source {self.name!r}: landing zone {self.path} "
            + ("is not a folder" if path.exists() else "does not exist"),
            hint="check the path, or set create_path: true on the source to create it",
        )

    def check_connect(self) -> None:
        """Refuse a landing zone on another filesystem than the local one over Spark Connect:
        a batch's zero-byte files are found by reading the file source's log and the files'
        sizes, which a Connect server's Python process does on its own disk only."""
        from cdcflow.spark.kind import ConnectUnsupported

        if "://" in self.path and not self.path.startswith("file:"):
            raise ConnectUnsupported(
                f"source {self.name!r}: a landing zone at {self.path} does not run over a "
                "Spark Connect session yet (only one on the server's local disk)",
                hint="run the pipeline with a classic SparkSession, or land the files on the "
                "Spark Connect server's disk",
            )

    def read(self, spark: SparkSession) -> DataFrame:
        return read_raw(
            spark,
            self.path,
            streaming=True,
            max_files_per_trigger=self.landing.max_files_per_batch,
            archive=self.landing.archive,
        )

    def empty_files(
        self, spark: SparkSession, checkpoint: str, batch_id: int, seen: set[str], label: str
    ) -> DataFrame | None:
        return empty_files(spark, checkpoint, batch_id, seen, self.dialect, self.options, label)

    def files_waiting(self, query_checkpoint: str) -> int | None:
        """Files of a local landing zone its query has not read yet (``None``: not a local
        landing zone and checkpoint)."""
        if "://" in self.path or "://" in query_checkpoint:
            return None
        landing = Path(self.path)
        if not landing.is_dir():
            return None
        return len(landing_files(landing.resolve()) - read_files(Path(query_checkpoint)))


def read_raw(
    spark: SparkSession,
    path: str,
    streaming: bool,
    max_files_per_trigger: int | None = None,
    archive: str | None = None,
) -> DataFrame:
    """Files of a landing zone as ``binaryFile`` rows (sub-folders included).

    Names starting with ``_`` or ``.`` are ignored by Spark (land files by atomic rename);
    ``maxFileAge`` is set far out so files with old modification times are not skipped.
    ``archive`` (streaming): where the files of committed batches are moved (Spark's
    ``cleanSource``), so each batch's listing holds only what waits.
    """
    if not streaming:
        return spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
    reader = spark.readStream.format("binaryFile").schema(RAW_SCHEMA)
    reader = reader.option("maxFileAge", "36500d").option("recursiveFileLookup", "true")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    if archive:
        reader = reader.option("cleanSource", "archive").option("sourceArchiveDir", archive)
    return reader.load(path)


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
    from cdcflow.decode.columns import Columns
    from cdcflow.decode.decoder import Decoder
    from cdcflow.event import spark_schema_ddl
    from cdcflow.spark.kind import is_connect

    decoder = Decoder(dialect, options, wire=True)
    cols = Columns(wire=True)
    files = _LocalFiles() if is_connect(spark) else _HadoopFiles(spark)
    for path in files.logged(f"{checkpoint}/sources/0", batch_id):
        if path in seen:
            continue
        if files.size(path) == 0:
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


def _logged_paths(text: str, batch_id: int) -> list[str]:
    """The paths a file source's log entry (its text) gives batch ``batch_id``, as written
    (URIs)."""
    out: list[str] = []
    for line in text.splitlines()[1:]:
        entry = orjson.loads(line) if line.strip() else {}
        if entry.get("batchId") == batch_id and isinstance(entry.get("path"), str):
            out.append(entry["path"])
    return out


class _HadoopFiles:
    """A file source's log and its files' sizes through Hadoop's filesystems in Spark's JVM
    (any filesystem the session reads)."""

    def __init__(self, spark: SparkSession) -> None:
        self.jvm: Any = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]

    def logged(self, log: str, batch_id: int) -> list[str]:
        """The files of batch ``batch_id`` in the file source's log at ``log``, as Spark's
        scan names them."""
        hadoop = self.jvm.org.apache.hadoop.fs
        for name in (str(batch_id), f"{batch_id}.compact"):
            path = hadoop.Path(f"{log}/{name}")
            fs = path.getFileSystem(self.conf)
            if not fs.exists(path):
                continue
            stream = fs.open(path)
            try:
                text = str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
            finally:
                stream.close()
            return [
                str(hadoop.Path(self.jvm.java.net.URI(p)).toString())
                for p in _logged_paths(text, batch_id)
            ]
        return []

    def size(self, path: str) -> int | None:
        """A file's size (``None``: gone since it was listed)."""
        p = self.jvm.org.apache.hadoop.fs.Path(path)
        try:
            return int(p.getFileSystem(self.conf).getFileStatus(p).getLen())
        except Exception:  # gone since it was listed: nothing to report
            return None


class _LocalFiles:
    """A file source's log and its files' sizes on the local disk (a Spark Connect server's
    Python process, beside the server: landing zones and checkpoints on its disk)."""

    @staticmethod
    def _local(uri: str) -> str:
        parts = urlsplit(uri)
        return unquote(parts.path) if parts.scheme in ("", "file") else uri

    def logged(self, log: str, batch_id: int) -> list[str]:
        """As :meth:`_HadoopFiles.logged`: ``file:/…`` names, as Spark's scan gives them."""
        folder = Path(self._local(log))
        for name in (str(batch_id), f"{batch_id}.compact"):
            found = folder / name
            if found.is_file():
                text = found.read_text(encoding="utf-8")
                return ["file:" + self._local(p) for p in _logged_paths(text, batch_id)]
        return []

    def size(self, path: str) -> int | None:
        try:
            return os.stat(self._local(path)).st_size
        except OSError:  # gone since it was listed: nothing to report
            return None


def landing_files(path: Path) -> set[str]:
    """The files Spark's file source would read in a landing zone (sub-folders included,
    names starting with ``_`` or ``.`` left out, as Spark does)."""
    out: set[str] = set()
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        out.update(os.path.join(folder, f) for f in files if not f.startswith(("_", ".")))
    return out


def read_files(query_checkpoint: Path) -> set[str]:
    """The files a source's query has taken into a batch: its file source's log (local
    paths)."""
    log = query_checkpoint / "sources" / "0"
    out: set[str] = set()
    if not log.is_dir():
        return out
    for entry in os.scandir(log):
        if entry.name.startswith(".") or not entry.is_file():
            continue
        with open(entry.path, encoding="utf-8") as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                try:
                    found = json.loads(line).get("path")
                except ValueError:
                    continue
                if isinstance(found, str):
                    out.add(unquote(urlsplit(found).path))
    return out
