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

    def get_storage(self) -> StorageInfo:
        """The run's directory in the shared store (a URI string), with Ray's StorageContext helpers."""
        return StorageInfo(self.storage_path)

    def get_trial_dir(self) -> str:
        """A local directory for this worker's artifacts (logs, plots, ...), as in Ray Train."""
        return self.trial_dir


class StorageInfo(str):
    """The URI of the run's directory in the store; a ``str``, with Ray's ``StorageContext`` helpers.

    ``build_checkpoint_path_from_name(name)`` is where a checkpoint of that directory name is
    committed: a loop that writes there itself reports it with ``CheckpointUploadMode.NO_UPLOAD``.
    """

    @property
    def experiment_fs_path(self) -> str:
        return str(self)

    @property
    def storage_path(self) -> str:
        return str(self)

    def build_checkpoint_path_from_name(self, name: str) -> str:
        return f"{str(self).split('?', 1)[0].rstrip('/')}/checkpoints/{name}" + (
            "?" + str(self).split("?", 1)[1] if "?" in self else ""
        )


class TrainSession(abc.ABC):
    """What a worker provides to the training loop running on it."""

    context: TrainContext

    @abc.abstractmethod
    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None, **options: Any) -> None:
        """``options``: Train V2's checkpoint_dir_name, checkpoint_upload_mode,
        delete_local_checkpoint_after_upload, checkpoint_upload_fn and validation."""

    def get_all_reported_checkpoints(self, consistency_mode: Any, timeout_s: float | None) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not keep reported checkpoints")

    def set_validation(self, config: Any) -> None:
        """The trainer's ValidationConfig, set before the loop starts."""
        self.validation_config = config

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


def get_session_or_none() -> TrainSession | None:
    """The session of the loop running in this process, if one is."""
    return _session
