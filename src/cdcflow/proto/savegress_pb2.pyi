import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Operation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_UNSPECIFIED: _ClassVar[Operation]
    INSERT: _ClassVar[Operation]
    UPDATE: _ClassVar[Operation]
    DELETE: _ClassVar[Operation]
    DDL: _ClassVar[Operation]
    BEGIN: _ClassVar[Operation]
    COMMIT: _ClassVar[Operation]
OPERATION_UNSPECIFIED: Operation
INSERT: Operation
UPDATE: Operation
DELETE: Operation
DDL: Operation
BEGIN: Operation
COMMIT: Operation

class CDCEvent(_message.Message):
    __slots__ = ("id", "source", "schema", "table", "operation", "timestamp", "transaction_id", "position", "before", "after", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    source: str
    schema: str
    table: str
    operation: Operation
    timestamp: _timestamp_pb2.Timestamp
    transaction_id: str
    position: Position
    before: _struct_pb2.Struct
    after: _struct_pb2.Struct
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., source: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., operation: _Optional[_Union[Operation, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., transaction_id: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., before: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., after: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("lsn", "sequence", "file", "position", "gtid", "resume_token", "cluster_time")
    LSN_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    GTID_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TIME_FIELD_NUMBER: _ClassVar[int]
    lsn: str
    sequence: int
    file: str
    position: int
    gtid: str
    resume_token: str
    cluster_time: ClusterTime
    def __init__(self, lsn: _Optional[str] = ..., sequence: _Optional[int] = ..., file: _Optional[str] = ..., position: _Optional[int] = ..., gtid: _Optional[str] = ..., resume_token: _Optional[str] = ..., cluster_time: _Optional[_Union[ClusterTime, _Mapping]] = ...) -> None: ...

class ClusterTime(_message.Message):
    __slots__ = ("t", "i")
    T_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    t: int
    i: int
    def __init__(self, t: _Optional[int] = ..., i: _Optional[int] = ...) -> None: ...
