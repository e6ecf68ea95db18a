"""LightGBM support, mirroring ``ray.train.lightgbm``."""

from trainwire.lightgbm.checkpoint import LightGBMCheckpoint
from trainwire.lightgbm.predictor import LightGBMPredictor
from trainwire.lightgbm.trainer import LightGBMTrainer

__all__ = ["LightGBMCheckpoint", "LightGBMPredictor", "LightGBMTrainer"]
