"""A framework's coordinator half (Ray Train V2's backend interface) and how it is found.

The coordinator validates a run, sets up the framework's rendezvous on the worker
group and gives the workers their environment; the training function itself is the
worker runtime's half. Each framework's half is registered in the
``trainwire.coordinator_backends`` entry-point group, so the controller never
branches on a framework. ``DataParallelBackend`` is the half of every trainer that runs the
user's loop (plain, or extended by Torch, JAX, Horovod, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.frameworks import COORDINATOR_BACKENDS_GROUP, registered_half
from trainwire_core.v1 import common_pb2, coordinator_pb2


class WorkerGroup(Protocol):
    """What a backend sees of a run's worker group (``placement.WorkerGroup``).

    Functions sent with ``execute*`` run on each worker as ``fn(worker, *args)``; ``worker``
    is the worker runtime's actor, with ``state`` (a dict kept for the process).
    """

    actors: list[Any]
    metas: list[Any]

    def __len__(self) -> int: ...

    async def execute(self, fn: Callable[..., Any], *args: Any) -> list[Any]: ...

    async def execute_single(self, rank: int, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def execute_each(self, fn: Callable[..., Any], args_by_rank: list[tuple[Any, ...]]) -> list[Any]: ...


def free_port(worker: Any) -> int:
    """A TCP port free on the worker's host now, where a framework's rendezvous listens.

    Sent to the workers (``group.execute(free_port)``), as the rest of a framework's set-up is;
    it needs nothing of the worker's actor.
    """
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class CoordinatorBackend:
    """A framework's hooks around a worker group's life, run in the coordinator.

    Subclasses set ``name`` and the trainer spec they take (``spec_field``).
    """

    name: str = ""
    spec_field: str = "data_parallel"
    # True: datasets reach workers as Ray Data iterators (streaming_split);
    # False: as ShardSpecs the worker reads itself.
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

    def for_request(self, request: coordinator_pb2.FitRequest) -> CoordinatorBackend:
        """The backend that runs ``request``: itself, unless the framework's trainer has two forms
        (XGBoost's and LightGBM's declarative one, and a training function)."""
        return self

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """After the actors start: set up the framework's process group."""

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """Just before the training function runs."""

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        """Before the actors are killed (best effort)."""

    def worker_env(self, request: coordinator_pb2.FitRequest) -> dict[str, str]:
        """Environment variables the worker processes need at start."""
        return {}

    def placement_scaling(self, request: coordinator_pb2.FitRequest) -> common_pb2.ScalingConfig:
        """The scaling the run's workers are placed from (default: the request's as it is)."""
        return request.scaling_config

    def side_bundles(self, request: coordinator_pb2.FitRequest) -> list[dict[str, float]]:
        """Bundles reserved after the workers' for Ray actors the training function starts itself.

        When there are any, the workers' child actors are captured into the run's placement
        group (RLlib's env runners find their bundles there by index).
        """
        return []


class DataParallelBackend(CoordinatorBackend):
    """Runs user code on every worker; subclasses add the framework's setup."""

    name = "data_parallel"
    spec_field = "data_parallel"
    uses_ray_data = True

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        loop = request.data_parallel.train_loop
        source = loop.WhichOneof("source")
        if source is None:
            raise InvalidArgumentError(
                "data_parallel.train_loop needs pickled_function or entry_point",
                field="data_parallel.train_loop",
            )
        if source == "entry_point" and ":" not in loop.entry_point:
            raise InvalidArgumentError(
                f"entry point must look like 'package.module:function', got {loop.entry_point!r}",
                field="data_parallel.train_loop.entry_point",
            )
        # "train" is the default name to split, whether or not a run has such a dataset.
        unknown = sorted(set(request.data_parallel.data_config.datasets_to_split) - set(datasets) - {"train"})
        if unknown:
            raise InvalidArgumentError(
                f"datasets_to_split names {', '.join(map(repr, unknown))}, not among the run's datasets "
                f"({', '.join(sorted(datasets)) or 'none'})",
                field="data_parallel.data_config.datasets_to_split",
            )


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


def get_backend(name: str) -> CoordinatorBackend:
    """The coordinator half of the framework registered as ``name``.

    Raises:
        InvalidArgumentError: Unknown framework (field ``framework``).
    """
    return registered_half(COORDINATOR_BACKENDS_GROUP, name)()
