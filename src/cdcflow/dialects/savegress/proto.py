"""The unified format's gRPC ``CDCEvent`` protobuf message: decode and encode.

Files and streams of them are length-delimited (:mod:`cdcflow.transports.protobuf`).
:func:`event_from_proto` turns one serialized ``CDCEvent`` into the same dictionary shape as the
JSON form, so the savegress decoder applies one set of rules to both. What protobuf cannot say
the way JSON does, and how it is handled:

* ``google.protobuf.Struct`` numbers are doubles. A double with an integral value is read back
  as an integer (the JSON examples write ``"id": 1``); integers beyond 2**53 cannot be carried
  exactly and :func:`event_to_proto` refuses them rather than round them. Declare a column's
  type (``--type TABLE.COL=TYPE``) when a float column must stay a float.
* ``metadata`` is ``map<string, string>``: non-text metadata values are written as JSON text.
* The message has no ``ddl_type``/``ddl_command`` fields; a producer may put them in
  ``metadata``, where they are looked for.
* ``OPERATION_UNSPECIFIED`` (0) means the producer set no operation (``MISSING_OPERATION``);
  an enum number the format does not define is ``UNKNOWN_OPERATION``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError as ProtobufDecodeError

from cdcflow.dialects.common import epoch_instant
from cdcflow.errors import DecodeError
from cdcflow.proto import savegress_pb2 as pb
from cdcflow.types import ValueTypeError, json_bytes, parse_timestamp

#: Largest integer a double (and so a ``Struct`` number) carries exactly.
MAX_EXACT_INT = 2**53

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_OPERATIONS = {v.number: v.name for v in pb.Operation.DESCRIPTOR.values}


def _corrupt(message: str) -> DecodeError:
    return DecodeError(message, code="CORRUPT_PROTOBUF")


# ---------------------------------------------------------------- decoding


def _value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "number_value":
        x = v.number_value
        if x.is_integer() and abs(x) <= MAX_EXACT_INT:
            return int(x)
        return x
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return _struct(v.struct_value)
    return [_value(x) for x in v.list_value.values]


def _struct(s: struct_pb2.Struct) -> dict[str, Any]:
    return {k: _value(s.fields[k]) for k in s.fields}


def _position(p: pb.Position) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("lsn", "sequence", "file", "position", "gtid", "resume_token"):
        if p.HasField(name):
            out[name] = getattr(p, name)
    if p.HasField("cluster_time"):
        out["cluster_time"] = {"t": p.cluster_time.t, "i": p.cluster_time.i}
    return out


def event_from_proto(data: bytes) -> dict[str, Any]:
    """One serialized ``CDCEvent`` → the JSON-form dictionary the savegress decoder reads."""
    msg = pb.CDCEvent()
    try:
        msg.ParseFromString(data)
    except ProtobufDecodeError as e:
        raise _corrupt(f"not a CDCEvent message: {e}") from None
    doc: dict[str, Any] = {}
    for name in ("id", "source", "schema", "table", "transaction_id"):
        value = getattr(msg, name)
        if value:
            doc[name] = value
    op = msg.operation
    if op not in _OPERATIONS:
        raise DecodeError(
            f"unknown Operation enum value {op}; the format defines "
            + ", ".join(f"{n}={k}" for k, n in sorted(_OPERATIONS.items())),
            code="UNKNOWN_OPERATION",
        )
    if op != pb.OPERATION_UNSPECIFIED:
        doc["operation"] = _OPERATIONS[op]
    if msg.HasField("timestamp"):
        ts = msg.timestamp
        doc["timestamp"] = epoch_instant(ts.seconds * 10**9 + ts.nanos, "ns", "timestamp")
    if msg.HasField("position"):
        doc["position"] = _position(msg.position)
    if msg.HasField("before"):
        doc["before"] = _struct(msg.before)
    if msg.HasField("after"):
        doc["after"] = _struct(msg.after)
    if msg.metadata:
        metadata = dict(msg.metadata)
        for name in ("ddl_type", "ddl_command"):
            if name in metadata:
                doc[name] = metadata.pop(name)
        doc["metadata"] = metadata
    return doc


# ---------------------------------------------------------------- encoding


def _set_value(target: struct_pb2.Value, value: Any, path: str) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        if abs(value) > MAX_EXACT_INT:
            raise ValueTypeError(
                f"{path}: integer {value} does not fit a protobuf Struct number exactly; "
                "send it as a string"
            )
        target.number_value = float(value)
    elif isinstance(value, float):
        target.number_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value, path)
    elif isinstance(value, list | tuple):
        target.list_value.SetInParent()
        for i, item in enumerate(value):
            _set_value(target.list_value.values.add(), item, f"{path}[{i}]")
    else:
        raise ValueTypeError(f"{path}: {type(value).__name__} has no protobuf Struct form")


def _fill_struct(target: struct_pb2.Struct, row: Mapping[str, Any], path: str) -> None:
    target.SetInParent()
    for name, value in row.items():
        _set_value(target.fields[name], value, f"{path}.{name}")


def event_to_proto(doc: Mapping[str, Any]) -> bytes:
    """A JSON-form unified event → one serialized ``CDCEvent``.

    Raises :class:`ValueTypeError` for what the message cannot carry exactly (an operation the
    enum lacks, an integer beyond 2**53 in a row image).
    """
    msg = pb.CDCEvent()
    for name in ("id", "source", "schema", "table", "transaction_id"):
        value = doc.get(name)
        if value is not None:
            setattr(msg, name, str(value))
    op = doc.get("operation", doc.get("type"))
    if op is not None:
        names = {n: k for k, n in _OPERATIONS.items()}
        if not isinstance(op, str) or op.upper() not in names:
            raise ValueTypeError(f"operation {op!r} has no CDCEvent Operation enum value")
        msg.operation = names[op.upper()]  # type: ignore[assignment]
    ts = doc.get("timestamp")
    if ts is not None:
        delta = parse_timestamp(ts) - _EPOCH
        msg.timestamp.seconds = delta.days * 86400 + delta.seconds
        msg.timestamp.nanos = delta.microseconds * 1000
    position = doc.get("position")
    if isinstance(position, Mapping):
        p = msg.position
        p.SetInParent()
        for name in ("lsn", "file", "gtid", "resume_token"):
            if position.get(name) is not None:
                setattr(p, name, str(position[name]))
        for name in ("sequence", "position"):
            if position.get(name) is not None:
                setattr(p, name, int(position[name]))
        ct = position.get("cluster_time")
        if isinstance(ct, Mapping):
            p.cluster_time.t = int(ct.get("t", 0))
            p.cluster_time.i = int(ct.get("i", 0))
    for name in ("before", "after"):
        image = doc.get(name)
        if isinstance(image, Mapping):
            _fill_struct(getattr(msg, name), image, name)
    meta: dict[str, Any] = dict(doc.get("metadata") or {})
    for name in ("ddl_type", "ddl_command"):
        if doc.get(name) is not None:
            meta[name] = doc[name]
    for k, v in meta.items():
        msg.metadata[str(k)] = v if isinstance(v, str) else json_bytes(v).decode()
    return msg.SerializeToString(deterministic=True)
