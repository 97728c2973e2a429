"""Plain helpers more than one dialect reads its messages with: instants counted from the epoch,
binary columns written as hex text, the types of the columns an event carries. Each fails with
a coded :class:`~cdcflow.errors.DecodeError`, as :meth:`~cdcflow.dialects.base.Dialect.fail`
makes them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from cdcflow.errors import DecodeError

#: Units an epoch count is read in → counts per second.
_PER_SECOND: dict[str, int] = {"ms": 1_000, "ns": 1_000_000_000}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def epoch_instant(count: int, unit: str, what: str, code: str = "BAD_TIMESTAMP") -> dt.datetime:
    """The UTC instant ``count`` ``unit`` (``ms`` or ``ns``) after the epoch, read exactly (no
    float) to the microsecond; ``code`` naming ``what`` when it is not an instant a timestamp
    holds (years 1 to 9999)."""
    try:
        return _EPOCH + dt.timedelta(microseconds=count * 1_000_000 // _PER_SECOND[unit])
    except OverflowError:
        text = str(count)
        shown = text if len(text) <= 24 else f"<{len(text.lstrip('-'))} digits>"
        raise DecodeError(f"{what} {shown} {unit} is out of range", code=code) from None


def hex_bytes(col: str, text: str) -> bytes:
    """A binary column's value the message writes as hex text (its prefix, ``0x`` or ``\\x``,
    already cut off); ``BAD_VALUE`` naming the column when it is not hex."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise DecodeError(
            f"column {col!r} (binary): not hex text: {text[:40]!r}", code="BAD_VALUE"
        ) from None


def present_types(types: Mapping[str, str], *images: Mapping[str, Any] | None) -> dict[str, str]:
    """The types of the columns present in any of the images."""
    return {c: t for c, t in types.items() if any(i is not None and c in i for i in images)}
