"""Vendor type names → canonical types: each vendor module declares its mapping as data
(:class:`VendorTypes`), and one algorithm, :func:`source_type`, reads every one of them.

A native type is read in this order (names compared in lower case, runs of spaces as one):

1. **arrays**: ``T[]``, and the vendor's own array forms (``_int4``, ``ARRAY<INT64>``): an
   array of the element's type;
2. **parameters**: ``NAME(p[,s])`` for a name of :attr:`VendorTypes.numbers` (``numeric``,
   Oracle's ``NUMBER``), read by its :class:`Numeric` rule;
3. **vendor names first** (:attr:`VendorTypes.names_first`): the vendor's name (whole,
   without its arguments, or the part before its first parenthesis) wins over a canonical name
   that reads differently (SQL Server ``float`` is 64-bit, ``timestamp`` is rowversion;
   CockroachDB ``INT`` is 64-bit);
4. **canonical names** as they are (the unified format mixes them with vendor names);
5. **names**: the whole name, then the name without its parenthesised arguments
   (``varchar(20)``, ``TIMESTAMP(6) WITH TIME ZONE``).

Anything else, and a name whose brackets do not pair up (``numeric(10,2``), raises
``ValueTypeError`` naming the type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from cdcflow.types.canonical import (
    DEFAULT_DECIMAL,
    MAX_PRECISION,
    SCALAR_TYPES,
    ValueTypeError,
    decimal_type,
    is_valid_type,
)


@dataclass(frozen=True)
class Numeric:
    """How ``NAME(p[,s])`` reads: ``decimal(p,s)`` (clamped to 38 digits, a negative scale read
    as 0), except that with a scale of 0 the first entry of ``integers`` with at least ``p``
    digits gives its type (Oracle ``NUMBER(6)`` is an ``int``). ``*`` as the precision means
    38 where ``any_precision`` allows it (Oracle ``NUMBER(*,2)``)."""

    integers: tuple[tuple[int, str], ...] = ()
    any_precision: bool = False

    def read(self, args: str, native: str) -> str:
        parts = [a.strip() for a in args.split(",")]
        if len(parts) > 2:
            raise ValueTypeError(f"bad precision in {native!r}")
        try:
            p = MAX_PRECISION if parts[0] == "*" and self.any_precision else int(parts[0])
            s = int(parts[1]) if len(parts) > 1 else 0
        except ValueError:
            raise ValueTypeError(f"bad precision in {native!r}") from None
        s = max(s, 0)
        if s == 0:
            for digits, t in self.integers:
                if p <= digits:
                    return t
        return decimal_type(p, s)


#: ``NUMERIC(p,s)`` / ``DECIMAL(p,s)``: a decimal of that precision and scale.
DECIMAL = Numeric()
#: The SQL standard's parameterised decimals, read alike by most vendors.
STANDARD_NUMBERS: Mapping[str, Numeric] = {"numeric": DECIMAL, "decimal": DECIMAL}


@dataclass(frozen=True)
class VendorTypes:
    """One vendor's type names as data, read by :func:`source_type`."""

    #: The source name configurations use (``postgres``, ``sqlserver``...).
    source: str
    #: Vendor type names (lower case, without arguments unless the arguments change the
    #: type, as MySQL's ``tinyint(1)``) → canonical type.
    names: Mapping[str, str]
    #: Names taking ``(p[,s])`` parameters → how they read.
    numbers: Mapping[str, Numeric] = field(default_factory=lambda: STANDARD_NUMBERS)
    #: The vendor's names win over canonical names (its producer never writes canonical ones).
    names_first: bool = False
    #: Vendor array forms: patterns whose one group is the element's type.
    arrays: tuple[re.Pattern[str], ...] = ()


#: ``T[]`` (any vendor).
_SUFFIX_ARRAY = re.compile(r"^(.+?)\s*\[\]$")
#: ``NAME(args)``: the name and its arguments.
_CALL = re.compile(r"^([a-z_][a-z0-9_ ]*?)\s*\(\s*([^()]*?)\s*\)$")
#: Parenthesised arguments anywhere in a name (``TIMESTAMP(6) WITH TIME ZONE``).
_ARGS = re.compile(r"\s*\([^()]*\)")


def _vendors() -> dict[str, VendorTypes]:
    from cdcflow.types.vendors import cockroachdb, mysql, oracle, postgres, spanner, sqlserver

    return {
        v.source: v
        for v in (
            postgres.TYPES,
            mysql.TYPES,
            sqlserver.TYPES,
            oracle.TYPES,
            spanner.TYPES,
            cockroachdb.TYPES,
        )
    }


@lru_cache(maxsize=1)
def vendors() -> Mapping[str, VendorTypes]:
    """Every vendor's type mapping by source name."""
    return _vendors()


@lru_cache(maxsize=4096)
def source_type(source: str, native: str) -> str:
    """Canonical type for a source database's native column type (``numeric(10,2)``,
    ``varchar(20)``, ``integer[]``, ``TINYINT(1)``...), read as the module docstring says.
    Unknown types raise ``ValueTypeError`` naming the type; canonical names are accepted as
    they are (after the vendor's own names where it declares ``names_first``).
    """
    low = " ".join(native.lower().split())
    if low.count("(") != low.count(")") or low.count("<") != low.count(">"):
        raise ValueTypeError(f"unbalanced brackets in type {native!r}")
    vendor = vendors().get(source)
    if vendor is None:
        if is_valid_type(low):
            return low
        raise ValueTypeError(
            f"no type table for source {source!r}; declare canonical types "
            f"(one of {', '.join(sorted(SCALAR_TYPES))}, decimal(p,s), array<T>)"
        )
    for pattern in (_SUFFIX_ARRAY, *vendor.arrays):
        m = pattern.match(low)
        if m:
            return f"array<{source_type(source, m.group(1))}>"
    call = _CALL.match(low)
    if call and call.group(1) in vendor.numbers:
        return vendor.numbers[call.group(1)].read(call.group(2), native)
    bare = " ".join(_ARGS.sub("", low).split())
    if vendor.names_first:
        for name in (low, bare, low.split("(", 1)[0].strip()):
            if name in vendor.names:
                return vendor.names[name]
    if is_valid_type(low):
        return low
    for name in (low, bare):
        if name in vendor.names:
            return vendor.names[name]
    raise ValueTypeError(f"unknown {source} type {native!r}")


__all__ = [
    "DECIMAL",
    "DEFAULT_DECIMAL",
    "STANDARD_NUMBERS",
    "Numeric",
    "VendorTypes",
    "source_type",
    "vendors",
]
