"""Turning a search's sampled parameters into a trial's FitRequest, and what a trial needs of the cluster."""

from __future__ import annotations

import pickle
import types
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import ray

from trainwire_coordinator.admission.fit_checks import placement_plan
from trainwire_coordinator.backends import get_backend
from trainwire_coordinator.tune.space import Param
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import merge_dicts, struct_to_dict, to_struct
from trainwire_core.v1 import coordinator_pb2, tune_pb2


def trial_name(tune_name: str, index: int) -> str:
    """A trial's run name, as Ray names trial directories by a counter."""
    return f"{tune_name}_{index:05d}"


def trial_request(
    base: coordinator_pb2.FitRequest,
    config: dict[str, Any],
    name: str,
    idempotency_key: str,
    search_space: Sequence[tune_pb2.SearchParam] = (),
) -> coordinator_pb2.FitRequest:
    """The search's trainer with one trial's parameters merged in, as Ray merges param_space into a Trainer.

    Args:
        base: The search's trainer.
        config: The trial's parameters (constants and sampled values), keyed like param_space.
        name: The trial run's name.
        idempotency_key: Makes creating the trial's run idempotent (a coordinator taking over may try again).
        search_space: The search's parameters: where one holds alternatives (objects), the config
            holds the sampled alternative's label, and the alternative is put in its place.
    """
    request = coordinator_pb2.FitRequest()
    request.CopyFrom(base)
    config = _place_alternatives(request, config, search_space)
    for root, value in config.items():
        field = f"param_space.{root}"
        if root == "train_loop_config":
            # The loop's own config may be pickled: the workers, who unpickle it, merge these in.
            request.data_parallel.config_overrides.CopyFrom(to_struct(_as_dict(value, field), field))
        elif root == "params":
            merged = merge_dicts(struct_to_dict(request.gbdt.params), _as_dict(value, field))
            request.gbdt.params.CopyFrom(to_struct(merged, field))
        elif root == "num_boost_round":
            request.gbdt.num_boost_round = _int(value, field)
        elif root == "scaling_config":
            _set_scaling(request, _as_dict(value, field))
    request.run_config.name = name
    request.idempotency_key = idempotency_key
    return request


