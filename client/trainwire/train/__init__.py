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

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.data_config import DataConfig
from trainwire.result import Result
from trainwire.train.session import TrainContext, get_session
from trainwire.train.v2 import (
    BackendConfig,
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    LoggingConfig,
    PreemptionInfo,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
    TrainRunContext,
    UserCallback,
    ValidationConfig,
    ValidationFn,
    ValidationTaskConfig,
)
from trainwire.train.v2.api.exceptions import (
    ControllerError,
    NCCLHangError,
    PreemptionError,
    TrainingFailedError,
    WorkerGroupError,
)

# The dataset a trainer fits its preprocessor on and the loop trains with, as Ray's.
TRAIN_DATASET_KEY = "train"

__all__ = [
    "TRAIN_DATASET_KEY",
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "LoggingConfig",
    "NCCLHangError",
    "PreemptionError",
    "PreemptionInfo",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "TrainRunContext",
    "TrainingFailedError",
    "UserCallback",
    "ValidationConfig",
    "ValidationFn",
    "ValidationTaskConfig",
    "WorkerGroupError",
    "get_all_reported_checkpoints",
    "get_preemption_info",
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


def report(
    metrics: dict[str, Any],
    checkpoint: Checkpoint | None = None,
    checkpoint_dir_name: str | None = None,
    checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
    delete_local_checkpoint_after_upload: bool | None = None,
    checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    validation: bool | ValidationTaskConfig = False,
) -> None:
    """Reports metrics (and optionally a checkpoint) from this worker, as Ray Train V2's.

    Every worker must call ``report`` the same number of times; rank 0's metrics are the
    run's. Checkpoints are committed in report order.

    Args:
        metrics: JSON-able metrics.
        checkpoint: A checkpoint to persist in the run's storage.
        checkpoint_dir_name: The checkpoint's directory name (default ``checkpoint_<index>``);
            unique within the run.
        checkpoint_upload_mode: SYNC copies before returning (the directory may be deleted
            after); ASYNC returns at once and copies in the background (a local directory's
            files are hard-linked first where the filesystem allows, so the loop may delete it;
            else leave it until ``get_all_reported_checkpoints`` returns); NO_UPLOAD registers
            a checkpoint already in the run's storage.
        delete_local_checkpoint_after_upload: Delete the local directory once copied
            (default: True for ASYNC, else False).
        checkpoint_upload_fn: ``fn(checkpoint, dir_name) -> Checkpoint`` that persists the
            checkpoint itself into the run's storage (see ``get_context().get_storage()``).
        validation: True, or a ValidationTaskConfig: run the trainer's ValidationConfig on
            this checkpoint, beside the loop; its metrics join the checkpoint's.
    """
    get_session().report(
        metrics,
        checkpoint,
        checkpoint_dir_name=checkpoint_dir_name,
        checkpoint_upload_mode=checkpoint_upload_mode,
        delete_local_checkpoint_after_upload=delete_local_checkpoint_after_upload,
        checkpoint_upload_fn=checkpoint_upload_fn,
        validation=validation,
    )


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """The run's committed checkpoints with their metrics, oldest first, once this worker's reports are in."""
    return get_session().get_all_reported_checkpoints(consistency_mode, timeout_s)


def get_checkpoint() -> Checkpoint | None:
    """The latest checkpoint of this run, or the one it resumes from, or None."""
    return get_session().get_checkpoint()


def get_context() -> TrainContext:
    """Ranks, world size and the run's name."""
    return get_session().context


def get_dataset_shard(dataset_name: str | None = "train") -> Any:
    """This worker's shard of a dataset passed to the trainer (a Ray Data iterator)."""
    return get_session().get_dataset_shard(dataset_name or "train")


def get_preemption_info() -> PreemptionInfo | None:
    """The imminent preemption of one of the run's nodes, or None, agreed by every worker.

    As Ray's, every worker must call it the same number of times: it is a barrier
    (``collective.broadcast_from_rank_zero``). trainwire's workers get no preemption notice
    from the cluster, so the agreed answer is None; a preempted node ends in a restart from
    the latest checkpoint, as any worker failure does.
    """
    from trainwire.train.collective import broadcast

    return broadcast(None, "trainwire.train.get_preemption_info")


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
# Ray's ``ray.train.<framework>`` paths: each is trainwire's own module under a second name (one
# module object, so classes, isinstance checks and lazy attributes are the same under both).
ALIASES = {
    "batch_predictor": "trainwire.batch_predictor",
    "horovod": "trainwire.horovod",
    "huggingface": "trainwire.huggingface",
    "jax": "trainwire.jax",
    "lightgbm": "trainwire.lightgbm",
    "predictor": "trainwire.predictor",
    "rl": "trainwire.rllib",
    "sklearn": "trainwire.sklearn",
    "tensorflow": "trainwire.tensorflow",
    "torch": "trainwire.torch",
    "xgboost": "trainwire.xgboost",
}
_SUBMODULES = frozenset({"base_trainer", "collective", "data_parallel_trainer", "v2", *ALIASES})


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``trainwire.train.<name>`` as the module ``ALIASES`` names (one hook for every framework)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in ALIASES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(ALIASES[spec.name.rpartition(".")[2]])
        self._own_spec = module.__spec__  # the import system sets the alias's spec on it: put back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._own_spec


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
