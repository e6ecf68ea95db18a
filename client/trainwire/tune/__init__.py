"""Hyperparameter search with Ray Tune's API, as ``ray.tune``; the search runs in the coordinator.

from trainwire import tune
from trainwire.torch import TorchTrainer
from trainwire.tune.schedulers import ASHAScheduler

tuner = tune.Tuner(
    TorchTrainer(train_loop, scaling_config=ScalingConfig(num_workers=2)),
    param_space={"train_loop_config": {"lr": tune.loguniform(1e-4, 1e-1), "epochs": 10}},
    tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=16, scheduler=ASHAScheduler()),
)
best = tuner.fit().get_best_result()
"""

from trainwire.config import CheckpointConfig, FailureConfig, RunConfig
from trainwire.tune import stopper
from trainwire.tune.callback import Callback
from trainwire.tune.error import TuneError
from trainwire.tune.result_grid import ResultGrid
from trainwire.tune.search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from trainwire.tune.stopper import Stopper
from trainwire.tune.trainable import get_checkpoint, report, with_parameters, with_resources
from trainwire.tune.tune_config import TuneConfig
from trainwire.tune.tuner import Tuner

__all__ = [
    "Callback",
    "CheckpointConfig",
    "FailureConfig",
    "ResultGrid",
    "RunConfig",
    "Stopper",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "choice",
    "get_checkpoint",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "report",
    "sample_from",
    "stopper",
    "uniform",
    "with_parameters",
    "with_resources",
]
