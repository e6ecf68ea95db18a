"""``ray.air.session``: what a training loop calls on its worker, as in Ray 2.4.

Each function is ``trainwire.train``'s (``session.report`` is ``train.report``), so a Ray 2.4
loop runs unchanged::

    from trainwire.air import session
    from trainwire.air.checkpoint import Checkpoint

    session.report({"loss": loss}, checkpoint=Checkpoint.from_dict({"model": model.state_dict()}))
"""

from __future__ import annotations

from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.train import (
    get_experiment_name,
    get_local_rank,
    get_local_world_size,
    get_node_rank,
    get_trial_dir,
    get_trial_name,
    get_world_rank,
    get_world_size,
)

__all__ = [
    "get_checkpoint",
    "get_dataset_shard",
    "get_experiment_name",
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "get_world_rank",
    "get_world_size",
    "report",
]


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Reports metrics (and optionally a checkpoint) from this worker; see ``trainwire.train.report``."""
    train.report(metrics, checkpoint=checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The latest checkpoint of this run, or the one it resumes from, or None."""
    return train.get_checkpoint()


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's shard of a dataset passed to the trainer (default: ``"train"``)."""
    return train.get_dataset_shard(dataset_name or "train")


def get_trial_id() -> str:
    """The run's id (Ray's trial id)."""
    return train.get_context().run_id
