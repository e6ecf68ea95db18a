"""LightGBM support, mirroring ``ray.train.lightgbm``."""

from trainwire.lightgbm.predictor import LightGBMPredictor
from trainwire.lightgbm.trainer import LightGBMCheckpoint, LightGBMTrainer

__all__ = ["LightGBMCheckpoint", "LightGBMPredictor", "LightGBMTrainer"]
