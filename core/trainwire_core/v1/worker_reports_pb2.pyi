from google.protobuf import struct_pb2 as _struct_pb2
from trainwire_core.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerHello(_message.Message):
    __slots__ = ("world_size",)
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    def __init__(self, world_size: _Optional[int] = ...) -> None: ...

class TrainingReport(_message.Message):
    __slots__ = ("report_index", "metrics", "checkpoint_id", "files", "has_checkpoint")
    REPORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    HAS_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    report_index: int
    metrics: _struct_pb2.Struct
    checkpoint_id: str
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.ManifestFile]
    has_checkpoint: bool
    def __init__(self, report_index: _Optional[int] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., checkpoint_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[_common_pb2.ManifestFile, _Mapping]]] = ..., has_checkpoint: _Optional[bool] = ...) -> None: ...

class WorkerReport(_message.Message):
    __slots__ = ("run_id", "attempt", "world_rank", "hello", "report", "error", "status")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORLD_RANK_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    attempt: int
    world_rank: int
    hello: WorkerHello
    report: TrainingReport
    error: _common_pb2.WorkerError
    status: WorkerStatus
    def __init__(self, run_id: _Optional[str] = ..., attempt: _Optional[int] = ..., world_rank: _Optional[int] = ..., hello: _Optional[_Union[WorkerHello, _Mapping]] = ..., report: _Optional[_Union[TrainingReport, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.WorkerError, _Mapping]] = ..., status: _Optional[_Union[WorkerStatus, _Mapping]] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ReportStreamAck(_message.Message):
    __slots__ = ("reports_received",)
    REPORTS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    reports_received: int
    def __init__(self, reports_received: _Optional[int] = ...) -> None: ...
