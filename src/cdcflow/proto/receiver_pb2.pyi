from cdcflow.proto import savegress_pb2 as _savegress_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_savegress_pb2.CDCEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_savegress_pb2.CDCEvent, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("accepted", "file")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    file: str
    def __init__(self, accepted: _Optional[int] = ..., file: _Optional[str] = ...) -> None: ...
