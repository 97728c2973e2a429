"""Split messages: deciding when a group of segments is a whole message.

Some producers split one logical message into segments (SQL Server change event streaming
splits an event over the stream group's ``max_message_size_kb``). A dialect's decoder returns a
:class:`~cdcflow.dialects.model.Segment` for each; this module decides, for the segments of one
group seen so far, whether the message is complete, still pending, impossible (segments that
contradict each other or an index out of range) or expired (still incomplete after the
configured wait). The same rules serve ``cdcflow inspect`` (all inputs at once, in memory) and
the pipeline (segments kept in an Iceberg table between batches and runs).

Numbering, as producers write it:

* ``index`` + ``final``: the last segment says it is final. Indexes start at 0 (the CES
  documentation) or at 1 (captured CES output numbers a lone segment 1). Segments 1..n without
  0 are either a whole one-based message or a zero-based one still missing segment 0; the
  caller's ``check`` (does it reassemble into a readable message?) tells them apart.
* ``index`` + ``total`` (the CES preview shape ``splitindex``/``splittotalcnt``): zero-based
  unless the index ``total`` itself is present.

Duplicated segments (same index) are tolerated: the first one seen is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cdcflow.dialects.model import Segment
from cdcflow.transports.limits import LIMITS

#: The code of a segment of a message already closed as incomplete or invalid.
LATE = "SEGMENT_LATE"

Status = Literal["complete", "pending", "invalid", "expired"]


@dataclass(frozen=True, slots=True)
class Piece:
    """A segment with where and when it was seen."""

    index: int
    final: bool | None
    total: int | None
    raw: bytes
    origin: str | None = None
    offset: int = 0
    line: int | None = None
    first_seen: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """What a group of segments amounts to. ``pieces``: the distinct segments in index order."""

    status: Status
    pieces: tuple[Piece, ...]
    code: str | None = None
    reason: str | None = None


def _distinct(pieces: Iterable[Piece]) -> list[Piece]:
    seen: dict[int, Piece] = {}
    for p in pieces:
        seen.setdefault(p.index, p)
    return [seen[i] for i in sorted(seen)]


def _span(indexes: Sequence[int]) -> str:
    return ", ".join(map(str, indexes)) if len(indexes) <= 12 else f"{len(indexes)} segments"


def assess(
    group: str,
    pieces: Iterable[Piece],
    now: float | None = None,
    wait: float | None = None,
    check: Callable[[Sequence[Piece]], bool] | None = None,
    limit: int = LIMITS.max_segments,
) -> Verdict:
    """The verdict on one group. ``now``/``wait`` (seconds) expire an incomplete group whose
    first segment was seen more than ``wait`` seconds before ``now``; without them an
    incomplete group is pending. ``check`` decides whether segments numbered 1..n (no 0) are a
    whole one-based message; without it they are. An index or count over ``limit``
    (:attr:`~cdcflow.transports.limits.Limits.max_segments`) is invalid."""
    ordered = _distinct(pieces)
    got = tuple(ordered)
    indexes = [p.index for p in ordered]
    if any(i < 0 for i in indexes):
        return Verdict(
            "invalid", got, "SEGMENT_OUT_OF_RANGE", f"message {group!r}: negative segment index"
        )
    if any(n > limit for n in (*indexes, *(p.total or 0 for p in ordered))):
        return Verdict(
            "invalid",
            got,
            "SEGMENT_OUT_OF_RANGE",
            f"message {group!r}: a segment index or count is over the limit of {limit} "
            "segments (max_segments)",
        )
    totals = {p.total for p in ordered if p.total is not None and p.total > 0}
    finals = sorted({p.index for p in ordered if p.final})
    if len(totals) > 1:
        return Verdict(
            "invalid",
            got,
            "SEGMENT_CONFLICT",
            f"segments of message {group!r} disagree on the segment count: {sorted(totals)}",
        )
    if len(finals) > 1:
        return Verdict(
            "invalid",
            got,
            "SEGMENT_CONFLICT",
            f"message {group!r} has more than one final segment: {finals}",
        )
    base = 0 if 0 in indexes else 1
    expected: list[int] | None = None
    if totals:
        total = next(iter(totals))
        over = [i for i in indexes if i > total]
        if over or (0 in indexes and total in indexes):
            return Verdict(
                "invalid",
                got,
                "SEGMENT_OUT_OF_RANGE",
                f"message {group!r} has {total} segment(s) but carries index(es) "
                f"{over or [0, total]}",
            )
        # zero-based unless index `total` itself is present (one-based)
        base = 1 if total in indexes else 0
        expected = list(range(base, base + total))
        if finals and finals[0] != expected[-1] and (0 in indexes or total in indexes):
            return Verdict(
                "invalid",
                got,
                "SEGMENT_CONFLICT",
                f"message {group!r}: segment {finals[0]} is marked final but the count is {total}",
            )
    elif finals:
        last = finals[0]
        beyond = [i for i in indexes if i > last]
        if beyond:
            return Verdict(
                "invalid",
                got,
                "SEGMENT_OUT_OF_RANGE",
                f"message {group!r}: segment(s) {beyond} after the final segment {last}",
            )
        expected = list(range(base, last + 1))
        if base == 1 and indexes == expected and check is not None and not check(ordered):
            expected = list(range(0, last + 1))  # zero-based, segment 0 still to come
    if expected is not None and indexes == expected:
        return Verdict("complete", got)
    if now is not None and wait is not None and ordered:
        oldest = min(p.first_seen for p in ordered)
        if now - oldest > wait:
            if expected is not None:
                missing = [i for i in expected if i not in indexes]
                what = f"segment(s) {_span(missing)} missing"
            else:
                what = "the final segment never arrived"
            return Verdict(
                "expired",
                got,
                "SEGMENT_MISSING",
                f"split message {group!r} incomplete after waiting {wait:g}s: {what} "
                f"(have {_span(indexes)})",
            )
    return Verdict("pending", got)


@dataclass
class SegmentBuffer:
    """Segments gathered in memory, per (dialect, group): for ``cdcflow inspect`` and the
    receiver, which see all their input at once."""

    groups: dict[tuple[str, str], list[Piece]] = field(default_factory=dict)

    def add(self, seg: Segment, origin: str | None, offset: int, line: int | None) -> None:
        """Remember one segment."""
        piece = Piece(seg.index, seg.final, seg.total, seg.raw, origin, offset, line)
        self.groups.setdefault((seg.dialect, seg.group), []).append(piece)

    def verdicts(
        self, check: Callable[[str, Sequence[Piece]], bool] | None = None
    ) -> Iterable[tuple[str, str, Verdict]]:
        """(dialect, group, verdict) of every group, in first-seen order; nothing is expired,
        so an incomplete group is ``pending``. ``check(dialect, pieces)``: see :func:`assess`."""
        for (dialect, group), pieces in self.groups.items():
            fits = None if check is None else (lambda ps, d=dialect: check(d, ps))
            yield dialect, group, assess(group, pieces, check=fits)
