"""XGBoost support, mirroring ``ray.train.xgboost``.

``RayTrainReportCallback`` imports xgboost, so it is loaded when first named: a program that
only starts declarative fits or serves predictions does not need the callback's import.
"""

from typing import Any

from trainwire.xgboost.checkpoint import XGBoostCheckpoint
from trainwire.xgboost.config import XGBoostConfig
from trainwire.xgboost.predictor import XGBoostPredictor
from trainwire.xgboost.trainer import XGBoostTrainer

__all__ = ["RayTrainReportCallback", "XGBoostCheckpoint", "XGBoostConfig", "XGBoostPredictor", "XGBoostTrainer"]


def __getattr__(name: str) -> Any:
    if name == "RayTrainReportCallback":
        from trainwire.xgboost.callbacks import RayTrainReportCallback

        return RayTrainReportCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
