"""XGBoost checkpoints: a booster in UBJSON."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.xgboost.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file


class XGBoostCheckpoint(Checkpoint):
    """A checkpoint holding an XGBoost booster (``model.ubj``)."""

    MODEL_FILENAME = MODEL_FILENAME

    @classmethod
    def from_model(cls, booster: Any, *, preprocessor: Any = None) -> XGBoostCheckpoint:
        return cls.from_new_directory(  # type: ignore[return-value]
            "xgboost", lambda path: booster.save_model(os.path.join(path, MODEL_FILENAME)), preprocessor
        )

    @classmethod
    def get_model(cls_or_self, checkpoint: Checkpoint | None = None) -> Any:  # noqa: N805
        """Loads the booster (``XGBoostTrainer.get_model(ckpt)`` or ``ckpt.get_model()``)."""
        import xgboost

        ckpt = checkpoint if checkpoint is not None else cls_or_self
        booster = xgboost.Booster()
        with ckpt.as_directory() as d:
            booster.load_model(os.path.join(d, MODEL_FILENAME))
        return booster
