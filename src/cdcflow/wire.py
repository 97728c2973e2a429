"""Wire strings in bulk: the values of an Arrow array read as a canonical type, as the wire
strings of :func:`cdcflow.types.wire_value`, for the forms whose wire string can be read off
the value without converting it one by one.

:func:`wire_array` answers, per value, whether that held (``ok``); the others are left to the
value-by-value conversion, which also names their errors. pyarrow is imported by the
functions.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cdcflow.types import parse_decimal_type

if TYPE_CHECKING:
    import pyarrow as pa

_YEAR = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_DATE = _YEAR + r"-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_PLAIN_UTC = "^" + _DATE + r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}Z$"
_INT = r"^(0|-?[1-9][0-9]*)$"
_INT_LIMITS = {"int": 1 << 31, "bigint": 1 << 63}


def inferred_type(arrow_type: pa.DataType) -> str | None:
    """The canonical type :func:`cdcflow.types.infer_type` gives the JSON values an Arrow
    JSON reader put in a column of ``arrow_type`` (``None`` when the column's values need
    reading one by one)."""
    import pyarrow as pa

    if pa.types.is_int64(arrow_type):
        return "bigint"
    if pa.types.is_string(arrow_type):
        return "string"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    return None


def wire_array(values: pa.Array, t: str) -> tuple[pa.Array, pa.Array]:
    """(wire strings, ok) of ``values`` read as canonical type ``t``. Where ``ok`` is false the
    value needs :func:`cdcflow.types.wire_value` (or is not a value of ``t``); nulls are ok and
    stay null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    none_ok = pa.array([False] * n, pa.bool_())
    kind = values.type
    if pa.types.is_null(kind):
        return pa.nulls(n, pa.string()), pa.array([True] * n, pa.bool_())
    nulls = pc.is_null(values)
    if pa.types.is_string(kind):
        if t in ("string", "json"):
            return values, pc.invert(nulls)
        if t in _INT_LIMITS:
            digits = 18 if t == "bigint" else 9
            ok = pc.match_substring_regex(values, _INT)
            ok = pc.and_(ok, pc.less_equal(pc.utf8_length(values), digits))
            return values, _or_null(ok, nulls)
        if t == "timestamp":
            return values, _or_null(_plain_utc(values), nulls)
        if t == "date":
            shaped = pc.fill_null(pc.match_substring_regex(values, "^" + _DATE + "$"), False)
            ok = pc.and_(shaped, _real_day(values, shaped))
            return values, _or_null(ok, nulls)
        if t.startswith("decimal"):
            return _decimal_text(values, t, nulls)
        return values, _or_null(none_ok, nulls)
    if pa.types.is_int64(kind):
        text = pc.cast(values, pa.string())
        if t == "bigint" or t == "string":
            return text, pa.array([True] * n, pa.bool_())
        if t == "int":
            limit = _INT_LIMITS["int"]
            ok = pc.and_(pc.greater_equal(values, -limit), pc.less(values, limit))
            return text, _or_null(ok, nulls)
        if t.startswith("decimal"):
            return _decimal_text(text, t, nulls)
        return text, _or_null(none_ok, nulls)
    if pa.types.is_boolean(kind) and t in ("boolean", "string"):
        return pc.cast(values, pa.string()), pa.array([True] * n, pa.bool_())
    return pa.nulls(n, pa.string()), _or_null(none_ok, nulls)


def _or_null(ok: pa.Array, nulls: pa.Array) -> pa.Array:
    """``ok`` (unknown is not ok), and every null value."""
    import pyarrow.compute as pc

    return pc.or_(pc.fill_null(ok, False), nulls)


