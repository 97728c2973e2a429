"""The order-preserving ``sequence`` encoding.

A canonical event's ``sequence`` is a string whose byte order equals the source's commit order.
Each dialect builds it from a tuple of integers and strings (an LSN pair, an HLC, sort keys...)
with :func:`encode`; nothing ever compares native positions as raw text.

Encoding, element by element, each element followed by the terminator ``!`` (0x21), the lowest
character used, so a tuple sorts before any longer tuple it is a prefix of:

========================  =====================================================================
element                   encoding
========================  =====================================================================
``None``                  ``#``
integer ``n >= 0``        ``p`` + number of decimal digits (2 digits) + the digits: 42 → ``p0242``
integer ``n < 0``         ``n`` + (99 - digit count, 2 digits) + each digit as ``9 - d``
string                    ``s`` + the text; characters up to ``"`` (0x22) are escaped as ``"``
                          followed by ``chr(0x23 + code)`` so the terminator stays the lowest
========================  =====================================================================

So ``None`` < negative integers < non-negative integers < strings, integers compare as numbers
(up to 99 digits: a longer one is :class:`OutOfRange`) and strings compare by code point, which
is UTF-8 byte order — the order Spark uses for strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Element = int | str | None

_TERM = "!"
_ESC = '"'
_MAX_DIGITS = 99
#: The integers an element can be: ``-LIMIT < n < LIMIT`` (up to 99 decimal digits).
LIMIT = 10**_MAX_DIGITS


class OutOfRange(ValueError):
    """An integer element with more digits than the encoding holds; ``index`` is its place
    in the tuple, ``digits`` its number of digits (``None``: thousands)."""

    def __init__(self, index: int, digits: int | None) -> None:
        super().__init__(index, digits)
        self.index = index
        self.digits = digits

    def __str__(self) -> str:
        size = f"a {self.digits}-digit integer" if self.digits else "an integer of 4000+ digits"
        return f"{size} is beyond what a sequence orders (up to {_MAX_DIGITS} digits)"


def _encode_int(n: int, index: int) -> str:
    # compared with LIMIT first: str() of a huge integer is slow, and refused past 4300 digits
    if not -LIMIT < n < LIMIT:
        raise OutOfRange(index, _digits(n))
    if n >= 0:
        digits = str(n)
        return f"p{len(digits):02d}{digits}"
    digits = str(-n)
    flipped = digits.translate(_FLIP)
    return f"n{_MAX_DIGITS - len(digits):02d}{flipped}"


def _digits(n: int) -> int | None:
    """Decimal digits of ``|n|`` (``None`` past what ``str`` converts quickly)."""
    return len(str(abs(n))) if n.bit_length() < 13_300 else None


_FLIP = str.maketrans("0123456789", "9876543210")


def _encode_str(s: str) -> str:
    if all(c > _ESC for c in s):
        return "s" + s
    out = ["s"]
    for c in s:
        if c <= _ESC:
            out.append(_ESC + chr(0x23 + ord(c)))
        else:
            out.append(c)
    return "".join(out)


def encode(parts: Iterable[Element]) -> str:
    """Encode a tuple of integers, strings and ``None`` as an order-preserving string
    (:class:`OutOfRange` for an integer of more than 99 digits)."""
    out: list[str] = []
    for i, p in enumerate(parts):
        if p is None:
            out.append("#")
        elif isinstance(p, bool):
            raise TypeError("booleans are not sequence elements; use 0/1")
        elif isinstance(p, int):
            out.append(_encode_int(p, i))
        elif isinstance(p, str):
            out.append(_encode_str(p))
        else:
            raise TypeError(f"sequence elements are int, str or None, not {type(p).__name__}")
        out.append(_TERM)
    return "".join(out)


def decode(seq: str) -> tuple[Element, ...]:
    """Invert :func:`encode` (for display and tests)."""
    parts: list[Element] = []
    i = 0
    n = len(seq)
    while i < n:
        tag = seq[i]
        if tag == "#":
            parts.append(None)
            i += 1
        elif tag in "pn":
            length = int(seq[i + 1 : i + 3])
            if tag == "p":
                parts.append(int(seq[i + 3 : i + 3 + length]))
                i += 3 + length
            else:
                length = _MAX_DIGITS - length
                parts.append(-int(seq[i + 3 : i + 3 + length].translate(_FLIP)))
                i += 3 + length
        elif tag == "s":
            i += 1
            chars: list[str] = []
            while seq[i] != _TERM:
                if seq[i] == _ESC:
                    chars.append(chr(ord(seq[i + 1]) - 0x23))
                    i += 2
                else:
                    chars.append(seq[i])
                    i += 1
            parts.append("".join(chars))
        else:
            raise ValueError(f"not an encoded sequence: {seq!r}")
        if i >= n or seq[i] != _TERM:
            raise ValueError(f"not an encoded sequence: {seq!r}")
        i += 1
    return tuple(parts)


def delivery_sequence(origin: str, offset: int, item: int = 0) -> str:
    """Fallback order for producers that give none: (origin name, offset, item in message).

    Marked by the caller in the event's metadata (``sequence_source: delivery``). Files landed by
    ``cdcflow serve`` carry time-ordered names, so name order is delivery order.
    """
    return encode(("~delivery", origin, offset, item))


def compare_tuples(a: Sequence[Element], b: Sequence[Element]) -> int:
    """Reference order of tuples that :func:`encode` preserves (for tests): -1, 0 or 1."""
    for x, y in zip(a, b, strict=False):
        kx, ky = _rank(x), _rank(y)
        if kx != ky:
            return -1 if kx < ky else 1
        if x != y:
            return -1 if x < y else 1  # type: ignore[operator]
    return (len(a) > len(b)) - (len(a) < len(b))


def _rank(x: Element) -> int:
    if x is None:
        return 0
    if isinstance(x, int):
        return 1
    return 2
