"""A framework's worker half: the training function each rank runs, and the package it needs.

What a framework needs on a worker (its module and package) is its ``Framework`` declaration's.
Frameworks with worker code of their own (the declarative trainers) register a backend in the
``trainwire.worker_backends`` entry-point group; every other framework runs the user's loop in
a ``DataParallelBackend`` made from its declaration. The coordinator's half (validation,
rendezvous, environment) lives with the coordinator.
"""

from __future__ import annotations

import functools
import json
import os
from importlib.metadata import entry_points
from typing import Any, Protocol

from trainwire.checkpoint import METADATA_NAME
from trainwire_core.errors import require_installed
from trainwire_core.frameworks import WORKER_BACKENDS_GROUP, Framework, get_framework
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


def write_model_metadata(directory: str, framework: str, feature_columns: list[str], label_column: str) -> None:
    """Records what the model takes, so predictors can describe and check inputs."""
    meta = {"framework": framework, "feature_columns": feature_columns, "label_column": label_column}
    with open(os.path.join(directory, METADATA_NAME), "w") as f:
        json.dump(meta, f)


@functools.cache
def backend_class(name: str) -> type[WorkerBackend]:
    """The class a distribution registered for framework ``name``; else the user's loop, run as it is."""
    found = entry_points(group=WORKER_BACKENDS_GROUP, name=name)
    if found:
        return next(iter(found)).load()
    # Imported here: the data-parallel backend builds on this module.
    from trainwire_worker.backends.data_parallel import DataParallelBackend

    return DataParallelBackend


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
