"""Running the user's training loop: the train function of data-parallel backends."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cloudpickle

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import merge_dicts, struct_to_dict
from trainwire_core.v1 import coordinator_pb2
from trainwire_worker.backends.base import WorkerBackend

if TYPE_CHECKING:
    from trainwire_worker.backends.base import TrainWorker


def load_entry_point(entry_point: str) -> Callable[..., Any]:
    """Imports ``package.module:function``."""
    module, sep, attr = entry_point.partition(":")
    if not sep or not module or not attr:
        raise InvalidArgumentError(
            f"entry point must look like 'package.module:function', got {entry_point!r}",
            field="data_parallel.train_loop.entry_point",
        )
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn  # type: ignore[return-value]


def load_train_loop(spec: coordinator_pb2.DataParallelSpec) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The user's loop and its config, from pickled bytes or an entry point."""
    source = spec.train_loop.WhichOneof("source")
    fn = cloudpickle.loads(spec.train_loop.pickled_function) if source == "pickled_function" else None
    if source == "entry_point":
        fn = load_entry_point(spec.train_loop.entry_point)
    if fn is None:
        raise InvalidArgumentError("data_parallel.train_loop is required", field="data_parallel.train_loop")
    if spec.pickled_train_loop_config:
        config = cloudpickle.loads(spec.pickled_train_loop_config)
    else:
        config = struct_to_dict(spec.train_loop_config)
    if spec.HasField("config_overrides"):  # a search trial's parameters
        config = merge_dicts(config or {}, struct_to_dict(spec.config_overrides))
    return fn, config


def run_train_loop(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    """Calls ``train_loop_per_worker(config)`` (or with no argument if it takes none)."""
    fn, config = load_train_loop(request.data_parallel)
    if inspect.signature(fn).parameters:
        fn(config)
    else:
        fn()


class DataParallelBackend(WorkerBackend):
    """Runs the user's loop on every worker, for any framework whose declaration is all it needs.

    Torch, TensorFlow, Horovod, JAX, HuggingFace and a bare DataParallelTrainer: the coordinator's
    half sets the framework up (process group, ``TF_CONFIG``, ...); here the loop runs.
    """

    train = staticmethod(run_train_loop)
