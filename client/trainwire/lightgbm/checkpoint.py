"""LightGBM checkpoints: a booster as text."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.lightgbm.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file


class LightGBMCheckpoint(Checkpoint):
    """A checkpoint holding a LightGBM booster (``model.txt``)."""

    @classmethod
    def from_model(cls, booster: Any, *, preprocessor: Any = None) -> LightGBMCheckpoint:
        return cls.from_new_directory(  # type: ignore[return-value]
            "lightgbm", lambda path: booster.save_model(os.path.join(path, MODEL_FILENAME)), preprocessor
        )

    def get_model(self) -> Any:
        import lightgbm

        with self.as_directory() as d:
            return lightgbm.Booster(model_file=os.path.join(d, MODEL_FILENAME))
