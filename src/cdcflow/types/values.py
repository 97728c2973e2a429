"""Typed values: conversion of wire values to canonical types, the type of a JSON value, and
the wire strings of typed values.

Inside Spark, a row image is a ``map<string,string>`` whose values are the *wire strings* of
:func:`to_wire` (casts back to the column type are plain Spark SQL, see
:func:`cdcflow.types.canonical.spark_from_wire`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
import uuid as uuidlib
from decimal import Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import orjson

from cdcflow.types.canonical import (
    _ARRAY_RE,
    DEFAULT_DECIMAL,
    MAX_PRECISION,
    ValueTypeError,
    decimal_type,
    parse_decimal_type,
)

UTC = dt.UTC


# --------------------------------------------------------------------------- value parsing

_TS_RE = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)
_TIME_RE = re.compile(r"^\s*(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?\s*$")
_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")


def _parse_ts(text: str) -> tuple[dt.datetime, dt.timezone | None]:
    m = _TS_RE.match(text)
    if not m:
        raise ValueTypeError(f"not an ISO-8601 timestamp: {text!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    micros = int((frac or "0").ljust(6, "0")[:6])  # beyond microseconds: truncated (Spark's unit)
    try:
        naive = dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micros)
    except ValueError as e:
        raise ValueTypeError(f"not a valid timestamp: {text!r} ({e})") from None
    zone: dt.timezone | None = None
    if tz:
        if tz in ("Z", "z"):
            zone = UTC
        else:
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
            if hours > 23 or minutes > 59:
                raise ValueTypeError(f"not a valid UTC offset in {text!r}")
            zone = dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
    return naive, zone


def parse_timestamp(value: Any) -> dt.datetime:
    """Instant → aware UTC datetime. Accepts ISO-8601 text (``T`` or space, up to 9 fractional
    digits, ``Z`` or an offset; no zone means UTC), epoch numbers are not guessed."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if not isinstance(value, str):
        raise ValueTypeError(f"timestamp must be text, got {type(value).__name__}: {value!r}")
    if _is_plain_utc(value):
        # 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z', by far the most common form: the C parser; what it
        # refuses goes through the full parser for the error message
        try:
            return dt.datetime.fromisoformat(value)
        except ValueError:
            pass
    naive, zone = _parse_ts(value)
    try:
        return naive.replace(tzinfo=zone or UTC).astimezone(UTC)
    except OverflowError:  # an offset that moves the instant past year 1 or 9999
        raise ValueTypeError(f"timestamp out of range in UTC: {value!r}") from None


def _is_plain_utc(text: str) -> bool:
    n = len(text)
    return (
        (n == 20 or (n == 27 and text[19] == "."))
        and text[-1] == "Z"
        and text[10] == "T"
        and text[4] == "-"
        and text[7] == "-"
        and text[13] == ":"
        and text[16] == ":"
        and text[:4].isdigit()
    )


