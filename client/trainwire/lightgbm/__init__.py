"""LightGBM support, mirroring ``ray.train.lightgbm``."""

from trainwire.lightgbm.callbacks import RayTrainReportCallback, normalize_pandas_for_lightgbm
from trainwire.lightgbm.checkpoint import LightGBMCheckpoint
from trainwire.lightgbm.config import LightGBMConfig, get_network_params
from trainwire.lightgbm.predictor import LightGBMPredictor
from trainwire.lightgbm.trainer import LightGBMTrainer

__all__ = [
    "LightGBMCheckpoint",
    "LightGBMConfig",
    "LightGBMPredictor",
    "LightGBMTrainer",
    "RayTrainReportCallback",
    "get_network_params",
    "normalize_pandas_for_lightgbm",
]
