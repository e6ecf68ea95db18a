import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from trainwire_core.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DatasetRef(_message.Message):
    __slots__ = ("uri", "format")
    URI_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    uri: str
    format: str
    def __init__(self, uri: _Optional[str] = ..., format: _Optional[str] = ...) -> None: ...

class TrainLoop(_message.Message):
    __slots__ = ("pickled_function", "entry_point")
    PICKLED_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_POINT_FIELD_NUMBER: _ClassVar[int]
    pickled_function: bytes
    entry_point: str
    def __init__(self, pickled_function: _Optional[bytes] = ..., entry_point: _Optional[str] = ...) -> None: ...

class DataParallelSpec(_message.Message):
    __slots__ = ("train_loop", "train_loop_config", "pickled_train_loop_config", "backend_config", "data_config", "config_overrides")
    TRAIN_LOOP_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOOP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    PICKLED_TRAIN_LOOP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DATA_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CONFIG_OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    train_loop: TrainLoop
    train_loop_config: _struct_pb2.Struct
    pickled_train_loop_config: bytes
    backend_config: _struct_pb2.Struct
    data_config: DataConfig
    config_overrides: _struct_pb2.Struct
    def __init__(self, train_loop: _Optional[_Union[TrainLoop, _Mapping]] = ..., train_loop_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., pickled_train_loop_config: _Optional[bytes] = ..., backend_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data_config: _Optional[_Union[DataConfig, _Mapping]] = ..., config_overrides: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DataConfig(_message.Message):
    __slots__ = ("datasets_to_split", "split_all", "execution_options", "disable_shard_locality")
    class ExecutionOptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: IngestOptions
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[IngestOptions, _Mapping]] = ...) -> None: ...
    DATASETS_TO_SPLIT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_ALL_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_SHARD_LOCALITY_FIELD_NUMBER: _ClassVar[int]
    datasets_to_split: _containers.RepeatedScalarFieldContainer[str]
    split_all: bool
    execution_options: _containers.MessageMap[str, IngestOptions]
    disable_shard_locality: bool
    def __init__(self, datasets_to_split: _Optional[_Iterable[str]] = ..., split_all: _Optional[bool] = ..., execution_options: _Optional[_Mapping[str, IngestOptions]] = ..., disable_shard_locality: _Optional[bool] = ...) -> None: ...

class IngestOptions(_message.Message):
    __slots__ = ("preserve_order", "cpu_limit", "gpu_limit", "object_store_memory_limit")
    PRESERVE_ORDER_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    GPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    OBJECT_STORE_MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    preserve_order: bool
    cpu_limit: float
    gpu_limit: float
    object_store_memory_limit: float
    def __init__(self, preserve_order: _Optional[bool] = ..., cpu_limit: _Optional[float] = ..., gpu_limit: _Optional[float] = ..., object_store_memory_limit: _Optional[float] = ...) -> None: ...

class GBDTSpec(_message.Message):
    __slots__ = ("params", "label_column", "num_boost_round", "dmatrix_params")
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    LABEL_COLUMN_FIELD_NUMBER: _ClassVar[int]
    NUM_BOOST_ROUND_FIELD_NUMBER: _ClassVar[int]
    DMATRIX_PARAMS_FIELD_NUMBER: _ClassVar[int]
    params: _struct_pb2.Struct
    label_column: str
    num_boost_round: int
    dmatrix_params: _struct_pb2.Struct
    def __init__(self, params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., label_column: _Optional[str] = ..., num_boost_round: _Optional[int] = ..., dmatrix_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SklearnSpec(_message.Message):
    __slots__ = ("pickled_estimator", "estimator_class", "estimator_params", "label_column", "cv", "scoring", "return_train_score_cv", "parallelize_cv")
    PICKLED_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_CLASS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_PARAMS_FIELD_NUMBER: _ClassVar[int]
    LABEL_COLUMN_FIELD_NUMBER: _ClassVar[int]
    CV_FIELD_NUMBER: _ClassVar[int]
    SCORING_FIELD_NUMBER: _ClassVar[int]
    RETURN_TRAIN_SCORE_CV_FIELD_NUMBER: _ClassVar[int]
    PARALLELIZE_CV_FIELD_NUMBER: _ClassVar[int]
    pickled_estimator: bytes
    estimator_class: str
    estimator_params: _struct_pb2.Struct
    label_column: str
    cv: int
    scoring: _containers.RepeatedScalarFieldContainer[str]
    return_train_score_cv: bool
    parallelize_cv: int
    def __init__(self, pickled_estimator: _Optional[bytes] = ..., estimator_class: _Optional[str] = ..., estimator_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., label_column: _Optional[str] = ..., cv: _Optional[int] = ..., scoring: _Optional[_Iterable[str]] = ..., return_train_score_cv: _Optional[bool] = ..., parallelize_cv: _Optional[int] = ...) -> None: ...

class RLSpec(_message.Message):
    __slots__ = ("algorithm", "env", "config", "num_iterations", "flat_config")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    FLAT_CONFIG_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    env: str
    config: _struct_pb2.Struct
    num_iterations: int
    flat_config: _struct_pb2.Struct
    def __init__(self, algorithm: _Optional[str] = ..., env: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., num_iterations: _Optional[int] = ..., flat_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PreprocessorSpec(_message.Message):
    __slots__ = ("name", "params", "steps")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    params: _struct_pb2.Struct
    steps: _containers.RepeatedCompositeFieldContainer[PreprocessorSpec]
    def __init__(self, name: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[PreprocessorSpec, _Mapping]]] = ...) -> None: ...