def parse_timestamp_ntz(value: Any) -> dt.datetime:
    """Wall-clock timestamp → naive datetime. A ``Z``/``+00:00`` suffix is accepted (the
    unified format writes Postgres ``timestamp`` as ``...Z``); another offset is an error."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and value.utcoffset() != dt.timedelta(0):
            raise ValueTypeError(f"timestamp without zone carries an offset: {value!r}")
        return value.replace(tzinfo=None)
    if not isinstance(value, str):
        raise ValueTypeError(f"timestamp must be text, got {type(value).__name__}: {value!r}")
    naive, zone = _parse_ts(value)
    if zone is not None and zone.utcoffset(None) != dt.timedelta(0):
        raise ValueTypeError(f"timestamp without time zone carries an offset: {value!r}")
    return naive


def _to_int(value: Any, bits: int) -> int:
    if isinstance(value, bool):
        raise ValueTypeError(f"expected an integer, got a boolean: {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and _INT_RE.match(value):
        if len(value) > 40:  # no 64-bit integer has that many digits
            raise ValueTypeError(f"integer of {len(value.strip())} digits does not fit {bits} bits")
        n = int(value)
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, Decimal) and value == value.to_integral_value():
        n = int(value)
    else:
        raise ValueTypeError(f"expected an integer, got {value!r}")
    limit = 1 << (bits - 1)
    if not -limit <= n < limit:
        shown = str(n) if n.bit_length() < 256 else f"of {n.bit_length()} bits"
        raise ValueTypeError(f"integer {shown} does not fit {bits} bits")
    return n


_WIDE = Context(prec=100)


@lru_cache(maxsize=64)
def _scale_unit(scale: int) -> Decimal:
    return Decimal(1).scaleb(-scale)


def _to_decimal(value: Any, t: str) -> Decimal:
    p, s = parse_decimal_type(t) or (38, 18)
    if isinstance(value, bool):
        raise ValueTypeError(f"expected a decimal, got a boolean: {value!r}")
    try:
        if isinstance(value, float):
            d = Decimal(repr(value))
        elif isinstance(value, (int, str, Decimal)):
            d = Decimal(value.strip() if isinstance(value, str) else value)
        else:
            raise InvalidOperation
    except InvalidOperation:
        raise ValueTypeError(f"expected a decimal number, got {value!r}") from None
    if not d.is_finite():
        raise ValueTypeError(f"decimal must be finite, got {value!r}")
    exp = d.as_tuple().exponent
    assert isinstance(exp, int)
    # decimal(38, s) needs more than the default context's 28 digits
    try:
        q = d.quantize(_scale_unit(s), context=_WIDE)
    except InvalidOperation:
        raise ValueTypeError(f"{value!r} does not fit {t}") from None
    if -exp > s and q != d:
        raise ValueTypeError(f"{value!r} has more than {s} fractional digits for {t}")
    d = q
    integer_digits = len(str(abs(int(d)))) if int(d) != 0 else 0
    if integer_digits > p - s:
        raise ValueTypeError(f"{value!r} does not fit {t}")
    return d


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueTypeError(f"expected a number, got a boolean: {value!r}")
    if isinstance(value, (int, float, Decimal)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueTypeError(f"expected a floating-point number, got {value!r}")


_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueTypeError(f"expected a boolean, got {value!r}")


def _to_binary(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueTypeError(f"expected base64 text, got {value[:60]!r}") from None
    raise ValueTypeError(f"expected base64 text, got {value!r}")


def _to_date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10])
        except ValueError:
            pass
    raise ValueTypeError(f"expected a date YYYY-MM-DD, got {value!r}")


def _to_time(value: Any) -> str:
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, str):
        m = _TIME_RE.match(value)
        if m:
            h, mi, s, frac = m.groups()
            if int(h) < 24 and int(mi) < 60 and int(s or 0) < 61:
                base = f"{h}:{mi}:{s or '00'}"
                return f"{base}.{frac[:6].ljust(6, '0')}" if frac else base
            if h == "24" and int(mi) == int(s or 0) == int(frac or 0) == 0:
                return "24:00:00"  # the end of a day (PostgreSQL's time holds it)
    raise ValueTypeError(f"expected a time HH:MM:SS, got {value!r}")


def _to_uuid(value: Any) -> str:
    if isinstance(value, str):
        try:
            return str(uuidlib.UUID(value.strip()))
        except ValueError:
            pass
    raise ValueTypeError(f"expected a UUID, got {value!r}")


def json_bytes(value: Any, option: int = 0) -> bytes:
    """Compact JSON of a decoded value: exact decimals, ISO timestamps, base64 bytes, and
    integers of any size (orjson alone refuses those beyond 64 bits)."""
    try:
        return orjson.dumps(value, default=json_default, option=option)
    except TypeError:
        return orjson.dumps(_big_ints(value), default=json_default, option=option)


def _big_ints(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return orjson.Fragment(str(value))
    if isinstance(value, dict):
        return {k: _big_ints(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_big_ints(v) for v in value]
    return value


def _json_text(value: Any) -> str:
    return json_bytes(value).decode()


def _to_json(value: Any) -> str:
    # JSON columns arrive as objects/arrays (unified format) or as JSON text (most others);
    # text is kept as given.
    if isinstance(value, str):
        return value
    return _json_text(value)


_POINT_TEXT = re.compile(r"^\s*\(\s*([^,]+)\s*,\s*([^)]+)\s*\)\s*$")


def _to_point(value: Any) -> dict[str, float]:
    if isinstance(value, dict) and "x" in value and "y" in value:
        return {"x": _to_float(value["x"]), "y": _to_float(value["y"])}
    if isinstance(value, str):
        m = _POINT_TEXT.match(value)
        if m:
            return {"x": _to_float(m.group(1)), "y": _to_float(m.group(2))}
    raise ValueTypeError(f"expected a point {{x, y}} or '(x,y)', got {value!r}")


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, dict, list)):
        return _json_text(value)
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    raise ValueTypeError(f"expected text, got {value!r}")


def convert(value: Any, t: str) -> Any:
    """Turn a wire value into the Python value of canonical type ``t`` (``None`` stays None).

    Raises :class:`ValueTypeError` naming the value and the type when it does not parse.
    """
    if value is None:
        return None
    if t == "string":
        return _to_string(value)
    if t == "bigint":
        return _to_int(value, 64)
    if t == "int":
        return _to_int(value, 32)
    if t.startswith("decimal"):
        return _to_decimal(value, t)
    if t == "boolean":
        return _to_bool(value)
    if t in ("double", "float"):
        return _to_float(value)
    if t == "timestamp":
        return parse_timestamp(value)
    if t == "timestamp_ntz":
        return parse_timestamp_ntz(value)
    if t == "date":
        return _to_date(value)
    if t == "binary":
        return _to_binary(value)
    if t == "json":
        return _to_json(value)
    if t == "time":
        return _to_time(value)
    if t == "uuid":
        return _to_uuid(value)
    if t == "point":
        return _to_point(value)
    m = _ARRAY_RE.match(t)
    if m:
        if not isinstance(value, list):
            raise ValueTypeError(f"expected an array for {t}, got {value!r}")
        inner = m.group(1)
        return [convert(v, inner) for v in value]
    raise ValueTypeError(f"unknown canonical type {t!r}")


#: Digits a JSON number's integer part is given at least (a column of fractions also holds the
#: column's integers and other magnitudes of the same scale: 20 digits hold every 64-bit one).
INFERRED_INTEGER_DIGITS = 20
_INT64 = 1 << 63


def infer_type(value: Any) -> str | None:
    """Canonical type of a JSON-native value when the producer declares none — the one rule
    every dialect uses.

    - booleans → ``boolean``; text → ``string`` (never guessed to be a timestamp or a number:
      declare the column's type for that); objects and arrays → ``json``; bytes → ``binary``;
      floats (a reader's binary floating point) → ``double``; ``None`` → no type;
    - integers, and exact numbers without a fraction (``Decimal("12")``, ``1E+3``): ``bigint``
      from -2^63 to 2^63-1, beyond it ``decimal(38,0)`` (an integer of more than 38 digits gets
      that type too, and its value is rejected as not fitting it);
    - exact numbers with a fraction (``Decimal("12.50")``): ``decimal(p,s)`` with ``s`` the
      literal's fractional digits and ``p = s + max(20, its integer digits)``, at most 38 (so a
      column's integers and fractions of one scale share a type). Beyond 38 digits the
      precision stays 38 and the scale at most 38: the value is rejected when it does not fit.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return _integer_type(value)
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return _exact_number_type(value)
    if isinstance(value, str):
        return "string"
    if isinstance(value, (dict, list)):
        return "json"
    if isinstance(value, bytes):
        return "binary"
    return None


def _integer_type(value: int) -> str:
    return "bigint" if -_INT64 <= value < _INT64 else decimal_type(MAX_PRECISION, 0)


def _exact_number_type(value: Decimal) -> str:
    _, digits, exp = value.as_tuple()
    if not isinstance(exp, int):  # NaN, infinity: no column type holds them
        return DEFAULT_DECIMAL
    if exp >= 0:
        if exp + len(digits) <= 19:  # a cheap bound before building the integer
            return _integer_type(int(value))
        return decimal_type(MAX_PRECISION, 0)
    scale = -exp
    int_digits = max(0, len(digits) + exp)
    return decimal_type(scale + max(int_digits, INFERRED_INTEGER_DIGITS), scale)


# --------------------------------------------------------------------------- wire strings


def _fmt_ts(v: dt.datetime) -> str:
    if v.tzinfo is not None:
        v = v.astimezone(UTC).replace(tzinfo=None)
        return v.isoformat(timespec="microseconds") + "Z"
    return v.isoformat(timespec="microseconds")


def to_wire(value: Any) -> str | None:
    """The string form of a typed value inside Spark row-image maps (see module docstring)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dt.datetime):
        return _fmt_ts(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (list, dict)):
        return _json_text(value)
    return str(value)


_PLAIN_DECIMAL = re.compile(r"^(-?)([0-9]+)(?:\.([0-9]+))?$")


def wire_value(value: Any, t: str) -> str | None:
    """``to_wire(convert(value, t))`` — the wire string of a value read as type ``t`` — read
    off the value directly where its text already is the wire form (the common cases of
    decoding: text, integers, plain decimals and UTC timestamps), else through :func:`convert`.

    Raises :class:`ValueTypeError` exactly when :func:`convert` does.
    """
    if value is None:
        return None
    kind = type(value)
    if t == "string" or t == "json":
        if kind is str:
            return value
    elif t == "bigint" or t == "int":
        if kind is int:
            limit = _INT_LIMITS[t]
            if -limit <= value < limit:
                return str(value)
    elif t == "timestamp":
        if kind is str and len(value) == 27 and _is_plain_utc(value):
            try:
                dt.datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                return value
    elif t == "boolean":
        if kind is bool:
            return "true" if value else "false"
    elif t == "double":
        if kind is float:
            return to_wire(value)
    elif t.startswith("decimal") and (kind is str or kind is int):
        found = plain_decimal_wire(str(value), t)
        if found is not None:
            return found
    return to_wire(convert(value, t))


_INT_LIMITS = {"int": 1 << 31, "bigint": 1 << 63}


def plain_decimal_wire(text: str, t: str) -> str | None:
    """The wire form of a plain decimal literal (``-12.5``) for ``decimal(p,s)``: the literal
    padded to the scale, without leading zeros; ``None`` when it needs the full conversion
    (other forms, more digits than the type holds)."""
    m = _PLAIN_DECIMAL.match(text)
    ps = parse_decimal_type(t)
    if m is None or ps is None:
        return None
    p, s = ps
    sign, whole, frac = m.group(1), m.group(2).lstrip("0"), m.group(3) or ""
    if len(frac) > s or len(whole) > p - s:
        return None
    if s == 0:
        return sign + (whole or "0")
    return f"{sign}{whole or '0'}.{frac}{'0' * (s - len(frac))}"


def from_wire(text: str | None, t: str) -> Any:
    """Invert :func:`to_wire` for canonical type ``t``."""
    if text is None:
        return None
    if t in ("string", "json", "time", "uuid"):
        return text
    if t in ("point",) or t.startswith("array<"):
        return convert(orjson.loads(text), t)
    return convert(text, t)


def wire_json(text: str | None, t: str | None) -> Any:
    """The JSON value the typed value behind wire string ``text`` takes in the JSON form (what
    :func:`json_default` makes of it): numbers and booleans as JSON numbers and booleans,
    decimals as exact numbers, structured values as their JSON; everything else is its wire
    text already."""
    if text is None or t is None:
        return text
    if t in ("bigint", "int"):
        return int(text)
    if t in ("double", "float"):
        return float(text)
    if t == "boolean":
        return text == "true"
    if t.startswith("decimal") or t == "point" or t.startswith("array<"):
        return orjson.Fragment(text)
    return text


def decimal_text(value: Decimal) -> str:
    """A decimal written out in full (``1.50``), or in exponent form (``1E+500``) when its
    exponent is so large that the full form would be huge."""
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and abs(exponent) > _FULL_EXPONENT:
        return str(value)
    return format(value, "f")


#: Decimals whose exponent is larger are written in exponent form (see :func:`decimal_text`).
_FULL_EXPONENT = 1000


def json_default(value: Any) -> Any:
    """orjson ``default`` for typed values: exact decimals, ISO timestamps, base64 bytes."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"not JSON serializable: {value}")
        return orjson.Fragment(decimal_text(value))
    if isinstance(value, dt.datetime):
        return _fmt_ts(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
