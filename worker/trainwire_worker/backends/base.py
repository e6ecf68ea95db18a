"""The backend interface (as Ray Train V2's) and the registry of backends."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from trainwire import frameworks
from trainwire.checkpoint import METADATA_NAME
from trainwire.dataset_schema import DatasetSchema
from trainwire.errors import InvalidArgumentError, require_installed
from trainwire.v1 import coordinator_pb2

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker


class WorkerGroup(Protocol):
    """What a backend sees of a run's worker group; the coordinator's placement owns the real one."""

    actors: list[Any]
    metas: list[Any]

    def __len__(self) -> int: ...

    async def execute(self, fn: Callable[..., Any], *args: Any) -> list[Any]: ...

    async def execute_single(self, rank: int, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def execute_each(self, fn: Callable[..., Any], args_by_rank: list[tuple[Any, ...]]) -> list[Any]: ...


class Backend:
    """A framework's hooks around a worker group's life.

    Subclasses set ``name``, ``module`` and ``package``, the trainer spec
    they take (``spec_field``) and implement ``train``.
    """

    name: str = ""
    module: str = ""  # imported on workers; its absence is reported with the hint
    package: str = ""
    install: str = ""  # how to install the package, when not `pip install <package>`
    spec_field: str = "data_parallel"
    # True: datasets reach workers as Ray Data iterators (streaming_split);
    # False: as ShardSpecs the backend reads itself.
    uses_ray_data: bool = True
    # True when no user code keeps state in the worker process, so a warm
    # worker can serve the next run of the same shape.
    reuse_workers: bool = False

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        """Raises InvalidArgumentError naming the field when the request cannot run."""
        which = request.WhichOneof("trainer")
        if which != self.spec_field:
            raise InvalidArgumentError(
                f"framework {self.name!r} takes a {self.spec_field} spec, got {which or 'none'}",
                field=self.spec_field,
            )

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """After the actors start: set up the framework's process group."""

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """Just before the training function runs."""

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """Before the actors are killed (best effort)."""

    def worker_env(self, request: coordinator_pb2.FitRequest) -> dict[str, str]:
        """Environment variables the worker processes need at start."""
        return {}

    @staticmethod
    def train(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
        """Runs on every worker, inside the session."""
        raise NotImplementedError


def check_tabular_datasets(datasets: dict[str, DatasetSchema], label_column: str, field: str) -> None:
    """A declarative trainer needs a "train" dataset and its label column in every dataset."""
    if "train" not in datasets:
        raise InvalidArgumentError("datasets must include 'train'", field="datasets")
    if not label_column:
        raise InvalidArgumentError(f"{field} is required", field=field)
    for name, schema in datasets.items():
        if label_column not in schema.columns:
            raise InvalidArgumentError(
                f"label column {label_column!r} is not in dataset {name!r} (columns: {', '.join(schema.columns)})",
                field=field,
            )


def write_model_metadata(directory: str, framework: str, feature_columns: list[str], label_column: str) -> None:
    """Records what the model takes, so predictors can describe and check inputs."""
    meta = {"framework": framework, "feature_columns": feature_columns, "label_column": label_column}
    with open(os.path.join(directory, METADATA_NAME), "w") as f:
        json.dump(meta, f)


def get_backend(name: str, *, check_installed: bool = False) -> Backend:
    """The backend of the framework registered as ``name`` (``trainwire.frameworks``).

    Raises:
        InvalidArgumentError: Unknown framework (field ``framework``).
        FrameworkNotInstalledError: ``check_installed`` and its package is missing.
    """
    backend: Backend = frameworks.get_framework(name).backend_class()()
    if check_installed:
        require_installed(backend.module, backend.name, backend.package, backend.install)
    return backend
