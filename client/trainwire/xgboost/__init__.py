"""XGBoost support, mirroring ``ray.train.xgboost``."""

from trainwire.xgboost.checkpoint import XGBoostCheckpoint
from trainwire.xgboost.predictor import XGBoostPredictor
from trainwire.xgboost.trainer import XGBoostTrainer

__all__ = ["XGBoostPredictor", "XGBoostCheckpoint", "XGBoostTrainer"]
