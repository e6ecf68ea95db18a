"""The session interface the worker runtime implements for ``trainwire.train``."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from trainwire.checkpoint import Checkpoint


@dataclass(frozen=True)
class TrainContext:
    """Where this worker stands in its run, as ``ray.train.get_context()`` tells."""

    run_id: str
    run_name: str
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    attempt: int = 0
    storage_path: str = ""
    # This worker's local artifact directory; SyncConfig(sync_artifacts=True) copies it to the store.
    trial_dir: str = ""

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.run_name

    def get_trial_name(self) -> str:
        return self.run_name

    def get_storage(self) -> str:
        return self.storage_path

    def get_trial_dir(self) -> str:
        """A local directory for this worker's artifacts (logs, plots, ...), as in Ray Train."""
        return self.trial_dir


class TrainSession(abc.ABC):
    """What a worker provides to the training loop running on it."""

    context: TrainContext

    @abc.abstractmethod
    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None: ...

    @abc.abstractmethod
    def get_checkpoint(self) -> Checkpoint | None: ...

    @abc.abstractmethod
    def get_dataset_shard(self, name: str) -> Any: ...


_session: TrainSession | None = None


def set_session(session: TrainSession | None) -> None:
    global _session
    _session = session


def get_session() -> TrainSession:
    if _session is None:
        raise RuntimeError(
            "trainwire.train functions work only inside a training loop run by a trainwire worker "
            "(pass the loop to a Trainer and call fit())"
        )
    return _session
