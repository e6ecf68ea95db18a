"""trainwire: Ray Train's API as a service.

import trainwire
from trainwire import ScalingConfig, RunConfig, train, tune
trainwire.init()
"""

from typing import TYPE_CHECKING, Any

from trainwire import train, tune
from trainwire.batch_predictor import BatchPredictor
from trainwire.checkpoint import Checkpoint
from trainwire.client import CoordinatorClient
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.data_config import DataConfig
from trainwire.predictor import Predictor
from trainwire.result import Result
from trainwire.session_client import get_client, init, shutdown
from trainwire.trainer import BaseTrainer, DataParallelTrainer
from trainwire_core.errors import TrainingFailedError, TrainwireError

if TYPE_CHECKING:
    from trainwire.predictor_client import PredictorClient

# Loaded when first named: the inference protocol's stubs are serving's, not a fit's (a training
# script, and every worker that unpickles its loop, imports ``trainwire``).
_LAZY = {"PredictorClient": "trainwire.predictor_client"}

__all__ = [
    "BaseTrainer",
    "BatchPredictor",
    "Checkpoint",
    "CheckpointConfig",
    "CoordinatorClient",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "Predictor",
    "PredictorClient",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TrainingFailedError",
    "TrainwireError",
    "get_client",
    "init",
    "shutdown",
    "train",
    "tune",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
