"""A framework's worker half: the training function each rank runs, and the package it needs.

What a framework needs on a worker (its module and package) is its ``Framework`` declaration's.
Frameworks with worker code of their own (the declarative trainers) register a backend in the
``trainwire.worker_backends`` entry-point group; every other framework runs the user's loop in
a ``DataParallelBackend`` made from its declaration. The coordinator's half (validation,
rendezvous, environment) lives with the coordinator.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Protocol

import cloudpickle

from trainwire.checkpoint import METADATA_NAME
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.frameworks import WORKER_BACKENDS_GROUP, Framework, get_framework, require_installed
from trainwire_core.structs import merge_dicts, struct_to_dict
from trainwire_core.v1 import coordinator_pb2


class TrainWorker(Protocol):
    """What a backend's training function gets of the worker actor running it."""

    # Per-process state a backend keeps between its set-up and its training function
    # (process groups, the XGBoost tracker's arguments, LightGBM's network).
    state: dict[str, Any]


class WorkerBackend:
    """What a worker runs for one framework: its declaration, and the training function.

    Subclasses implement ``train``; ``get_backend`` makes one for a framework.
    """

    def __init__(self, framework: Framework) -> None:
        self.framework = framework

    @property
    def name(self) -> str:
        return self.framework.name

    def check_installed(self) -> None:
        """Raises FrameworkNotInstalledError, with the install hint, when this host lacks the framework's module."""
        fw = self.framework
        if fw.module:
            require_installed(fw.module, fw.name, fw.package, fw.install)

    @staticmethod
    def train(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
        """Runs on every worker, inside the session."""
        raise NotImplementedError


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


def run_train_loop(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> Any:
    """Calls ``train_loop_per_worker(config)`` (or with no argument if it takes none); returns its return."""
    fn, config = load_train_loop(request.data_parallel)
    if inspect.signature(fn).parameters:
        return fn(config)
    return fn()


class DataParallelBackend(WorkerBackend):
    """Runs the user's loop on every worker, for any framework whose declaration is all it needs.

    Torch, TensorFlow, Horovod, JAX, HuggingFace and a bare DataParallelTrainer: the coordinator's
    half sets the framework up (process group, ``TF_CONFIG``, ...); here the loop runs.
    """

    train = staticmethod(run_train_loop)


def write_model_metadata(directory: str, framework: str, feature_columns: list[str], label_column: str) -> None:
    """Records what the model takes, so predictors can describe and check inputs."""
    meta = {"framework": framework, "feature_columns": feature_columns, "label_column": label_column}
    with open(os.path.join(directory, METADATA_NAME), "w") as f:
        json.dump(meta, f)


@functools.cache
def backend_class(name: str) -> type[WorkerBackend]:
    """The class a distribution registered for framework ``name``; else the user's loop, run as it is."""
    found = entry_points(group=WORKER_BACKENDS_GROUP, name=name)
    return next(iter(found)).load() if found else DataParallelBackend


def get_backend(name: str, *, check_installed: bool = False) -> WorkerBackend:
    """The worker half of the framework declared as ``name``.

    Raises:
        InvalidArgumentError: Unknown framework (field ``framework``).
        FrameworkNotInstalledError: ``check_installed`` and its package is missing.
    """
    backend = backend_class(name)(get_framework(name))
    if check_installed:
        backend.check_installed()
    return backend


def free_port() -> int:
    """A TCP port free on this host now: what a framework's rendezvous listens on.

    The worker actor offers it as ``worker.free_port()`` to the functions the coordinator's
    backends run on it; it needs nothing of the actor (and does not come back into it).
    """
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
