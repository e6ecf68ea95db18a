"""XGBoost support, mirroring ``ray.train.xgboost``."""

from trainwire.xgboost.predictor import XGBoostPredictor
from trainwire.xgboost.trainer import XGBoostCheckpoint, XGBoostTrainer

__all__ = ["XGBoostPredictor", "XGBoostCheckpoint", "XGBoostTrainer"]
