"""Auto-detection: which registered dialect produced a message."""

from __future__ import annotations

from typing import Any

from cdcflow.dialects import dialect_names, get_dialect
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.model import DialectOptions
from cdcflow.errors import DecodeError
from cdcflow.transports.message import RawMessage

#: A recognition score at or above this says the message carries its dialect's own marks (a
#: schema name, a spec version, its envelope's fields); below it a dialect guesses from the
#: shape alone (an unmarked row beside a key, a flattened row), or does not know the message.
MARKED: float = 0.9


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

    def best(self, msg: RawMessage, doc: Any, above: float = 0.0) -> Dialect | None:
        """The dialect that recognises ``msg`` best with a score over ``above``, else ``None``
        (``doc``: its parsed JSON value or Avro record, ``None`` when it is neither)."""
        best: Dialect | None = None
        for d in self.dialects:
            score = d.score(msg, doc)
            if score > above:
                best, above = d, score
        return best

    def detect(self, msg: RawMessage, doc: Any) -> Dialect:
        """The dialect of ``msg`` or :class:`DecodeError` ``DIALECT_UNDETECTED``."""
        best = self.best(msg, doc)
        if best is None:
            raise DecodeError(
                "no registered dialect recognises this message "
                f"(tried {', '.join(d.name for d in self.dialects)})",
                code="DIALECT_UNDETECTED",
                hint="pass --dialect NAME if you know the producer",
            )
        return best
