"""Column types and values as the read commands print them, whoever read them.

A :class:`Shape` is what printing needs to know of a column's type: the nesting (struct, array,
map) and whether a timestamp is a wall clock (``timestamp_ntz``); everything else is judged
from the value. Spark's types and Arrow's (pyiceberg) map to the same shapes, and
:func:`python_value` turns an Arrow value into the value PySpark would give for it (structs
as tuples, maps as dicts), so both readers print the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

#: The kinds a printer tells apart; ``""``: judged from the value.
STRUCT, ARRAY, MAP, WALL_CLOCK = "struct", "array", "map", "timestamp_ntz"


@dataclass(frozen=True)
class Shape:
    """A column type as printing sees it."""

    kind: str = ""
    #: a struct's fields, in order
    fields: tuple[tuple[str, Shape], ...] = ()
    #: an array's elements
    element: Shape | None = None
    #: a map's keys and values
    key: Shape | None = None
    value: Shape | None = None


ANY = Shape()


def spark_shape(data_type: Any) -> Shape:
    """The shape of a PySpark ``DataType`` (told by its class name: no import of pyspark)."""
    if data_type is None:
        return ANY
    name = type(data_type).__name__
    if name == "StructType":
        return Shape(STRUCT, tuple((f.name, spark_shape(f.dataType)) for f in data_type.fields))
    if name == "ArrayType":
        return Shape(ARRAY, element=spark_shape(data_type.elementType))
    if name == "MapType":
        return Shape(
            MAP, key=spark_shape(data_type.keyType), value=spark_shape(data_type.valueType)
        )
    if name == "TimestampNTZType":
        return Shape(WALL_CLOCK)
    return ANY


def arrow_shape(data_type: pa.DataType) -> Shape:
    """The shape of an Arrow type, as Spark would type the same Iceberg column."""
    import pyarrow as pa

    if pa.types.is_struct(data_type):
        fields = tuple(
            (data_type.field(i).name, arrow_shape(data_type.field(i).type))
            for i in range(data_type.num_fields)
        )
        return Shape(STRUCT, fields)
    if pa.types.is_map(data_type):
        return Shape(
            MAP, key=arrow_shape(data_type.key_type), value=arrow_shape(data_type.item_type)
        )
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return Shape(ARRAY, element=arrow_shape(data_type.value_type))
    if pa.types.is_timestamp(data_type) and data_type.tz is None:
        return Shape(WALL_CLOCK)
    return ANY


def python_value(value: Any, shape: Shape) -> Any:
    """An Arrow value (``to_pylist``) as PySpark gives the same column's value: structs as
    tuples in field order, maps as dicts, nested values likewise."""
    if value is None:
        return None
    if shape.kind == STRUCT:
        return tuple(python_value(value.get(name), inner) for name, inner in shape.fields)
    if shape.kind == ARRAY:
        inner = shape.element or ANY
        return [python_value(v, inner) for v in value]
    if shape.kind == MAP:
        key, item = shape.key or ANY, shape.value or ANY
        return {python_value(k, key): python_value(v, item) for k, v in value}
    return value
