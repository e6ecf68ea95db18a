"""``XGBoostTrainer`` and ``XGBoostCheckpoint``."""

from __future__ import annotations

from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.gbdt import GBDTTrainer
from trainwire.xgboost.checkpoint import XGBoostCheckpoint
from trainwire.xgboost.framework import FRAMEWORK


class XGBoostTrainer(GBDTTrainer):
    """Distributed XGBoost across ``scaling_config.num_workers`` workers, as ``ray.train.xgboost``."""

    framework = FRAMEWORK.name
    checkpoint_cls = XGBoostCheckpoint

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        return XGBoostCheckpoint.get_model(checkpoint)
