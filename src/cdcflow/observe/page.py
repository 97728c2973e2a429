"""The status page: one self-contained HTML document (no script, no external asset) that
reloads itself, showing a :class:`~cdcflow.observe.status.Status` — readiness, the sources,
each replica's freshness, rows, lag, last batch, dead letters and files, and two plots of the
last hour (seconds per batch, events per second) drawn as inline SVG."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from html import escape

from cdcflow.observe.status import (
    WINDOW_SECONDS,
    BatchPoint,
    Status,
    duration,
    lag_text,
)

#: Seconds between the page's own reloads.
REFRESH_SECONDS = 10
_WIDTH, _HEIGHT, _PAD = 500, 150, 34

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2733;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#5b6775}.badge{display:inline-block;padding:2px 10px;border-radius:10px;
color:#fff;font-weight:600}.ready{background:#1f8a4c}.unready{background:#c0392b}
.offline{background:#7f8c8d}table{border-collapse:collapse;min-width:60%}
th,td{padding:4px 10px;border-bottom:1px solid #e3e7ec;text-align:left;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f6f8}
.plots{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0}
figcaption{color:#5b6775;margin-bottom:4px}svg{background:#fafbfc;border:1px solid #e3e7ec}
.warn{color:#c0392b;font-weight:600}
"""


def _time(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(status: Status, at: float | None) -> str:
    return "" if at is None else f"{duration(max(0.0, status.at - at))} ago"


def _num(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _bytes(value: int | None) -> str:
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return ""


def _table(headers: Sequence[str], rows: Sequence[Sequence[tuple[str, bool]]], name: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if n else ''}>{escape(text)}</td>" for text, n in row)
        + "</tr>"
        for row in rows
    )
    if not rows:
        body = f'<tr><td colspan="{len(headers)}">none yet</td></tr>'
    return f'<table id="{name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


#: One colour per source in the plots.
_COLOURS = ("#2f6fb0", "#d9822b", "#3a9a5b", "#8e5bb5", "#c0392b", "#6b7b8c")


def plot(
    points: Sequence[BatchPoint],
    value: Callable[[BatchPoint], float],
    now: float,
    name: str,
    unit: str,
    sources: Sequence[str] = (),
) -> str:
    """An SVG plot of one figure per batch over the last hour: a point per batch, a colour
    and a line per source (in the order of ``sources``), the highest value on the axis."""
    left, top = _PAD + 10, 10
    width, height = _WIDTH - left - 10, _HEIGHT - top - _PAD
    start = now - WINDOW_SECONDS
    peak = max((value(p) for p in points), default=0.0) or 1.0
    order = list(sources) + sorted({p.source for p in points} - set(sources))
    lines, marks = [], []
    for i, source in enumerate(order):
        colour = _COLOURS[i % len(_COLOURS)]
        mine = [p for p in points if p.source == source]
        xy = []
        for p in mine:
            v = value(p)
            x = left + width * min(1.0, max(0.0, (p.at - start) / WINDOW_SECONDS))
            y = top + height * (1 - v / peak)
            xy.append(f"{x:.1f},{y:.1f}")
            marks.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
                f"<title>{escape(p.source)} batch {p.batch_id}: {v:,.2f} {escape(unit)}</title>"
                "</circle>"
            )
        if len(xy) > 1:
            lines.append(
                f'<polyline points="{" ".join(xy)}" fill="none" stroke="{colour}" '
                'stroke-opacity="0.45" stroke-width="1"/>'
            )
    axis = (
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" '
        'stroke="#5b6775"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="#5b6775"/>'
        f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" font-size="10">'
        f"{peak:,.1f}</text>"
        f'<text x="{left - 4}" y="{top + height}" text-anchor="end" font-size="10">0</text>'
        f'<text x="{left}" y="{_HEIGHT - 12}" font-size="10">−60 min</text>'
        f'<text x="{left + width}" y="{_HEIGHT - 12}" text-anchor="end" font-size="10">now</text>'
    )
    legend = "".join(
        f'<text x="{left + 40 + 90 * i}" y="{top + 10}" font-size="10" '
        f'fill="{_COLOURS[i % len(_COLOURS)]}">● {escape(source)}</text>'
        for i, source in enumerate(order)
        if len(order) > 1
    )
    return (
        f'<svg id="{name}" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" '
        f'height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'data-points="{len(points)}">{axis}{"".join(lines)}{"".join(marks)}{legend}</svg>'
    )


def page(status: Status) -> str:
    """The status page of ``status`` (HTML text)."""
    if status.ready is None:
        badge = '<span class="badge offline" id="ready">not running</span>'
    elif status.ready:
        badge = '<span class="badge ready" id="ready">ready</span>'
    else:
        badge = '<span class="badge unready" id="ready">not ready</span>'
    by_source = {s.source: s for s in status.sources}
    sources = _table(
        ["source", "reads", "last batch", "batches", "events", "lag"],
        [
            [
                (s.source, False),
                (s.reads, False),
                (_ago(status, s.last_batch), False),
                (_num(s.batches), True),
                (_num(s.events), True),
                (lag_text(s), False),
            ]
            for s in status.sources
        ],
        "sources",
    )
    tables = _table(
        [
            "table",
            "freshness",
            "rows",
            "lag",
            "last batch",
            "dead letters",
            "data files",
            "delete files",
            "snapshots",
            "size",
        ],
        [
            [
                (t.table, False),
                (duration(t.freshness(status.at)), True),
                (_num(t.rows), True),
                (lag_text(by_source[t.source]) if t.source in by_source else "", False),
                (_ago(status, t.last_batch), False),
                (_num(t.dead_letters), True),
                (_num(t.data_files), True),
                (_num(t.delete_files), True),
                (_num(t.snapshots), True),
                (_bytes(t.bytes), True),
            ]
            for t in status.tables
        ],
        "tables",
    )
    recent = list(status.recent)
    names = [s.source for s in status.sources]
    seconds = plot(recent, lambda p: p.seconds, status.at, "batch-seconds", "s", names)
    rates = plot(
        recent,
        lambda p: p.events / p.seconds if p.seconds > 0 else 0.0,
        status.at,
        "events-per-second",
        "events/s",
        names,
    )
    dead = (
        f' · <span class="warn" id="dead-letters">{status.dead_letters:,} dead letters</span>'
        if status.dead_letters
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>cdcflow · {escape(status.pipeline)}</title><style>{_STYLE}</style></head>
<body>
<h1>cdcflow pipeline <span id="pipeline">{escape(status.pipeline)}</span> {badge}</h1>
<div class="meta">namespace {escape(status.namespace)} · {_time(status.at)}{dead}</div>
<h2>Sources</h2>{sources}
<h2>Replicas</h2>{tables}
<h2>The last hour</h2>
<div class="plots">
<figure><figcaption>seconds per batch ({len(recent)} batches)</figcaption>{seconds}</figure>
<figure><figcaption>events per second</figcaption>{rates}</figure>
</div>
</body></html>
"""
