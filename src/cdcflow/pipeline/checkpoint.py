"""A pipeline's checkpoint folder: who owns it, who runs it, and one streaming query per source.

Layout (local path or any Hadoop filesystem URI)::

    <checkpoint>/cdcflow-pipeline-id        pipeline name + a random suffix, written on first run
    <checkpoint>/cdcflow.lock               the running process (host, pid, heartbeat)
    <checkpoint>/sources/<id>/source.json   the source as first run: id, name, path, dialect,
                                            replica names
    <checkpoint>/sources/<id>/query/        Spark's checkpoint of that source's query

Spark ties a checkpoint to its set of sources, so each source has its own query and checkpoint:
adding a source starts its query from the beginning of its landing zone and leaves the others
where they were; removing one leaves its folder (its progress, should it come back); renaming
one (``renamed_from``) keeps its folder, id and replica names. Pipelines checkpointed by
earlier versions (one query over every source, ``<checkpoint>/stream``) are split into
per-source checkpoints on their first run, when the configuration still lists their sources
in the same order.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcflow.config import PipelineConfig, SourceConfig
from cdcflow.errors import CdcflowError, ConfigError
from cdcflow.spark.kind import ConnectUnsupported, is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ID_FILE = "cdcflow-pipeline-id"
LOCK_FILE = "cdcflow.lock"
SOURCE_FILE = "source.json"
#: A lock whose heartbeat is older than this belongs to a run that is gone.
LOCK_STALE_SECONDS = 60.0
HEARTBEAT_SECONDS = 15.0


#: What applies a source whose batches are given outside a streaming query.
DIRECT = "direct"


def _applier(query: str) -> str:
    if query == DIRECT:
        return "batches given outside a streaming query"
    return f"streaming query {query}"


class PipelineBusy(CdcflowError):
    """Another run of the same pipeline holds its checkpoint."""

    code = "PIPELINE_RUNNING"


class Store:
    """Small files of a checkpoint folder: on a local disk through Python, elsewhere (any
    Hadoop filesystem URI) through the JVM's Hadoop filesystem API. A local checkpoint is read
    and locked before Spark starts."""

    root: str

    def exists(self, *parts: str) -> bool:
        """Whether a file or folder exists under the root."""
        raise NotImplementedError

    def read(self, *parts: str) -> str | None:
        """A small text file (lines joined by ``\n``), ``None`` when absent."""
        raise NotImplementedError

    def write(self, text: str, *parts: str, exclusive: bool = False) -> bool:
        """Write a small file (``exclusive``: only when it does not exist yet, atomically);
        returns whether it was written."""
        raise NotImplementedError

    def delete(self, *parts: str) -> None:
        """Delete a file or a folder with its contents (nothing when absent)."""
        raise NotImplementedError

    def rename(self, src: Sequence[str], dst: Sequence[str]) -> None:
        """Move a file or folder under the root."""
        raise NotImplementedError

    def children(self, *parts: str) -> list[str]:
        """Names in a folder, hidden ones (checksums) left out, sorted."""
        raise NotImplementedError


def local_folder(root: str) -> Path | None:
    """The local folder a checkpoint location names (a path or a ``file:`` URI), ``None`` for
    other filesystems."""
    if root.startswith("file:"):
        return Path("/" + root.removeprefix("file:").lstrip("/"))
    if "://" in root:
        return None
    return Path(root)


def open_store(root: str, session: Callable[[], SparkSession] | None = None) -> Store:
    """The store of a checkpoint location: a local one without Spark, otherwise through the
    JVM of ``session()`` (started only then)."""
    folder = local_folder(root)
    if folder is not None:
        return LocalStore(folder)
    if session is None:
        raise ConfigError(
            f"checkpoint {root} is on a remote filesystem, read through Spark: no session given",
            hint="give the pipeline a SparkSession",
        )
    spark = session()
    if is_connect(spark):
        raise ConnectUnsupported(
            f"checkpoint {root} is on a remote filesystem, which cdcflow reaches through "
            "Hadoop's classes in Spark's JVM: a Spark Connect session has none here",
            hint="give a local checkpoint folder (a path or file:// URL) over Spark Connect",
        )
    return HadoopStore(spark, root)


class LocalStore(Store):
    """A checkpoint folder on a local disk (no JVM): new files are created exclusively or
    replaced atomically (written under a hidden name, then renamed)."""

    def __init__(self, root: Path) -> None:
        self.folder = root
        self.root = str(root).rstrip("/") or "/"

    def _path(self, *parts: str) -> Path:
        return self.folder.joinpath(*parts)

    def exists(self, *parts: str) -> bool:
        return self._path(*parts).exists()

    def read(self, *parts: str) -> str | None:
        try:
            text = self._path(*parts).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError):
            return None
        return "\n".join(text.splitlines())

    def write(self, text: str, *parts: str, exclusive: bool = False) -> bool:
        path = self._path(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        # a checksum Hadoop's local filesystem wrote beside an earlier version would no longer
        # match the file
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
        data = text.encode()
        if exclusive:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            return True
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True

    def delete(self, *parts: str) -> None:
        path = self._path(*parts)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def rename(self, src: Sequence[str], dst: Sequence[str]) -> None:
        target = self._path(*dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self._path(*src), target)
        except OSError as e:
            raise CdcflowError(
                f"could not move {'/'.join(src)} to {'/'.join(dst)} in {self.root}: {e}"
            ) from None

    def children(self, *parts: str) -> list[str]:
        path = self._path(*parts)
        if not path.is_dir():
            return []
        return sorted(p.name for p in path.iterdir() if not p.name.startswith((".", "_")))


class HadoopStore(Store):
    """A checkpoint folder on any Hadoop filesystem, through the JVM."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        jvm = spark._jvm
        assert jvm is not None
        self._jvm = jvm
        self._conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        self.fs = jvm.org.apache.hadoop.fs.Path(self.root).getFileSystem(self._conf)

    def path(self, *parts: str) -> Any:
        """A Hadoop ``Path`` under the root."""
        return self._jvm.org.apache.hadoop.fs.Path("/".join([self.root, *parts]))

    def exists(self, *parts: str) -> bool:
        return bool(self.fs.exists(self.path(*parts)))

    def read(self, *parts: str) -> str | None:
        p = self.path(*parts)
        if not self.fs.exists(p):
            return None
        stream = self.fs.open(p)
        try:
            jio = self._jvm.java.io
            reader = jio.BufferedReader(jio.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(str(line))
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()

    def write(self, text: str, *parts: str, exclusive: bool = False) -> bool:
        p = self.path(*parts)
        try:
            out = self.fs.create(p, not exclusive)
        except Exception:
            if exclusive and self.fs.exists(p):
                return False
            raise
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        return True

    def delete(self, *parts: str) -> None:
        self.fs.delete(self.path(*parts), True)

    def rename(self, src: Sequence[str], dst: Sequence[str]) -> None:
        self.fs.mkdirs(self.path(*dst[:-1]))
        if not self.fs.rename(self.path(*src), self.path(*dst)):
            raise CdcflowError(f"could not move {'/'.join(src)} to {'/'.join(dst)} in {self.root}")

    def children(self, *parts: str) -> list[str]:
        p = self.path(*parts)
        if not self.fs.exists(p):
            return []
        names = (str(s.getPath().getName()) for s in self.fs.listStatus(p))
        return sorted(n for n in names if not n.startswith((".", "_")))


@dataclass(frozen=True)
class SourceRecord:
    """A source as the checkpoint remembers it."""

    id: str
    name: str
    path: str
    dialect: str
    replica_name: str
    #: the ``cdcflow.pipeline`` value of its commits (the commit ledger)
    ledger: str
    #: the id of the streaming query that applies it (recorded by its first batch)
    query: str | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2)


