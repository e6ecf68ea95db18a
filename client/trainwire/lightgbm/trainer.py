"""``LightGBMTrainer`` and ``LightGBMCheckpoint``."""

from __future__ import annotations

from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.gbdt import GBDTTrainer
from trainwire.lightgbm.checkpoint import LightGBMCheckpoint
from trainwire.lightgbm.framework import FRAMEWORK


class LightGBMTrainer(GBDTTrainer):
    """Data-parallel LightGBM (``tree_learner=data``) across ``scaling_config.num_workers`` workers.

    ``dmatrix_params`` are passed to ``lightgbm.Dataset``.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = LightGBMCheckpoint

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        return LightGBMCheckpoint(checkpoint.uri).get_model()
