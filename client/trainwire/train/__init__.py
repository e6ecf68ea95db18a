"""The API a training loop uses on a worker, mirroring ``ray.train``.

Inside ``train_loop_per_worker``::

    from trainwire import train
    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    train.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))
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
