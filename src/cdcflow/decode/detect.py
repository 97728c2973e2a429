"""Auto-detection: which registered dialect produced a message."""

from __future__ import annotations

from typing import Any

from cdcflow.dialects import dialect_names, get_dialect
from cdcflow.dialects.base import Dialect, DialectOptions
from cdcflow.errors import DecodeError
from cdcflow.transports.message import RawMessage


class AutoDetector:
    """Decides, message by message, which registered dialect produced it.

    Each dialect contributes its own recogniser; the highest score above zero wins, ties broken
    by registry order. One instance keeps one decoder per dialect.
    """

    def __init__(
        self,
        options: DialectOptions | None = None,
        names: list[str] | None = None,
        *,
        wire: bool = False,
    ) -> None:
        self.dialects = [get_dialect(n, options, wire=wire) for n in (names or dialect_names())]

    def detect(self, msg: RawMessage, doc: Any) -> Dialect:
        """The dialect of ``msg`` or :class:`DecodeError` ``DIALECT_UNDETECTED``."""
        best: Dialect | None = None
        best_score = 0.0
        for d in self.dialects:
            score = d.score(msg, doc)
            if score > best_score:
                best, best_score = d, score
        if best is None:
            raise DecodeError(
                "no registered dialect recognises this message "
                f"(tried {', '.join(d.name for d in self.dialects)})",
                code="DIALECT_UNDETECTED",
                hint="pass --dialect NAME if you know the producer",
            )
        return best