class FitRequest(_message.Message):
    __slots__ = ("framework", "scaling_config", "run_config", "datasets", "data_parallel", "gbdt", "sklearn", "rl", "resume_from_checkpoint", "pickled_preprocessor", "preprocessor", "idempotency_key", "metadata")
    class DatasetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DatasetRef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DatasetRef, _Mapping]] = ...) -> None: ...
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    SCALING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUN_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    DATA_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    GBDT_FIELD_NUMBER: _ClassVar[int]
    SKLEARN_FIELD_NUMBER: _ClassVar[int]
    RL_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PICKLED_PREPROCESSOR_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSOR_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    framework: str
    scaling_config: _common_pb2.ScalingConfig
    run_config: _common_pb2.RunConfig
    datasets: _containers.MessageMap[str, DatasetRef]
    data_parallel: DataParallelSpec
    gbdt: GBDTSpec
    sklearn: SklearnSpec
    rl: RLSpec
    resume_from_checkpoint: str
    pickled_preprocessor: bytes
    preprocessor: PreprocessorSpec
    idempotency_key: str
    metadata: _struct_pb2.Struct
    def __init__(self, framework: _Optional[str] = ..., scaling_config: _Optional[_Union[_common_pb2.ScalingConfig, _Mapping]] = ..., run_config: _Optional[_Union[_common_pb2.RunConfig, _Mapping]] = ..., datasets: _Optional[_Mapping[str, DatasetRef]] = ..., data_parallel: _Optional[_Union[DataParallelSpec, _Mapping]] = ..., gbdt: _Optional[_Union[GBDTSpec, _Mapping]] = ..., sklearn: _Optional[_Union[SklearnSpec, _Mapping]] = ..., rl: _Optional[_Union[RLSpec, _Mapping]] = ..., resume_from_checkpoint: _Optional[str] = ..., pickled_preprocessor: _Optional[bytes] = ..., preprocessor: _Optional[_Union[PreprocessorSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "name", "state", "state_reason", "framework", "path", "latest_metrics", "latest_checkpoint", "best_checkpoints", "error", "num_failures", "created_at", "updated_at", "request", "attempt", "last_report_index", "num_coordinator_restarts", "submitted_by", "embedded_owner", "tune_id", "trial_index")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    LATEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    BEST_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_FAILURES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_COORDINATOR_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    EMBEDDED_OWNER_FIELD_NUMBER: _ClassVar[int]
    TUNE_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_INDEX_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    name: str
    state: _common_pb2.RunState
    state_reason: str
    framework: str
    path: str
    latest_metrics: _struct_pb2.Struct
    latest_checkpoint: _common_pb2.CheckpointInfo
    best_checkpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.CheckpointInfo]
    error: _common_pb2.WorkerError
    num_failures: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    request: FitRequest
    attempt: int
    last_report_index: int
    num_coordinator_restarts: int
    submitted_by: str
    embedded_owner: str
    tune_id: str
    trial_index: int
    def __init__(self, run_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.RunState, str]] = ..., state_reason: _Optional[str] = ..., framework: _Optional[str] = ..., path: _Optional[str] = ..., latest_metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.CheckpointInfo, _Mapping]] = ..., best_checkpoints: _Optional[_Iterable[_Union[_common_pb2.CheckpointInfo, _Mapping]]] = ..., error: _Optional[_Union[_common_pb2.WorkerError, _Mapping]] = ..., num_failures: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request: _Optional[_Union[FitRequest, _Mapping]] = ..., attempt: _Optional[int] = ..., last_report_index: _Optional[int] = ..., num_coordinator_restarts: _Optional[int] = ..., submitted_by: _Optional[str] = ..., embedded_owner: _Optional[str] = ..., tune_id: _Optional[str] = ..., trial_index: _Optional[int] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("states", "page_size", "page_token", "submitted_by")
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.RunState]
    page_size: int
    page_token: str
    submitted_by: str
    def __init__(self, states: _Optional[_Iterable[_Union[_common_pb2.RunState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., submitted_by: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id", "after_event_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_event_id: int
    def __init__(self, run_id: _Optional[str] = ..., after_event_id: _Optional[int] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetCallerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CallerInfo(_message.Message):
    __slots__ = ("name", "scopes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ...) -> None: ...

class StateChange(_message.Message):
    __slots__ = ("state", "reason", "cause")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.RunState
    reason: str
    cause: str
    def __init__(self, state: _Optional[_Union[_common_pb2.RunState, str]] = ..., reason: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class MetricsEvent(_message.Message):
    __slots__ = ("report_index", "metrics")
    REPORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    report_index: int
    metrics: _struct_pb2.Struct
    def __init__(self, report_index: _Optional[int] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("event_id", "run_id", "time", "state_change", "metrics", "checkpoint", "worker_error")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ERROR_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    run_id: str
    time: _timestamp_pb2.Timestamp
    state_change: StateChange
    metrics: MetricsEvent
    checkpoint: _common_pb2.CheckpointInfo
    worker_error: _common_pb2.WorkerError
    def __init__(self, event_id: _Optional[int] = ..., run_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state_change: _Optional[_Union[StateChange, _Mapping]] = ..., metrics: _Optional[_Union[MetricsEvent, _Mapping]] = ..., checkpoint: _Optional[_Union[_common_pb2.CheckpointInfo, _Mapping]] = ..., worker_error: _Optional[_Union[_common_pb2.WorkerError, _Mapping]] = ...) -> None: ...

class RunEventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ...) -> None: ...

class GetDatasetRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class DatasetInfo(_message.Message):
    __slots__ = ("sha256", "ref", "num_rows", "columns", "size_bytes")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    ref: DatasetRef
    num_rows: int
    columns: _containers.RepeatedScalarFieldContainer[str]
    size_bytes: int
    def __init__(self, sha256: _Optional[str] = ..., ref: _Optional[_Union[DatasetRef, _Mapping]] = ..., num_rows: _Optional[int] = ..., columns: _Optional[_Iterable[str]] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class UploadDatasetHeader(_message.Message):
    __slots__ = ("sha256", "size_bytes")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class UploadDatasetRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadDatasetHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadDatasetHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadCheckpointHeader(_message.Message):
    __slots__ = ("run_name", "metrics", "files")
    RUN_NAME_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    run_name: str
    metrics: _struct_pb2.Struct
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.ManifestFile]
    def __init__(self, run_name: _Optional[str] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., files: _Optional[_Iterable[_Union[_common_pb2.ManifestFile, _Mapping]]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("path", "offset", "data")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    data: bytes
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadCheckpointRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadCheckpointHeader
    chunk: FileChunk
    def __init__(self, header: _Optional[_Union[UploadCheckpointHeader, _Mapping]] = ..., chunk: _Optional[_Union[FileChunk, _Mapping]] = ...) -> None: ...

class DownloadCheckpointRequest(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: str
    def __init__(self, checkpoint: _Optional[str] = ...) -> None: ...

class GetPackageRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class PackageInfo(_message.Message):
    __slots__ = ("sha256", "size_bytes", "num_files", "unpacked_bytes")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_FILES_FIELD_NUMBER: _ClassVar[int]
    UNPACKED_BYTES_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    num_files: int
    unpacked_bytes: int
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., num_files: _Optional[int] = ..., unpacked_bytes: _Optional[int] = ...) -> None: ...

class UploadPackageHeader(_message.Message):
    __slots__ = ("sha256", "size_bytes")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class UploadPackageRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadPackageHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadPackageHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class WatchLogsRequest(_message.Message):
    __slots__ = ("run_id", "ranks", "follow", "after")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    follow: bool
    after: str
    def __init__(self, run_id: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., follow: _Optional[bool] = ..., after: _Optional[str] = ...) -> None: ...

class LogLines(_message.Message):
    __slots__ = ("lines",)
    LINES_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    def __init__(self, lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("world_rank", "attempt", "time", "stream", "text", "cursor")
    WORLD_RANK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    world_rank: int
    attempt: int
    time: _timestamp_pb2.Timestamp
    stream: str
    text: str
    cursor: str
    def __init__(self, world_rank: _Optional[int] = ..., attempt: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...
