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
import os
import sys
import types
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.data_config import DataConfig
from trainwire.result import Result
from trainwire.train.session import (
    TrainContext,
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    get_experiment_name,
    get_local_rank,
    get_local_world_size,
    get_node_rank,
    get_trial_dir,
    get_trial_name,
    get_world_rank,
    get_world_size,
    report,
)
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


# A collective (every worker calls it), so it stands on ``collective``, which stands on the session.
def get_preemption_info() -> PreemptionInfo | None:
    """The imminent preemption of one of the run's nodes, or None, agreed by every worker.

    As Ray's, every worker must call it the same number of times: it is a barrier
    (``collective.broadcast_from_rank_zero``). trainwire's workers get no preemption notice
    from the cluster, so the agreed answer is None; a preempted node ends in a restart from
    the latest checkpoint, as any worker failure does.
    """
    from trainwire.train.collective import broadcast

    return broadcast(None, "trainwire.train.get_preemption_info")


# Ray's ``ray.train.<framework>`` paths: each is trainwire's own module under a second name (one
# module object, so classes, isinstance checks and lazy attributes are the same under both),
# loaded when first named: ``import ray.train as train`` code calls ``train.torch.prepare_model(...)``
# on workers that never imported the submodule.
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


class _AliasFinder(importlib.abc.PathEntryFinder, importlib.abc.Loader):
    """Imports ``trainwire.train.<name>`` as the module ``ALIASES`` names (one finder for every framework).

    It finds modules on a path entry of this package's own (``_ALIAS_ENTRY``, last on its
    ``__path__``): the import system asks it only about this package's submodules that are not
    files of the package, never about other imports.
    """

    def find_spec(self, fullname: str, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.rpartition(".")[2] not in ALIASES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(ALIASES[spec.name.rpartition(".")[2]])
        self._own_spec = module.__spec__  # the import system sets the alias's spec on it: put back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._own_spec


# The entry's finder is set in the import system's cache of path entry finders, where no path
# hook need recognise it; an absolute entry stays there across ``importlib.invalidate_caches()``.
_ALIAS_ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "<framework aliases>")
if not isinstance(sys.path_importer_cache.get(_ALIAS_ENTRY), _AliasFinder):
    sys.path_importer_cache[_ALIAS_ENTRY] = _AliasFinder()
if _ALIAS_ENTRY not in __path__:
    __path__.append(_ALIAS_ENTRY)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
