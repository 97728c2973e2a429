"""One harness for the dialect tests: decode a document, a file's bytes or files with a dialect
and its options, the codes of what was rejected, ``cdcflow inspect`` on a file, and decoded
events applied through the public oracle (:mod:`cdcflow.simulation.oracle`)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from cdcflow.decode.decoder import Decoder
from cdcflow.dialects.model import DialectOptions, Rejection
from cdcflow.event import MARKER_OPERATIONS, ROW_OPERATIONS
from cdcflow.simulation import oracle
from cdcflow.simulation.workload import Change, TableDef
from cdcflow.transports.message import RawMessage

#: Events and rejections.
Decoded = tuple[list[dict[str, Any]], list[Rejection]]

_FIELDS = ("table_keys", "column_types", "extra")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def options(**given: Any) -> DialectOptions:
    """Decoder options from keywords: ``table_keys``, ``column_types`` and ``extra`` (a
    mapping of dialect options) as such, any other name a dialect option."""
    fields = {k: given.pop(k) for k in _FIELDS if k in given}
    fields["extra"] = {**fields.get("extra", {}), **given}
    return DialectOptions(**fields)


def inspect(tmp_path: Path, name: str, data: bytes, *args: str) -> tuple[int, list[bytes], str]:
    """Run ``cdcflow inspect`` of this repository on one file (relative name, so delivery
    sequences are stable): exit status, output lines, standard error."""
    (tmp_path / name).write_bytes(data)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "cdcflow", "inspect", *args, name],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        env=env,
    )
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.decode()


def _bytes(doc: Any) -> bytes:
    return doc if isinstance(doc, bytes) else orjson.dumps(doc)


class DialectHarness:
    """Decoding with one dialect. Unless a call names its own origin, ``origin`` names a
    document (a message, or a file written as its JSON) and ``file_origin`` a file's bytes;
    keywords of a call are :func:`options`."""

    def __init__(self, dialect: str, origin: str = "m.json", file_origin: str = "m.jsonl") -> None:
        self.dialect = dialect
        self.origin = origin
        self.file_origin = file_origin

    def decode(self, doc: Any, origin: str | None = None, **given: Any) -> Decoded:
        """One message (bytes, or a document written as JSON), not framed."""
        msg = RawMessage(_bytes(doc), origin=origin or self.origin, offset=0, line=1)
        out = Decoder(self.dialect, options(**given)).decode(msg)
        return out.events, out.rejections

    def codes(self, doc: Any, **given: Any) -> list[str]:
        """The rejection codes of one message that decodes to no event."""
        events, rejections = self.decode(doc, **given)
        assert not events, events[:2]
        return [r.code for r in rejections]

    def decode_file(
        self,
        source: Path | Any,
        origin: str | None = None,
        dialect: str | None = None,
        **given: Any,
    ) -> Decoded:
        """A file's messages as its transport frames them: a path (named by itself), bytes, or
        a document written as JSON; ``dialect`` (e.g. ``"auto"``) replaces the harness's."""
        if isinstance(source, Path):
            origin, data = origin or str(source), source.read_bytes()
        elif isinstance(source, bytes):
            origin, data = origin or self.file_origin, source
        else:
            origin, data = origin or self.origin, orjson.dumps(source)
        return self.decode_files([(origin, data)], dialect, **given)

    def decode_files(
        self,
        files: Iterable[Path | tuple[str, bytes]],
        dialect: str | None = None,
        decoder_options: DialectOptions | None = None,
        **given: Any,
    ) -> Decoded:
        """Files decoded in turn by one decoder (paths, or names with their bytes)."""
        decoder = Decoder(dialect or self.dialect, decoder_options or options(**given))
        events: list[dict[str, Any]] = []
        rejections: list[Rejection] = []
        for f in files:
            name, data = (str(f), f.read_bytes()) if isinstance(f, Path) else f
            for out in decoder.decode_file(data, name):
                events.extend(out.events)
                rejections.extend(out.rejections)
        return events, rejections

    def events(
        self,
        files: Iterable[Path | tuple[str, bytes]],
        dialect: str | None = None,
        decoder_options: DialectOptions | None = None,
        **given: Any,
    ) -> list[dict[str, Any]]:
        """The events of files that must decode without a rejection (see :meth:`decode_files`)."""
        events, rejections = self.decode_files(files, dialect, decoder_options, **given)
        assert not rejections, rejections[:2]
        return events


def replay(events: Iterable[dict[str, Any]], tables: Mapping[str, TableDef]) -> oracle.Tables:
    """Decoded events applied as the merge sink applies them, by the public oracle: in sequence
    order (the later delivered wins a tie), the newest event of a key decides its row, a
    partial event updates the columns it carries, a ``TRUNCATE`` empties its table. Event
    tables are matched to ``tables`` ignoring case.

    The oracle applies logical changes, each once; decoded events come redelivered, overlap
    a snapshot and carry partial rows. Reading them as the engine does is the piece the
    public oracle lacks, so it is kept here, as small as it can be: events become the
    changes they make, and the oracle applies those."""
    names = {t.lower(): t for t in tables}
    ordered = sorted(enumerate(events), key=lambda ne: (ne[1]["sequence"], ne[0]))
    current: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in tables}
    changes: list[Change] = []
    for n, e in ordered:
        op = e["operation"]
        if op in MARKER_OPERATIONS:
            continue
        assert op in ROW_OPERATIONS or op == "TRUNCATE", f"cannot replay {op}"
        table = names[e["table"].lower()]
        rows = current[table]
        if op == "TRUNCATE":
            rows.clear()
            changes.append(_change(n, e, "truncate", table, {}, None, None))
            continue
        key = {c: e["key"][c] for c in tables[table].key}
        kt = tuple(key.values())
        old = rows.get(kt)
        if op == "DELETE":
            if old is not None:
                del rows[kt]
                changes.append(_change(n, e, "delete", table, key, {**old, **key}, None))
            continue
        new = {**old, **e["after"]} if e["partial"] and old is not None else dict(e["after"])
        rows[kt] = new
        before = None if old is None else {**old, **key}
        changes.append(
            _change(n, e, "insert" if old is None else "update", table, key, before, new)
        )
    return oracle.apply(changes, dict(tables))


def _change(
    n: int,
    e: dict[str, Any],
    kind: str,
    table: str,
    key: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> Change:
    txid = str(e.get("transaction_id") or "")
    return Change(kind, table, key, before, after, txid, 0, n, _EPOCH)
