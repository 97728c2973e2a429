"""Limits on what one message may hold, enforced once for every dialect.

A message over a limit is rejected with a stable code before any dialect looks at it, so a
hostile or broken producer costs a bounded amount of time and memory and never an exception
other than a coded :class:`~cdcflow.errors.DecodeError`. The defaults are far above what real
producers send; a source that needs more sets them under ``options.limits`` in its
configuration (see ``docs/architecture.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from cdcflow.errors import ConfigError, DecodeError


@dataclass(frozen=True, slots=True)
class Limits:
    """What one message may hold.

    ``max_message_bytes``: size of one message (strings and collections inside it are bounded
    by it) — ``MESSAGE_TOO_LARGE``.
    ``max_depth``: nesting of arrays and objects — ``TOO_DEEP``.
    ``max_number_digits``: digits of one JSON number (integer or decimal) — ``NUMBER_TOO_LARGE``.
    ``max_exponent``: magnitude of a JSON number's exponent (``1e999999999`` written out in full
    would take a gigabyte) — ``NUMBER_TOO_LARGE``.
    ``max_segments``: segment index or count of a split message — ``SEGMENT_OUT_OF_RANGE``.
    """

    max_message_bytes: int = 64 * 1024 * 1024
    max_depth: int = 64
    max_number_digits: int = 100
    max_exponent: int = 400
    max_segments: int = 10_000

    @classmethod
    def from_options(cls, given: Mapping[str, Any] | None) -> Limits:
        """Defaults overridden by a configuration mapping (names as the fields)."""
        if not given:
            return LIMITS
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ConfigError(
                f"unknown limit(s) {unknown}; known limits: {', '.join(sorted(known))}"
            )
        values: dict[str, int] = {}
        for name, value in given.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"limit {name!r} must be a positive integer, got {value!r}")
            values[name] = value
        return replace(LIMITS, **values)


#: The default limits.
LIMITS = Limits()


def check_size(data: bytes, limits: Limits = LIMITS) -> None:
    """``MESSAGE_TOO_LARGE`` when ``data`` is over :attr:`Limits.max_message_bytes`."""
    if len(data) > limits.max_message_bytes:
        raise DecodeError(
            f"message of {len(data)} bytes is over the limit of {limits.max_message_bytes} "
            "bytes (max_message_bytes)",
            code="MESSAGE_TOO_LARGE",
        )


def check_number(text: str, limits: Limits = LIMITS) -> None:
    """``NUMBER_TOO_LARGE`` when a JSON number's digits or exponent are over the limits."""
    digits = sum(c.isdigit() for c in text.split("e")[0].split("E")[0])
    if digits > limits.max_number_digits:
        raise DecodeError(
            f"a number of {digits} digits is over the limit of {limits.max_number_digits} "
            "(max_number_digits)",
            code="NUMBER_TOO_LARGE",
        )
    for mark in ("e", "E"):
        if mark in text:
            exponent = text.rsplit(mark, 1)[1].lstrip("+-").lstrip("0")
            if len(exponent) > 9 or int(exponent or "0") > limits.max_exponent:
                raise DecodeError(
                    f"the number {text[:40]!r} has an exponent over the limit of "
                    f"{limits.max_exponent} (max_exponent)",
                    code="NUMBER_TOO_LARGE",
                )


def may_be_deep(data: bytes, limits: Limits = LIMITS) -> bool:
    """Whether ``data`` has enough brackets to nest deeper than the limit (a cheap test; only
    then is the parsed value walked)."""
    if len(data) <= limits.max_depth:
        return False
    return data.count(b"[") + data.count(b"{") > limits.max_depth


def check_depth(value: Any, limits: Limits = LIMITS) -> None:
    """``TOO_DEEP`` when arrays and objects in ``value`` nest deeper than the limit (walked
    without recursion)."""
    limit = limits.max_depth
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise DecodeError(
                f"arrays and objects nest deeper than the limit of {limit} levels (max_depth)",
                code="TOO_DEEP",
            )
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def check_document(data: bytes, value: Any, limits: Limits = LIMITS) -> None:
    """Every limit a parsed JSON document must keep (size and depth; numbers are checked as
    they are parsed)."""
    check_size(data, limits)
    if may_be_deep(data, limits):
        check_depth(value, limits)