def _plain_utc(values: pa.Array) -> pa.Array:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` naming a real instant: its own wire string."""
    import pyarrow.compute as pc

    shaped = pc.fill_null(pc.match_substring_regex(values, _PLAIN_UTC), False)
    return pc.and_(shaped, _real_day(values, shaped))


def _real_day(values: pa.Array, shaped: pa.Array) -> pa.Array:
    """Whether the texts that are ``shaped`` (start with ``YYYY-MM-DD`` in digits) name a day
    the calendar has (no 30 February)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    day_text = pc.if_else(shaped, pc.utf8_slice_codeunits(values, 0, 10), "0000-00-00")
    parts = [
        pc.cast(pc.utf8_slice_codeunits(day_text, a, b), pa.int32()).to_numpy()
        for a, b in ((0, 4), (5, 7), (8, 10))
    ]
    year, month, day = parts
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    lengths = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0], dtype=np.int32)
    longest = lengths[np.clip(month, 0, 13)] + ((month == 2) & leap)
    return pa.array((year >= 1) & (day >= 1) & (day <= longest))


def _decimal_text(values: pa.Array, t: str, nulls: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Plain decimal literals (``-12.5``) as :func:`cdcflow.types.plain_decimal_wire` writes
    them for ``decimal(p,s)``: without leading zeros, padded to the scale."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ps = parse_decimal_type(t)
    if ps is None:
        return pa.nulls(len(values), pa.string()), _or_null(pa.array([False] * len(values)), nulls)
    p, s = ps
    if s <= 6 and p - s > 0:
        # Arrow writes decimals of at most 6 fractional digits plainly, as Python's "f"
        fits = rf"^-?0*[0-9]{{0,{p - s}}}" + (rf"(\.[0-9]{{1,{s}}})?$" if s else "$")
        ok = pc.and_(
            pc.match_substring_regex(values, fits),
            pc.invert(pc.match_substring_regex(values, r"^(-0*(\.0*)?|-?\.?)$")),
        )
        ok = pc.fill_null(ok, False)
        cleaned = pc.if_else(ok, values, "0")
        text = pc.cast(pc.cast(cleaned, pa.decimal128(p, s)), pa.string())
        return pc.if_else(ok, text, pa.scalar(None, pa.string())), _or_null(ok, nulls)
    plain = pc.match_substring_regex(values, r"^-?[0-9]+(\.[0-9]+)?$")
    parts = pc.extract_regex(
        pc.if_else(plain, values, "0"), r"^(?P<sign>-?)0*(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]+))?$"
    )
    sign, whole, frac = (pc.fill_null(parts.field(f), "") for f in ("sign", "int", "frac"))
    fits = pc.and_(
        pc.less_equal(pc.utf8_length(whole), p - s), pc.less_equal(pc.utf8_length(frac), s)
    )
    whole = pc.if_else(pc.equal(whole, ""), "0", whole)
    if s:
        text = pc.binary_join_element_wise(sign, whole, ".", pc.utf8_rpad(frac, s, "0"), "")
    else:
        text = pc.binary_join_element_wise(sign, whole, "")
    ok = pc.and_(plain, fits)
    return pc.if_else(ok, text, pa.scalar(None, pa.string())), _or_null(ok, nulls)


def constant_map(keys: list[str], values: list[str | None], rows: int) -> pa.Array:
    """A ``map<string,string>`` column holding the same map on every row."""
    import numpy as np
    import pyarrow as pa

    k = len(keys)
    offsets = pa.array(
        np.arange(0, (rows + 1) * k, k, dtype=np.int32) if k else np.zeros(rows + 1, dtype=np.int32)
    )
    return pa.MapArray.from_arrays(
        offsets,
        pa.array(keys * rows, pa.string()),
        pa.array(values * rows, pa.string()),
    )


def struct_map(
    names: list[str], columns: list[pa.Array], present: list[pa.Array], valid: pa.Array
) -> pa.Array:
    """A ``map<string,string>`` column from per-field wire columns: row ``r`` holds the fields
    present on it (in field order); a row that is not ``valid`` is a null map."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(valid)
    k = len(names)
    valid_np = np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)
    if k == 0:
        offsets = np.zeros(rows + 1, dtype=np.int32)
        return pa.MapArray.from_arrays(
            pa.array(offsets),
            pa.array([], pa.string()),
            pa.array([], pa.string()),
            mask=pa.array(~valid_np),
        )
    presence = np.stack(
        [np.asarray(p.to_numpy(zero_copy_only=False), dtype=bool) for p in present], axis=1
    )
    presence &= valid_np[:, None]
    counts = presence.sum(axis=1)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    flat = presence.reshape(-1)
    # row-major order of (row, field) → index into the field-major concatenation
    order = (np.arange(k)[None, :] * rows + np.arange(rows)[:, None]).reshape(-1)[flat]
    values = pa.concat_arrays([pc.cast(c, pa.string()) for c in columns]).take(pa.array(order))
    keys = pa.array(names, pa.string()).take(pa.array(np.tile(np.arange(k), rows)[flat]))
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, mask=pa.array(~valid_np))


class BulkImages:
    """Row images (Arrow structs of JSON values) as canonical columns: each image a
    ``map<string,string>`` of wire strings, ``types`` (column → canonical type of the columns
    present), ``key`` (the configured key columns, from ``before`` on deletes, else ``after``)
    and ``ok``: the rows whose every value was read in bulk.

    A column's type is the declared one, else the JSON kind Arrow read (integers bigint, text
    string, booleans boolean); a column of any other kind leaves its rows to be read one by
    one. The images' struct fields must hold the same kind for a column in both images.
    """

    def __init__(
        self,
        images: dict[str, pa.Array],
        declared: dict[str, str],
        key_names: tuple[str, ...] | None,
        key_from_before: pa.Array,
    ) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = len(key_from_before)
        ok = np.ones(rows, dtype=bool)
        types: dict[str, str] = {}
        wires: dict[str, dict[str, tuple[pa.Array, np.ndarray]]] = {}
        self.maps: dict[str, pa.Array] = {}
        columns: list[tuple[str, str]] = []
        for image, struct in images.items():
            fields: dict[str, tuple[pa.Array, np.ndarray]] = {}
            if pa.types.is_null(struct.type):
                valid = np.zeros(rows, dtype=bool)
            else:
                valid = mask(pc.is_valid(struct))
                for i in range(struct.type.num_fields):
                    field = struct.type.field(i)
                    child = struct.field(i)
                    present = valid & mask(pc.is_valid(child))
                    if not present.any():
                        continue
                    t = types.get(field.name) or declared.get(field.name)
                    t = t or inferred_type(field.type)
                    if t is None:
                        ok &= ~present
                        continue
                    types.setdefault(field.name, t)
                    if (field.name, t) not in columns:
                        columns.append((field.name, t))
                    wire, good = wire_array(child, t)
                    ok &= ~present | mask(good)
                    fields[field.name] = (wire, present)
            wires[image] = fields
            self.maps[image] = struct_map(
                list(fields),
                [w for w, _ in fields.values()],
                [pa.array(p) for _, p in fields.values()],
                pa.array(valid),
            )
        self.types = _pattern_map(columns, wires, rows)
        self.key: pa.Array = pa.nulls(rows, pa.map_(pa.string(), pa.string()))
        if key_names:
            before = mask(key_from_before)
            key_columns: list[pa.Array] = []
            key_present: list[pa.Array] = []
            for name in key_names:
                a_wire, a_present = wires.get("after", {}).get(name, (None, np.zeros(rows, bool)))
                b_wire, b_present = wires.get("before", {}).get(name, (None, np.zeros(rows, bool)))
                present = np.where(before, b_present, a_present)
                ok &= present  # KEY_COLUMN_MISSING is the row decoder's to say
                empty = pa.nulls(rows, pa.string())
                key_columns.append(pc.if_else(pa.array(before), b_wire or empty, a_wire or empty))
                key_present.append(pa.array(present))
            self.key = struct_map(list(key_names), key_columns, key_present, pa.array(ok))
        self.ok = ok
        self.column_types = types


def _pattern_map(
    columns: list[tuple[str, str]], wires: dict[str, dict[str, tuple[Any, Any]]], rows: int
) -> pa.Array:
    """The ``types`` map of each row: the columns present in any image, in the order they were
    first met (as the row decoder fills it), built once per presence pattern."""
    import numpy as np
    import pyarrow as pa

    if not columns:
        return constant_map([], [], rows)
    presence = np.zeros((rows, len(columns)), dtype=bool)
    for j, (name, _) in enumerate(columns):
        for fields in wires.values():
            if name in fields:
                presence[:, j] |= fields[name][1]
    # one integer per pattern (bytes of the packed flags)
    packed = np.packbits(presence, axis=1)
    codes = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    keys: list[str] = []
    values: list[str] = []
    offsets = [0]
    for row in first:
        for j in np.flatnonzero(presence[row]).tolist():
            keys.append(columns[j][0])
            values.append(columns[j][1])
        offsets.append(len(keys))
    distinct = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )
    return distinct.take(pa.array(inverse.reshape(-1)))


def mask(array: pa.Array) -> Any:
    """A boolean Arrow array as a numpy mask (unknown is false)."""
    import numpy as np

    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def pg_lsn_numbers(lsn: pa.Array) -> pa.Array:
    """Postgres LSNs ``X/Y`` (each half 1 to 8 hex digits, checked by the caller) as one
    unsigned 64-bit number each, as :func:`cdcflow.positions.pg_lsn` reads them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    halves = pc.split_pattern(lsn, "/")
    nibble_of = _hex_digits()
    out = np.zeros(len(lsn), dtype=np.uint64)
    for k, shift in ((0, 32), (1, 0)):
        padded = pc.utf8_lpad(pc.list_element(halves, k), 8, "0")
        first = np.frombuffer(padded.buffers()[1], dtype=np.int32)[padded.offset]
        digits = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[first : first + 8 * len(lsn)]
        value = np.zeros(len(lsn), dtype=np.uint64)
        for nibble in nibble_of[digits].reshape(-1, 8).T.astype(np.uint64):
            value = (value << np.uint64(4)) | nibble
        out |= value << np.uint64(shift)
    return pa.array(out, pa.uint64())


@lru_cache(maxsize=1)
def _hex_digits() -> Any:
    import numpy as np

    table = np.zeros(256, dtype=np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        table[c] = i
    for i, c in enumerate(b"ABCDEF"):
        table[c] = 10 + i
    return table


def encoded_sequences(*numbers: pa.Array) -> pa.Array:
    """:func:`cdcflow.sequence.encode` of tuples of non-negative integers, one array per
    element (integer arrays, or their decimal digits as text)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts: list[Any] = []
    for element in numbers:
        digits = element if pa.types.is_string(element.type) else pc.cast(element, pa.string())
        width = pc.utf8_lpad(pc.cast(pc.utf8_length(digits), pa.string()), 2, "0")
        parts += ["p", width, digits, "!"]
    return pc.binary_join_element_wise(*parts, "")
