import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    PENDING: _ClassVar[RunState]
    STARTING: _ClassVar[RunState]
    RUNNING: _ClassVar[RunState]
    RESTARTING: _ClassVar[RunState]
    SUCCEEDED: _ClassVar[RunState]
    FAILED: _ClassVar[RunState]
    CANCELLED: _ClassVar[RunState]
RUN_STATE_UNSPECIFIED: RunState
PENDING: RunState
STARTING: RunState
RUNNING: RunState
RESTARTING: RunState
SUCCEEDED: RunState
FAILED: RunState
CANCELLED: RunState

class ScalingConfig(_message.Message):
    __slots__ = ("num_workers", "use_gpu", "resources_per_worker", "trainer_resources", "placement_strategy", "min_workers")
    class ResourcesPerWorkerEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TrainerResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    USE_GPU_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_PER_WORKER_FIELD_NUMBER: _ClassVar[int]
    TRAINER_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    num_workers: int
    use_gpu: bool
    resources_per_worker: _containers.ScalarMap[str, float]
    trainer_resources: _containers.ScalarMap[str, float]
    placement_strategy: str
    min_workers: int
    def __init__(self, num_workers: _Optional[int] = ..., use_gpu: _Optional[bool] = ..., resources_per_worker: _Optional[_Mapping[str, float]] = ..., trainer_resources: _Optional[_Mapping[str, float]] = ..., placement_strategy: _Optional[str] = ..., min_workers: _Optional[int] = ...) -> None: ...

class FailureConfig(_message.Message):
    __slots__ = ("max_failures", "fail_fast")
    MAX_FAILURES_FIELD_NUMBER: _ClassVar[int]
    FAIL_FAST_FIELD_NUMBER: _ClassVar[int]
    max_failures: int
    fail_fast: bool
    def __init__(self, max_failures: _Optional[int] = ..., fail_fast: _Optional[bool] = ...) -> None: ...

class CheckpointConfig(_message.Message):
    __slots__ = ("num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order", "checkpoint_frequency", "checkpoint_at_end")
    NUM_TO_KEEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SCORE_ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SCORE_ORDER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_AT_END_FIELD_NUMBER: _ClassVar[int]
    num_to_keep: int
    checkpoint_score_attribute: str
    checkpoint_score_order: str
    checkpoint_frequency: int
    checkpoint_at_end: bool
    def __init__(self, num_to_keep: _Optional[int] = ..., checkpoint_score_attribute: _Optional[str] = ..., checkpoint_score_order: _Optional[str] = ..., checkpoint_frequency: _Optional[int] = ..., checkpoint_at_end: _Optional[bool] = ...) -> None: ...

class SyncConfig(_message.Message):
    __slots__ = ("sync_period_s", "sync_timeout_s", "sync_artifacts", "sync_artifacts_on_checkpoint")
    SYNC_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    SYNC_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SYNC_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    SYNC_ARTIFACTS_ON_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    sync_period_s: float
    sync_timeout_s: float
    sync_artifacts: bool
    sync_artifacts_on_checkpoint: bool
    def __init__(self, sync_period_s: _Optional[float] = ..., sync_timeout_s: _Optional[float] = ..., sync_artifacts: _Optional[bool] = ..., sync_artifacts_on_checkpoint: _Optional[bool] = ...) -> None: ...

class RunConfig(_message.Message):
    __slots__ = ("name", "storage_path", "stop", "failure_config", "checkpoint_config", "sync_config", "runtime_env", "log_level")
    class StopEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STORAGE_PATH_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SYNC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
    LOG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    storage_path: str
    stop: _containers.ScalarMap[str, float]
    failure_config: FailureConfig
    checkpoint_config: CheckpointConfig
    sync_config: SyncConfig
    runtime_env: RuntimeEnv
    log_level: str
    def __init__(self, name: _Optional[str] = ..., storage_path: _Optional[str] = ..., stop: _Optional[_Mapping[str, float]] = ..., failure_config: _Optional[_Union[FailureConfig, _Mapping]] = ..., checkpoint_config: _Optional[_Union[CheckpointConfig, _Mapping]] = ..., sync_config: _Optional[_Union[SyncConfig, _Mapping]] = ..., runtime_env: _Optional[_Union[RuntimeEnv, _Mapping]] = ..., log_level: _Optional[str] = ...) -> None: ...

class RuntimeEnv(_message.Message):
    __slots__ = ("working_dir", "py_modules", "pip", "env_vars")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    PY_MODULES_FIELD_NUMBER: _ClassVar[int]
    PIP_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    working_dir: str
    py_modules: _containers.RepeatedScalarFieldContainer[str]
    pip: _containers.RepeatedScalarFieldContainer[str]
    env_vars: _containers.ScalarMap[str, str]
    def __init__(self, working_dir: _Optional[str] = ..., py_modules: _Optional[_Iterable[str]] = ..., pip: _Optional[_Iterable[str]] = ..., env_vars: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WorkerError(_message.Message):
    __slots__ = ("world_rank", "exc_type", "message", "traceback", "attempt")
    WORLD_RANK_FIELD_NUMBER: _ClassVar[int]
    EXC_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    world_rank: int
    exc_type: str
    message: str
    traceback: str
    attempt: int
    def __init__(self, world_rank: _Optional[int] = ..., exc_type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ManifestFile(_message.Message):
    __slots__ = ("path", "size_bytes", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class CheckpointInfo(_message.Message):
    __slots__ = ("checkpoint_id", "uri", "metrics", "index", "size_bytes", "created_at")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    uri: str
    metrics: _struct_pb2.Struct
    index: int
    size_bytes: int
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, checkpoint_id: _Optional[str] = ..., uri: _Optional[str] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., index: _Optional[int] = ..., size_bytes: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
