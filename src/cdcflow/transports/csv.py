"""CSV files: one message per non-empty row."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from cdcflow.transports.message import CsvRow, Framed, RawMessage, Unreadable


def rows(data: bytes, origin: str | None) -> Iterator[Framed]:
    """Rows of a UTF-8 CSV file as messages (``offset`` = the row's byte offset, ``line`` its
    number); each carries the file's first row, which some producers write as a header."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield Unreadable(
            "BAD_UTF8",
            f"CSV file is not UTF-8 (byte 0x{data[e.start]:02x} at {e.start})",
            data,
            origin,
        )
        return
    try:
        parsed = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        yield Unreadable("BAD_CSV", f"CSV file cannot be read: {e}", data, origin)
        return
    first = tuple(parsed[0]) if parsed else ()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))
    offset = 0
    found = False
    for n, row in enumerate(parsed):
        if not row or all(not c for c in row):
            continue
        offset = starts[n] if n < len(starts) else offset
        yield RawMessage(
            data=",".join(row).encode(),
            origin=origin,
            offset=offset,
            line=n + 1,
            form="csv",
            csv=CsvRow(tuple(row), first, n),
        )
        found = True
    if not found:
        code, what = (
            ("EMPTY_FILE", "no row") if not text.strip() else ("BAD_CSV", "no readable row")
        )
        yield Unreadable(code, f"the CSV file holds {what}", data, origin)
