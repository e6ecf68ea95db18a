import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from trainwire_core.v1 import common_pb2 as _common_pb2
from trainwire_core.v1 import coordinator_pb2 as _coordinator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Domain(_message.Message):
    __slots__ = ("sampler", "values", "lower", "upper", "q", "base", "mean", "sd", "pickled_function", "alternatives")
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    Q_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    SD_FIELD_NUMBER: _ClassVar[int]
    PICKLED_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    sampler: str
    values: _struct_pb2.ListValue
    lower: float
    upper: float
    q: float
    base: float
    mean: float
    sd: float
    pickled_function: bytes
    alternatives: _containers.RepeatedCompositeFieldContainer[Alternative]
    def __init__(self, sampler: _Optional[str] = ..., values: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., lower: _Optional[float] = ..., upper: _Optional[float] = ..., q: _Optional[float] = ..., base: _Optional[float] = ..., mean: _Optional[float] = ..., sd: _Optional[float] = ..., pickled_function: _Optional[bytes] = ..., alternatives: _Optional[_Iterable[_Union[Alternative, _Mapping]]] = ...) -> None: ...

class Alternative(_message.Message):
    __slots__ = ("label", "pickled", "dataset", "preprocessor")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PICKLED_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSOR_FIELD_NUMBER: _ClassVar[int]
    label: str
    pickled: bytes
    dataset: _coordinator_pb2.DatasetRef
    preprocessor: _coordinator_pb2.PreprocessorSpec
    def __init__(self, label: _Optional[str] = ..., pickled: _Optional[bytes] = ..., dataset: _Optional[_Union[_coordinator_pb2.DatasetRef, _Mapping]] = ..., preprocessor: _Optional[_Union[_coordinator_pb2.PreprocessorSpec, _Mapping]] = ...) -> None: ...

class SearchParam(_message.Message):
    __slots__ = ("path", "domain")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[str]
    domain: Domain
    def __init__(self, path: _Optional[_Iterable[str]] = ..., domain: _Optional[_Union[Domain, _Mapping]] = ...) -> None: ...

class TrialScheduler(_message.Message):
    __slots__ = ("name", "time_attr", "max_t", "grace_period", "reduction_factor", "brackets", "metric", "mode", "options", "pickled_code")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIME_ATTR_FIELD_NUMBER: _ClassVar[int]
    MAX_T_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    BRACKETS_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PICKLED_CODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    time_attr: str
    max_t: float
    grace_period: float
    reduction_factor: float
    brackets: int
    metric: str
    mode: str
    options: _struct_pb2.Struct
    pickled_code: bytes
    def __init__(self, name: _Optional[str] = ..., time_attr: _Optional[str] = ..., max_t: _Optional[float] = ..., grace_period: _Optional[float] = ..., reduction_factor: _Optional[float] = ..., brackets: _Optional[int] = ..., metric: _Optional[str] = ..., mode: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., pickled_code: _Optional[bytes] = ...) -> None: ...

class SearchAlgorithm(_message.Message):
    __slots__ = ("name", "seed", "max_concurrent", "metric", "mode", "points_to_evaluate", "pickled_space", "metrics", "modes", "repeat", "repeat_without_index")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POINTS_TO_EVALUATE_FIELD_NUMBER: _ClassVar[int]
    PICKLED_SPACE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    REPEAT_WITHOUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    seed: int
    max_concurrent: int
    metric: str
    mode: str
    points_to_evaluate: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    pickled_space: bytes
    metrics: _containers.RepeatedScalarFieldContainer[str]
    modes: _containers.RepeatedScalarFieldContainer[str]
    repeat: int
    repeat_without_index: bool
    def __init__(self, name: _Optional[str] = ..., seed: _Optional[int] = ..., max_concurrent: _Optional[int] = ..., metric: _Optional[str] = ..., mode: _Optional[str] = ..., points_to_evaluate: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., pickled_space: _Optional[bytes] = ..., metrics: _Optional[_Iterable[str]] = ..., modes: _Optional[_Iterable[str]] = ..., repeat: _Optional[int] = ..., repeat_without_index: _Optional[bool] = ...) -> None: ...

class TuneConfig(_message.Message):
    __slots__ = ("metric", "mode", "num_samples", "max_concurrent_trials", "search_alg", "scheduler", "time_budget_s")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_TRIALS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ALG_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    TIME_BUDGET_S_FIELD_NUMBER: _ClassVar[int]
    metric: str
    mode: str
    num_samples: int
    max_concurrent_trials: int
    search_alg: SearchAlgorithm
    scheduler: TrialScheduler
    time_budget_s: float
    def __init__(self, metric: _Optional[str] = ..., mode: _Optional[str] = ..., num_samples: _Optional[int] = ..., max_concurrent_trials: _Optional[int] = ..., search_alg: _Optional[_Union[SearchAlgorithm, _Mapping]] = ..., scheduler: _Optional[_Union[TrialScheduler, _Mapping]] = ..., time_budget_s: _Optional[float] = ...) -> None: ...