class Checkpoint:
    """The checkpoint folder of one pipeline."""

    def __init__(
        self, cfg: PipelineConfig, session: Callable[[], SparkSession] | None = None
    ) -> None:
        """``session``: gives the SparkSession when the checkpoint is not on a local disk."""
        self.cfg = cfg
        self.store = open_store(cfg.checkpoint, session)
        self.run_id = uuid.uuid4().hex
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ ownership

    def pipeline_id(self) -> str:
        """The pipeline's id, written on first run; a checkpoint of another pipeline is
        refused, naming both."""
        found = self.store.read(ID_FILE)
        if found:
            value = found.strip()
            owner = value.rsplit("-", 1)[0]
            if owner != self.cfg.pipeline:
                raise ConfigError(
                    f"checkpoint {self.cfg.checkpoint} belongs to pipeline {owner!r}, not "
                    f"{self.cfg.pipeline!r}: a pipeline reading another's checkpoint would read "
                    "nothing it has not already applied",
                    hint="give this pipeline its own checkpoint folder, or set pipeline: "
                    f"{owner} if it is the same pipeline under a new name",
                )
            return value
        value = f"{self.cfg.pipeline}-{uuid.uuid4().hex[:12]}"
        if not self.store.write(value, ID_FILE, exclusive=True):
            return self.pipeline_id()
        return value

    def acquire(self) -> None:
        """Take the run lock, or refuse when another live run of the pipeline holds it. A lock
        left by a run that died (its process gone on this host, or no heartbeat for a minute)
        is taken over."""
        mine = self._lock_text()
        if self.store.write(mine, LOCK_FILE, exclusive=True):
            self._start_heartbeat()
            return
        held = self._read_lock()
        if held is not None and not self._stale(held):
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(held.get("started", 0)))
            raise PipelineBusy(
                f"pipeline {self.cfg.pipeline!r} is already running (process {held.get('pid')} "
                f"on {held.get('host')}, since {since} UTC): two runs of one pipeline would "
                "commit the same batches",
                hint="wait for that run to end, or stop it; a lock left by a run that was "
                f"killed expires within {int(LOCK_STALE_SECONDS)} s",
            )
        self.store.write(mine, LOCK_FILE)
        time.sleep(0.2)
        again = self._read_lock()
        if again is None or again.get("run") != self.run_id:
            raise PipelineBusy(
                f"pipeline {self.cfg.pipeline!r} was started by another process at the same time",
                hint="run one at a time",
            )
        self._start_heartbeat()

    def release(self) -> None:
        """Give the run lock back (when it is still ours)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        held = self._read_lock()
        if held is not None and held.get("run") == self.run_id:
            self.store.delete(LOCK_FILE)

    def _lock_text(self) -> str:
        now = time.time()
        return json.dumps(
            {
                "run": self.run_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": getattr(self, "_started", now),
                "heartbeat": now,
            }
        )

    def _read_lock(self) -> dict[str, Any] | None:
        text = self.store.read(LOCK_FILE)
        if not text:
            return None
        try:
            found = json.loads(text)
        except json.JSONDecodeError:
            return {}
        return found if isinstance(found, dict) else {}

    @staticmethod
    def _stale(held: dict[str, Any]) -> bool:
        if time.time() - float(held.get("heartbeat", 0) or 0) > LOCK_STALE_SECONDS:
            return True
        if held.get("host") == socket.gethostname():
            try:
                os.kill(int(held.get("pid", 0)), 0)
            except (ProcessLookupError, ValueError):
                return True
            except PermissionError:
                return False
        return False

    def _start_heartbeat(self) -> None:
        self._started = time.time()

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                held = self._read_lock()
                if held is not None and held.get("run") == self.run_id:
                    self.store.write(self._lock_text(), LOCK_FILE)

        self._beat = threading.Thread(target=beat, name="cdcflow-lock", daemon=True)
        self._beat.start()

    # ------------------------------------------------------------------ sources

    def sources(self, pipeline_id: str) -> list[tuple[SourceConfig, SourceRecord]]:
        """Every configured source with its record (created, renamed or migrated as needed)."""
        self._migrate_single_query(pipeline_id)
        known = self._records()
        out: list[tuple[SourceConfig, SourceRecord]] = []
        fresh = not known
        for src in self.cfg.sources:
            record = known.get(src.name)
            if record is None and src.renamed_from and src.renamed_from in known:
                old = known.pop(src.renamed_from)
                record = replace(old, name=src.name, path=src.location, dialect=src.dialect)
                self.store.write(record.to_json(), "sources", record.id, SOURCE_FILE)
            if record is None:
                if src.name in {r.id for r in known.values()}:
                    raise ConfigError(
                        f"source {src.name!r}: a source renamed away from this name still "
                        "owns its checkpoint folder; pick another name",
                    )
                template = src.replica_name or (
                    "{table}" if fresh and len(self.cfg.sources) == 1 else "{source}__{table}"
                )
                names = template.replace("{source}", src.name)
                # a ledger of its own: a source forgotten (its folder deleted) and added back
                # starts a new query whose batch ids begin at 0 again, which the ledger of the
                # earlier one would take for batches already committed
                ledger = f"{pipeline_id}/{src.name}/{uuid.uuid4().hex[:8]}"
                record = SourceRecord(src.name, src.name, src.location, src.dialect, names, ledger)
                self.store.write(record.to_json(), "sources", record.id, SOURCE_FILE)
            else:
                self._check(src, record)
            out.append((src, record))
        return out

    def claim_query(self, record: SourceRecord, query: str) -> SourceRecord:
        """Record what applies a source — a streaming query's id, or :data:`DIRECT` for
        batches given outside a streaming query (its first batch records it) — or refuse
        anything else: a query with a checkpoint of its own numbers its batches from 0 again,
        and the commit ledger would take them for batches already committed."""
        if record.query == query:
            return record
        if record.query is not None:
            raise ConfigError(
                f"source {record.name!r} is applied by {_applier(record.query)}; "
                f"{_applier(query)} would number its batches anew, colliding with the batches "
                "already committed",
                code="QUERY_CHANGED",
                hint="run the query with its first checkpoint location "
                f"({self.query_path(record)} unless it was given another), or apply it as a "
                "new source (another source name)",
            )
        claimed = replace(record, query=query)
        self.store.write(claimed.to_json(), "sources", record.id, SOURCE_FILE)
        return claimed

    def query_id(self, record: SourceRecord) -> str | None:
        """The id of the streaming query checkpointed at :meth:`query_path`, if any."""
        text = self.store.read("sources", record.id, "query", "metadata")
        try:
            found = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None
        return str(found["id"]) if isinstance(found, dict) and "id" in found else None

    def query_path(self, record: SourceRecord) -> str:
        """Spark's checkpoint folder of one source's query."""
        return f"{self.store.root}/sources/{record.id}/query"

    def records(self) -> dict[str, SourceRecord]:
        """The sources the checkpoint remembers, by name (nothing is created)."""
        return self._records()

    def _records(self) -> dict[str, SourceRecord]:
        out: dict[str, SourceRecord] = {}
        for sid in self.store.children("sources"):
            text = self.store.read("sources", sid, SOURCE_FILE)
            if not text:
                continue
            doc = json.loads(text)
            record = SourceRecord(
                **{k: doc[k] for k in SourceRecord.__dataclass_fields__ if k in doc}
            )
            out[record.name] = record
        return out

    def _check(self, src: SourceConfig, record: SourceRecord) -> None:
        wanted = src.replica_name.replace("{source}", record.id) if src.replica_name else None
        if wanted is not None and wanted != record.replica_name:
            raise ConfigError(
                f"source {src.name!r} names its replicas {record.replica_name!r} since its first "
                f"run; replica_name {src.replica_name!r} would start new replicas holding only "
                "the changes from now on",
                hint="to rebuild them under new names from the landing zone, remove the "
                f"source's checkpoint folder {self.store.root}/sources/{record.id} (see "
                "docs/operations.md)",
            )
        if src.dialect != record.dialect and record.dialect != "auto":
            # a dialect can be corrected (files already read stay as they were decoded)
            updated = replace(record, name=src.name, path=src.location, dialect=src.dialect)
            self.store.write(updated.to_json(), "sources", record.id, SOURCE_FILE)

    # ------------------------------------------------------------------ earlier layout

    def _migrate_single_query(self, pipeline_id: str) -> None:
        """Split a checkpoint of one query over every source (``stream/``) into per-source
        checkpoints: source ``i`` keeps its offsets (line ``i`` of each offset file), the
        commits and the file source's log ``sources/i``."""
        if not self.store.exists("stream") or self.store.children("sources"):
            return
        offsets = self.store.children("stream", "offsets")
        files = [n for n in offsets if n.isdigit()]
        n_sources = None
        if files:
            text = self.store.read("stream", "offsets", files[-1]) or ""
            n_sources = len(text.split("\n")) - 2
        if n_sources is not None and n_sources != len(self.cfg.sources):
            raise ConfigError(
                f"checkpoint {self.store.root} holds one query over {n_sources} source(s) (an "
                f"earlier cdcflow); the configuration lists {len(self.cfg.sources)}: it can only "
                "be split per source when the sources are listed as they were",
                hint="run once with the sources as they were, then add or remove sources",
            )
        for i, src in enumerate(self.cfg.sources):
            base = ["sources", src.name, "query"]
            self.store.write(json.dumps({"id": str(uuid.uuid4())}), *base, "metadata")
            for name in files:
                lines = (self.store.read("stream", "offsets", name) or "").split("\n")
                self.store.write("\n".join([*lines[:2], lines[2 + i]]), *base, "offsets", name)
            for name in self.store.children("stream", "commits"):
                if name.isdigit():
                    text = self.store.read("stream", "commits", name) or ""
                    self.store.write(text, *base, "commits", name)
            for name in self.store.children("stream", "sources", str(i)):
                text = self.store.read("stream", "sources", str(i), name) or ""
                self.store.write(text, *base, "sources", "0", name)
            # a sole source keeps the ledger it had, so a batch replayed after the upgrade is
            # still recognised
            ledger = pipeline_id if len(self.cfg.sources) == 1 else f"{pipeline_id}/{src.name}"
            record = SourceRecord(src.name, src.name, src.location, src.dialect, "{table}", ledger)
            self.store.write(record.to_json(), "sources", src.name, SOURCE_FILE)
        self.store.rename(["stream"], ["stream.before-per-source"])