class _Loads:
    """Unpickles, on the worker, to the object a pickle holds: the coordinator never loads user code."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        return (pickle.loads, (self.data,))


class _Merged:
    """Unpickles, on the worker, to ``merge_dicts(base, overrides)`` (either may hold ``_Loads``)."""

    def __init__(self, base: Any, overrides: dict[str, Any]) -> None:
        self.base, self.overrides = base, overrides

    def __reduce__(self) -> tuple[Any, ...]:
        return (merge_dicts, (self.base, self.overrides))


def _pop(config: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any], Any]:
    """``config`` without the value at ``path`` (a copy; dicts left empty are dropped), and that value."""
    if len(path) == 1:
        rest = dict(config)
        return rest, rest.pop(path[0], None)
    child = config.get(path[0])
    if not isinstance(child, dict):
        return config, None
    inner, value = _pop(child, path[1:])
    rest = dict(config)
    if inner:
        rest[path[0]] = inner
    else:
        rest.pop(path[0])
    return rest, value


def _place_alternatives(
    request: coordinator_pb2.FitRequest, config: dict[str, Any], search_space: Sequence[tune_pb2.SearchParam]
) -> dict[str, Any]:
    """Puts each sampled alternative in its place of ``request``; returns the config without them."""
    from trainwire_coordinator.tune.space import nest

    loop_values: dict[tuple[str, ...], Any] = {}
    for i, param in enumerate(search_space):
        if not param.domain.alternatives:
            continue
        path = tuple(param.path)
        field = f"search_space[{i}]"
        config, label = _pop(config, path)
        chosen = next((a for a in param.domain.alternatives if a.label == label), None)
        if chosen is None:
            raise InvalidArgumentError(f"{'/'.join(path)} has no alternative {label!r}", field=f"{field}.domain")
        kind = chosen.WhichOneof("value")
        if path[0] == "preprocessor":
            request.ClearField("pickled_preprocessor")
            request.ClearField("preprocessor")
            if kind == "pickled":
                request.pickled_preprocessor = chosen.pickled
            elif kind == "preprocessor":
                request.preprocessor.CopyFrom(chosen.preprocessor)
        elif path[0] == "datasets":
            request.datasets[path[1]].CopyFrom(chosen.dataset)
        elif path[0] == "train_loop_config" and kind == "pickled":
            loop_values[path[1:]] = _Loads(chosen.pickled)
        else:
            raise InvalidArgumentError(f"{'/'.join(path)} cannot hold alternatives", field=f"{field}.path")
    if loop_values:
        # The loop's config is built on the workers (which alone unpickle): base config, then these objects.
        spec = request.data_parallel
        base: Any = _Loads(spec.pickled_train_loop_config) if spec.pickled_train_loop_config else None
        if base is None:
            base = struct_to_dict(spec.train_loop_config)
        spec.pickled_train_loop_config = pickle.dumps(_Merged(base, nest(loop_values)))
    return config


def _as_dict(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{field} must be a dict, got {type(value).__name__}", field=field)
    return value


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        raise InvalidArgumentError(f"{field} must be a whole number, got {value!r}", field=field)
    return int(value)


def _set_scaling(request: coordinator_pb2.FitRequest, values: dict[str, Any]) -> None:
    scaling = request.scaling_config
    for key, value in values.items():
        field = f"param_space.scaling_config.{key}"
        if key == "num_workers":
            scaling.num_workers = _int(value, field)
            if scaling.num_workers < 1:
                raise InvalidArgumentError(f"{field} must be >= 1", field=field)
        elif key == "min_workers":  # an elastic group's lower bound (0: a fixed group)
            scaling.min_workers = _int(value, field)
        elif key == "use_gpu":
            scaling.use_gpu = bool(value)
        elif key == "placement_strategy":
            scaling.placement_strategy = str(value)
        elif key in ("resources_per_worker", "trainer_resources"):
            target = getattr(scaling, key)
            target.clear()
            for resource, amount in _as_dict(value, field).items():
                if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
                    raise InvalidArgumentError(f"{field}.{resource} must be a number >= 0", field=field)
                target[resource] = float(amount)
        else:
            raise InvalidArgumentError(f"scaling_config has no field {key!r}", field=field)


def trial_needs(request: coordinator_pb2.FitRequest) -> dict[str, float]:
    """The resources a trial's run reserves: its workers' bundles and its side bundles, summed.

    From the placement plan admission derives (``placement_plan``), before the trial's Fit is sent.
    """
    backend = get_backend(request.framework)
    return placement_plan(backend.for_request(request), request).needs()


def fits(need: dict[str, float], used: dict[str, float], total: dict[str, float]) -> bool:
    """Whether ``need`` fits in ``total`` beside ``used``."""
    return all(used.get(k, 0.0) + v <= total.get(k, 0.0) + 1e-9 for k, v in need.items())


def add(used: dict[str, float], need: dict[str, float]) -> None:
    for key, value in need.items():
        used[key] = used.get(key, 0.0) + value


class _Config(dict):
    """A dict whose keys read as attributes too (``spec.config.lr``), as Ray's sample_from spec."""

    def __getattr__(self, key: str) -> Any:
        try:
            value = self[key]
        except KeyError:
            raise AttributeError(key) from None
        return _Config(value) if isinstance(value, dict) else value


def _resolve_sample_from(
    functions: list[tuple[tuple[str, ...], bytes]], config: dict[str, Any], function_trainable: bool
) -> dict[str, Any]:
    """Calls each sample_from function with ``spec`` (``spec.config``: the config so far), in order.

    A function trainable's functions see its own config (param_space without the
    ``train_loop_config`` level), as Ray shows it to them.
    """
    from trainwire_coordinator.tune.space import nest

    for path, pickled in functions:
        fn: Callable[[Any], Any] = cloudpickle.loads(pickled)
        seen = config.get("train_loop_config", {}) if function_trainable else config
        value = fn(types.SimpleNamespace(config=_Config(seen)))
        config = nest({path: value}, config)
    return config


def resolve_sample_from(params: list[Param], config: dict[str, Any], function_trainable: bool) -> dict[str, Any]:
    """Resolves sample_from parameters on the cluster (user code never runs in the coordinator's process).

    Blocks: call it off the event loop.
    """
    task = ray.remote(num_cpus=0, max_retries=0)(_resolve_sample_from)
    functions = [(p.path, p.domain.pickled_function) for p in params]
    try:
        resolved = ray.get(task.remote(functions, config, function_trainable), timeout=120)
    except ray.exceptions.RayTaskError as exc:
        field = params[0].field + ".domain.pickled_function"
        raise InvalidArgumentError(f"a sample_from function raised: {exc.cause!r}", field=field) from None
    to_struct(resolved, "search_space.sample_from")  # its values must travel as JSON
    return resolved
