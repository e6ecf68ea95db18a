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

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, SyncConfig
from trainwire.result import Result
from trainwire.tune import stopper
from trainwire.tune.analysis import ExperimentAnalysis
from trainwire.tune.callback import Callback
from trainwire.tune.class_trainable import Trainable
from trainwire.tune.context import TuneContext, get_context
from trainwire.tune.error import TuneError
from trainwire.tune.placement_groups import PlacementGroupFactory
from trainwire.tune.progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter
from trainwire.tune.registry import create_scheduler, create_searcher, register_env, register_trainable
from trainwire.tune.result_grid import ResultGrid
from trainwire.tune.run import Experiment, run, run_experiments
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
from trainwire.tune.tune_config import ResumeConfig, TuneConfig
from trainwire.tune.tuner import Tuner

__all__ = [
    "CLIReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "JupyterNotebookReporter",
    "PlacementGroupFactory",
    "ProgressReporter",
    "Result",
    "ResultGrid",
    "ResumeConfig",
    "RunConfig",
    "Stopper",
    "SyncConfig",
    "Trainable",
    "TuneConfig",
    "TuneContext",
    "TuneError",
    "Tuner",
    "choice",
    "create_scheduler",
    "create_searcher",
    "get_checkpoint",
    "get_context",
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
    "register_env",
    "register_trainable",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "stopper",
    "uniform",
    "with_parameters",
    "with_resources",
]
