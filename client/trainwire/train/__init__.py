"""The API a training loop uses on a worker, mirroring ``ray.train``.

Inside ``train_loop_per_worker``::

    from trainwire import train
    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    train.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))

``get_world_size()``, ``get_world_rank()`` and the like are shorthands for ``get_context()``'s,
as ``ray.air.session`` had them. ``trainwire.train.torch``, ``.xgboost``, ... are the framework
packages under Ray's module paths (``trainwire.torch``, ...), imported only when named.
"""

from __future__ import annotations

from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.train.context import TrainContext, get_session

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TrainContext",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_experiment_name",
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_trial_dir",
    "get_trial_name",
    "get_world_rank",
    "get_world_size",
    "report",
]


def report(metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
    """Reports metrics (and optionally a checkpoint) from this worker.

    Every worker must call ``report`` the same number of times; rank 0's
    metrics are the run's. Checkpoint files are copied to the shared store
    before this returns, so the directory may be deleted afterwards.
    """
    get_session().report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The latest checkpoint of this run, or the one it resumes from, or None."""
    return get_session().get_checkpoint()


def get_context() -> TrainContext:
    """Ranks, world size and the run's name."""
    return get_session().context


def get_dataset_shard(name: str = "train") -> Any:
    """This worker's shard of a dataset passed to the trainer (a Ray Data iterator)."""
    return get_session().get_dataset_shard(name)


def get_world_size() -> int:
    """How many workers the run has."""
    return get_context().get_world_size()


def get_world_rank() -> int:
    """This worker's rank among all workers (0 is the one whose metrics are the run's)."""
    return get_context().get_world_rank()


def get_local_rank() -> int:
    """This worker's rank among the workers on its node."""
    return get_context().get_local_rank()


def get_local_world_size() -> int:
    """How many of the run's workers are on this worker's node."""
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    """The rank of this worker's node."""
    return get_context().get_node_rank()


def get_trial_name() -> str:
    """The run's name (Ray's trial name)."""
    return get_context().get_trial_name()


def get_experiment_name() -> str:
    """The run's name (Ray's experiment name)."""
    return get_context().get_experiment_name()


def get_trial_dir() -> str:
    """A local directory for this worker's artifacts."""
    return get_context().get_trial_dir()


# Ray's framework module paths, loaded when first named: ``import ray.train as train`` code
# calls ``train.torch.prepare_model(...)`` on workers that never imported the submodule.
_SUBMODULES = frozenset(
    {
        "base_trainer",
        "batch_predictor",
        "data_parallel_trainer",
        "horovod",
        "huggingface",
        "lightgbm",
        "predictor",
        "rl",
        "sklearn",
        "tensorflow",
        "torch",
        "xgboost",
    }
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
