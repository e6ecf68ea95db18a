"""A framework's worker half: the training function each rank runs, and the package it needs.

Each framework's half is registered in the ``trainwire.worker_backends`` entry-point group;
the coordinator's half (validation, rendezvous, environment) lives with the coordinator.
"""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from trainwire.checkpoint import METADATA_NAME
from trainwire_core.errors import require_installed
from trainwire_core.frameworks import WORKER_BACKENDS_GROUP, registered_half
from trainwire_core.v1 import coordinator_pb2


class TrainWorker(Protocol):
    """What a backend's training function gets of the worker actor running it."""

    # Per-process state a backend keeps between its set-up and its training function
    # (process groups, the XGBoost tracker's arguments, LightGBM's network).
    state: dict[str, Any]


class WorkerBackend:
    """What a worker runs for one framework.

    Subclasses set ``name``, the ``module`` they import (its absence is reported
    with the hint), its ``package`` and implement ``train``.
    """

    name: str = ""
    module: str = ""
    package: str = ""
    install: str = ""  # how to install the package, when not `pip install <package>`

    @staticmethod
    def train(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
        """Runs on every worker, inside the session."""
        raise NotImplementedError


def write_model_metadata(directory: str, framework: str, feature_columns: list[str], label_column: str) -> None:
    """Records what the model takes, so predictors can describe and check inputs."""
    meta = {"framework": framework, "feature_columns": feature_columns, "label_column": label_column}
    with open(os.path.join(directory, METADATA_NAME), "w") as f:
        json.dump(meta, f)


def get_backend(name: str, *, check_installed: bool = False) -> WorkerBackend:
    """The worker half of the framework registered as ``name``.

    Raises:
        InvalidArgumentError: Unknown framework (field ``framework``).
        FrameworkNotInstalledError: ``check_installed`` and its package is missing.
    """
    backend: WorkerBackend = registered_half(WORKER_BACKENDS_GROUP, name)()
    if check_installed:
        require_installed(backend.module, backend.name, backend.package, backend.install)
    return backend
