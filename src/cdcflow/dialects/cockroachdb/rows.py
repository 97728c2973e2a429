"""The row event every changefeed envelope ends in: what an envelope read about the row
(:class:`~.context.RowChange`) and where the message came from (:class:`~.context.Context`) as
one canonical event — its typed images (declared or Avro types, else as the message writes
them), its key (values in primary-key order, names from the message or configuration) and its
HLC order."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cdcflow import positions
from cdcflow.dialects.base import Dialect
from cdcflow.dialects.cockroachdb.context import Columns, Context, RowChange, wall_time
from cdcflow.dialects.cockroachdb.types import JSON_NULL, bits_from_avro, to_json_text, unwrap
from cdcflow.dialects.common import hex_bytes
from cdcflow.dialects.model import Decoded, Order
from cdcflow.transports.json import dumps, kind
from cdcflow.types import cockroachdb_type, infer_type


def row_event(dialect: Dialect, row: RowChange, ctx: Context) -> Decoded:
    """The canonical row event of what an envelope read (``row``) and where the message
    came from (``ctx``)."""
    database, schema, table, family, topic = row.where
    op, before, after, key_value, key_names = (
        row.op, row.before, row.after, row.key_value, row.key_names
    )  # fmt: skip
    metadata = ctx.meta
    metadata["topic"] = topic
    metadata.update(row.extra or {})
    if family:
        metadata["column_family"] = family
    if ctx.partition is not None:
        metadata["partition"] = ctx.partition
    types = dict(ctx.avro_types)
    types.update(
        dialect.declared_types(table, schema, cockroachdb_type, database=database, mapper="crdb")
    )
    columns = Columns(types, ctx.bit_columns, row.text_values)
    typed_after = None if after is None else _image(dialect, after, columns)
    typed_before = None if before is None else _image(dialect, before, columns)

    # key: values in primary-key order, names from the message or configuration
    values: list[Any] | None = None
    if isinstance(key_value, dict):
        named = {str(k): unwrap(v) for k, v in key_value.items()}
        key_names = key_names or tuple(named)
        values = [named.get(n) for n in key_names]
    elif isinstance(key_value, list):
        values = [unwrap(v) for v in key_value]
    elif key_value is not None:
        raise dialect.fail("BAD_KEY", f"key must be an array or object, got {kind(key_value)}")
    names = key_names or dialect.key_names(table, schema, database)
    key: dict[str, Any] | None = None
    if values is not None and names:
        if len(values) != len(names):
            raise dialect.fail(
                "KEY_LENGTH_MISMATCH",
                f"key {short(values)} has {len(values)} value(s) but table {table!r} has "
                f"{len(names)} key column(s) {list(names)}",
            )
        key_columns = Columns(types, ctx.bit_columns, False, columns.row_types)
        key = {n: _value(dialect, n, v, key_columns) for n, v in zip(names, values, strict=True)}
    elif values is not None:
        dialect.unnamed_key(values, ctx.item)
    else:
        key = dialect.image_key(names, typed_before, typed_after, op, table)
    partial = bool(family) and op != "DELETE"
    if partial and typed_after is not None and key is not None:
        # a column family carries only its columns: the key columns are added
        typed_after = {**key, **typed_after}

    return dialect.make_event(
        op,
        (database, schema, table),
        _order(dialect, row, ctx),
        ctx.item,
        source="cockroachdb",
        key=key,
        before=typed_before,
        after=typed_after,
        partial=partial,
        types=columns.row_types,
    )


def _order(dialect: Dialect, row: RowChange, ctx: Context) -> Order:
    """HLC ``(wall, logical)`` as numbers, else delivery order."""
    hlc, hlc_source, commit_ns, mvcc = row.hlc, row.hlc_source, row.commit_ns, row.mvcc
    position: dict[str, Any] = {}
    for k in ("kafka_topic", "kafka_partition", "kafka_offset"):
        if k in ctx.meta:
            position[k.removeprefix("kafka_")] = ctx.meta[k]
    if mvcc is not None:
        position["mvcc_timestamp"] = str(unwrap(mvcc))
    if hlc is not None:
        try:
            wall, logical = positions.crdb_hlc_decimal(unwrap(hlc))
        except ValueError as e:
            raise dialect.fail("BAD_HLC", f"{hlc_source or 'updated'}: {e}") from None
        position["hlc"] = f"{wall}.{logical:010d}"
        ctx.meta["sequence_source"] = hlc_source or "updated"
        instant = wall_time(commit_ns if commit_ns is not None else wall)
        fields = (hlc_source or "updated",) * 2
        return Order(dialect.sequence_of((wall, logical), fields), position, instant)
    ts = wall_time(commit_ns) if commit_ns is not None else None
    return Order(dialect.delivery_order(ctx.item), position, ts)


def _image(dialect: Dialect, row: Mapping[str, Any], columns: Columns) -> dict[str, Any]:
    return {str(c): _value(dialect, str(c), unwrap(v), columns) for c, v in row.items()}


def _value(dialect: Dialect, col: str, value: Any, columns: Columns) -> Any:
    """A column value (typed, or wire), recording the column's type in ``row_types``: the
    declared or Avro type, else the type of the value as the message writes it."""
    row_types, text_values = columns.row_types, columns.text_values
    t = columns.types.get(col)
    if t is not None:
        row_types.setdefault(col, t)
    if value is None:
        return None
    if isinstance(value, dict) and value.get(JSON_NULL) is True and len(value) == 1:
        # JSONB null, not SQL NULL
        row_types.setdefault(col, "string")
        return "null"
    if col in columns.bits and isinstance(value, list):
        try:
            return bits_from_avro(value)
        except (ValueError, TypeError) as e:
            raise dialect.fail("BAD_VALUE", f"column {col!r} (BIT): {e}") from None
    if t is None:
        if text_values:
            row_types.setdefault(col, "string")
            return value
        if isinstance(value, dict | list):
            row_types.setdefault(col, "string")
            return to_json_text(value)
        if isinstance(value, float):
            value = Decimal(repr(value))
        inferred = infer_type(value) or "json"
        if inferred is not None:
            row_types.setdefault(col, inferred)
        return dialect.keep(value)
    if t == "binary" and isinstance(value, str) and value.startswith("\\x"):
        value = hex_bytes(col, value[2:])
    elif t == "json":
        return value if isinstance(value, str) else to_json_text(value)
    elif t.startswith("decimal") and isinstance(value, bytes):
        value = value.decode()
    return dialect.value(col, value, t)


def short(value: Any) -> str:
    """A value as JSON text, cut to 80 characters (for messages)."""
    text = dumps(value).decode() if value is not None else "none"
    return text if len(text) <= 80 else text[:77] + "..."