class TuneRequest(_message.Message):
    __slots__ = ("trainer", "param_space", "search_space", "tune_config", "name", "idempotency_key", "function_trainable", "pickled_stopper")
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    PARAM_SPACE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_SPACE_FIELD_NUMBER: _ClassVar[int]
    TUNE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_TRAINABLE_FIELD_NUMBER: _ClassVar[int]
    PICKLED_STOPPER_FIELD_NUMBER: _ClassVar[int]
    trainer: _coordinator_pb2.FitRequest
    param_space: _struct_pb2.Struct
    search_space: _containers.RepeatedCompositeFieldContainer[SearchParam]
    tune_config: TuneConfig
    name: str
    idempotency_key: str
    function_trainable: bool
    pickled_stopper: bytes
    def __init__(self, trainer: _Optional[_Union[_coordinator_pb2.FitRequest, _Mapping]] = ..., param_space: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., search_space: _Optional[_Iterable[_Union[SearchParam, _Mapping]]] = ..., tune_config: _Optional[_Union[TuneConfig, _Mapping]] = ..., name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., function_trainable: _Optional[bool] = ..., pickled_stopper: _Optional[bytes] = ...) -> None: ...

class Trial(_message.Message):
    __slots__ = ("index", "run_id", "config", "state", "state_reason", "last_result", "best_metric", "num_reports", "early_stopped", "past_run_ids", "resume_from_checkpoint", "iteration_offset")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_RESULT_FIELD_NUMBER: _ClassVar[int]
    BEST_METRIC_FIELD_NUMBER: _ClassVar[int]
    NUM_REPORTS_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOPPED_FIELD_NUMBER: _ClassVar[int]
    PAST_RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    ITERATION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    index: int
    run_id: str
    config: _struct_pb2.Struct
    state: _common_pb2.RunState
    state_reason: str
    last_result: _struct_pb2.Struct
    best_metric: float
    num_reports: int
    early_stopped: bool
    past_run_ids: _containers.RepeatedScalarFieldContainer[str]
    resume_from_checkpoint: str
    iteration_offset: int
    def __init__(self, index: _Optional[int] = ..., run_id: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.RunState, str]] = ..., state_reason: _Optional[str] = ..., last_result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., best_metric: _Optional[float] = ..., num_reports: _Optional[int] = ..., early_stopped: _Optional[bool] = ..., past_run_ids: _Optional[_Iterable[str]] = ..., resume_from_checkpoint: _Optional[str] = ..., iteration_offset: _Optional[int] = ...) -> None: ...

class TuneRun(_message.Message):
    __slots__ = ("tune_id", "name", "state", "state_reason", "request", "trials", "best_trial", "created_at", "updated_at", "submitted_by", "num_trials_planned", "error_field")
    TUNE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    BEST_TRIAL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    NUM_TRIALS_PLANNED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_FIELD_NUMBER: _ClassVar[int]
    tune_id: str
    name: str
    state: _common_pb2.RunState
    state_reason: str
    request: TuneRequest
    trials: _containers.RepeatedCompositeFieldContainer[Trial]
    best_trial: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    submitted_by: str
    num_trials_planned: int
    error_field: str
    def __init__(self, tune_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.RunState, str]] = ..., state_reason: _Optional[str] = ..., request: _Optional[_Union[TuneRequest, _Mapping]] = ..., trials: _Optional[_Iterable[_Union[Trial, _Mapping]]] = ..., best_trial: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., submitted_by: _Optional[str] = ..., num_trials_planned: _Optional[int] = ..., error_field: _Optional[str] = ...) -> None: ...

class GetTuneRequest(_message.Message):
    __slots__ = ("tune_id",)
    TUNE_ID_FIELD_NUMBER: _ClassVar[int]
    tune_id: str
    def __init__(self, tune_id: _Optional[str] = ...) -> None: ...

class ListTunesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTunesResponse(_message.Message):
    __slots__ = ("tunes", "next_page_token")
    TUNES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tunes: _containers.RepeatedCompositeFieldContainer[TuneRun]
    next_page_token: str
    def __init__(self, tunes: _Optional[_Iterable[_Union[TuneRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResumeTuneRequest(_message.Message):
    __slots__ = ("tune_id", "resume_unfinished", "resume_errored", "restart_errored")
    TUNE_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    RESUME_ERRORED_FIELD_NUMBER: _ClassVar[int]
    RESTART_ERRORED_FIELD_NUMBER: _ClassVar[int]
    tune_id: str
    resume_unfinished: bool
    resume_errored: bool
    restart_errored: bool
    def __init__(self, tune_id: _Optional[str] = ..., resume_unfinished: _Optional[bool] = ..., resume_errored: _Optional[bool] = ..., restart_errored: _Optional[bool] = ...) -> None: ...
