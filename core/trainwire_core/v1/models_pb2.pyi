from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetAliasRequest(_message.Message):
    __slots__ = ("model", "alias", "version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    alias: str
    version: str
    def __init__(self, model: _Optional[str] = ..., alias: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class DeleteAliasRequest(_message.Message):
    __slots__ = ("model", "alias")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    model: str
    alias: str
    def __init__(self, model: _Optional[str] = ..., alias: _Optional[str] = ...) -> None: ...

class GetAliasesRequest(_message.Message):
    __slots__ = ("model", "include_history")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    model: str
    include_history: bool
    def __init__(self, model: _Optional[str] = ..., include_history: _Optional[bool] = ...) -> None: ...

class AliasMove(_message.Message):
    __slots__ = ("revision", "alias", "version", "previous_version", "time", "moved_by")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MOVED_BY_FIELD_NUMBER: _ClassVar[int]
    revision: int
    alias: str
    version: str
    previous_version: str
    time: float
    moved_by: str
    def __init__(self, revision: _Optional[int] = ..., alias: _Optional[str] = ..., version: _Optional[str] = ..., previous_version: _Optional[str] = ..., time: _Optional[float] = ..., moved_by: _Optional[str] = ...) -> None: ...

class ModelAliases(_message.Message):
    __slots__ = ("model", "run_id", "aliases", "history")
    class AliasesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    model: str
    run_id: str
    aliases: _containers.ScalarMap[str, str]
    history: _containers.RepeatedCompositeFieldContainer[AliasMove]
    def __init__(self, model: _Optional[str] = ..., run_id: _Optional[str] = ..., aliases: _Optional[_Mapping[str, str]] = ..., history: _Optional[_Iterable[_Union[AliasMove, _Mapping]]] = ...) -> None: ...

class RouteWeight(_message.Message):
    __slots__ = ("version", "weight")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    version: str
    weight: int
    def __init__(self, version: _Optional[str] = ..., weight: _Optional[int] = ...) -> None: ...

class SetRouteRequest(_message.Message):
    __slots__ = ("model", "weights", "shadow")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    model: str
    weights: _containers.RepeatedCompositeFieldContainer[RouteWeight]
    shadow: str
    def __init__(self, model: _Optional[str] = ..., weights: _Optional[_Iterable[_Union[RouteWeight, _Mapping]]] = ..., shadow: _Optional[str] = ...) -> None: ...

class GetRouteRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class TrafficPolicy(_message.Message):
    __slots__ = ("model", "run_id", "weights", "shadow", "revision")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    model: str
    run_id: str
    weights: _containers.RepeatedCompositeFieldContainer[RouteWeight]
    shadow: str
    revision: int
    def __init__(self, model: _Optional[str] = ..., run_id: _Optional[str] = ..., weights: _Optional[_Iterable[_Union[RouteWeight, _Mapping]]] = ..., shadow: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...
