"""XGBoost support, mirroring ``ray.train.xgboost``."""

from trainwire.xgboost.trainer import XGBoostCheckpoint, XGBoostTrainer

__all__ = ["XGBoostCheckpoint", "XGBoostTrainer"]
