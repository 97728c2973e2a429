"""``cdcflow inspect``: decode messages without Spark and print canonical events."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cdcflow.cli.main import echo_err, resolve_paths
from cdcflow.decode.decoder import Decoder
from cdcflow.decode.segments import SegmentBuffer
from cdcflow.dialects import declared_type_problems, dialect_names
from cdcflow.dialects.model import DialectOptions
from cdcflow.event import dumps


def _origin_text(
    origin: str | None, line: int | None, offset: int, index: int | None, item: int | None
) -> str:
    where = origin or "<stdin>"
    if index is not None:
        where += f" element {index}"
    elif line is not None:
        where += f":{line}"
    else:
        where += f" @{offset}"
    if item is not None:
        where += f" item {item}"
    return where


def _parse_keys(values: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for v in values:
        table, sep, cols = v.partition("=")
        if not sep or not table or not cols:
            raise click.BadParameter(f"expected TABLE=COL[,COL...], got {v!r}", param_hint="--key")
        out[table] = tuple(c.strip() for c in cols.split(",") if c.strip())
    return out


def _parse_types(values: tuple[str, ...]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for v in values:
        target, sep, typ = v.partition("=")
        table, dot, col = target.rpartition(".")
        if not sep or not dot or not typ:
            raise click.BadParameter(f"expected TABLE.COLUMN=TYPE, got {v!r}", param_hint="--type")
        out.setdefault(table, {})[col] = typ
    return out


@click.command("inspect")
@click.argument("paths", nargs=-1)
@click.option(
    "--dialect",
    "dialect",
    default="auto",
    show_default=True,
    help="Dialect of the messages, or auto to detect per message. Known: "
    + ", ".join(dialect_names())
    + ".",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="TABLE=COL[,COL]",
    help="Key columns of a table, for producers that send no key names.",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TABLE.COLUMN=TYPE",
    help="Declared column type (native, e.g. numeric(10,2), or canonical).",
)
def inspect_cmd(
    paths: tuple[str, ...], dialect: str, keys: tuple[str, ...], types: tuple[str, ...]
) -> None:
    """Decode CDC messages (files, directories or - for stdin) and print one canonical event
    per line as JSON. Messages that cannot be decoded are reported on stderr as
    [CODE] message with their file and line; the exit status is then 1. Segments of split
    messages are reassembled across all the inputs; their events are printed last. Events
    whose key columns the message does not name are printed with their key values in
    metadata.key_values, and one warning per table says how to name them (--key). Messages
    that carry no change on purpose (Kafka tombstones, key messages, heartbeats) are counted
    on stderr."""
    declared = _parse_types(types)
    problems = declared_type_problems(dialect, declared)
    if problems:
        raise click.BadParameter("; ".join(problems), param_hint="--type")
    options = DialectOptions(table_keys=_parse_keys(keys), column_types=declared)
    decoder = Decoder(dialect, options)
    failures = 0
    out = sys.stdout.buffer
    segments = SegmentBuffer()
    unnamed: dict[str, int] = {}
    skipped: dict[str, int] = {}

    def emit(ev: dict[str, Any]) -> None:
        out.write(dumps(ev) + b"\n")
        if ev.get("key") is None and "key_values" in (ev.get("metadata") or {}):
            table = ".".join(p for p in (ev.get("schema"), ev.get("table")) if p)
            unnamed[table] = unnamed.get(table, 0) + 1

    for path in resolve_paths(paths):
        data = sys.stdin.buffer.read() if path is None else Path(path).read_bytes()
        origin = None if path is None else str(path)
        for outcome in decoder.decode_file(data, origin):
            m = outcome.message
            for ev in outcome.events:
                emit(ev)
            for rej in outcome.rejections:
                failures += 1
                where = _origin_text(origin, m.line, m.offset, m.index, rej.item)
                echo_err(f"[{rej.code}] {rej.message} ({where})")
            for seg in outcome.segments:
                offset = m.offset if m.index is None else m.index
                segments.add(seg, origin, offset, m.line)
            for s in outcome.skipped:
                skipped[s.why] = skipped.get(s.why, 0) + 1
    for name, group, verdict in segments.verdicts(decoder.reassembles):
        first = verdict.pieces[0]
        where = _origin_text(first.origin, first.line, first.offset, None, None)
        if verdict.status == "complete":
            outcome = decoder.decode_segments(
                name, [p.raw for p in verdict.pieces], first.origin, first.offset, first.line
            )
            for ev in outcome.events:
                emit(ev)
            for rej in outcome.rejections:
                failures += 1
                echo_err(f"[{rej.code}] {rej.message} (split message from {where})")
            for s in outcome.skipped:
                skipped[s.why] = skipped.get(s.why, 0) + 1
            continue
        failures += 1
        if verdict.status == "pending":
            have = ", ".join(str(p.index) for p in verdict.pieces)
            echo_err(
                f"[SEGMENT_MISSING] split message {group!r} is incomplete in this input "
                f"(have segment(s) {have}) ({where})"
            )
        else:
            echo_err(f"[{verdict.code}] {verdict.reason} ({where})")
    out.flush()
    if skipped:
        counts = ", ".join(f"{why}={n}" for why, n in sorted(skipped.items()))
        echo_err(f"skipped messages that carry no change: {counts}")
    for table, n in unnamed.items():
        echo_err(
            f"warning: {n} event(s) of table {table!r} carry key values without column names "
            f"(metadata.key_values, in primary-key order); name the key columns with "
            f"--key {table.rsplit('.', 1)[-1]}=COL[,COL...]"
        )
    if failures:
        echo_err(f"{failures} message(s) could not be decoded")
        raise click.exceptions.Exit(1)
