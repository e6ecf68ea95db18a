"""trainwire: Ray Train's API as a service.

import trainwire
from trainwire import ScalingConfig, RunConfig, train, tune
trainwire.init()
"""

from trainwire import train, tune
from trainwire.batch_predictor import BatchPredictor
from trainwire.checkpoint import Checkpoint
from trainwire.client import CoordinatorClient
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.data_config import DataConfig
from trainwire.predictor import Predictor
from trainwire.predictor_client import PredictorClient
from trainwire.result import Result
from trainwire.session_client import get_client, init, shutdown
from trainwire.trainer import BaseTrainer, DataParallelTrainer
from trainwire_core.errors import TrainingFailedError, TrainwireError

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
