"""``LightGBMPredictor``, as ``ray.train.lightgbm.LightGBMPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.lightgbm.framework import FRAMEWORK
from trainwire.predictor import Predictor


class LightGBMPredictor(Predictor):
    """Scores with a LightGBM booster.

    Args:
        model: The ``lightgbm.Booster``.
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Input columns (default: the checkpoint's metadata, else the booster's feature names).
        num_threads: Threads per prediction call (default: LightGBM's).

    The predictor service also compiles the booster (``use_compiled``): the same outputs within 1e-6, faster.
    """

    framework = FRAMEWORK.name

    def __init__(
        self,
        model: Any,
        preprocessor: Any = None,
        feature_columns: list[str] | None = None,
        num_threads: int | None = None,
    ) -> None:
        names = model.feature_name()
        super().__init__(preprocessor, feature_columns or names)
        self.model = model
        self.num_threads = num_threads
        # Read once: the booster's names are a call into LightGBM, and every predict needs them.
        self._model_columns = names or self.feature_columns

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> LightGBMPredictor:
        from trainwire.lightgbm.checkpoint import LightGBMCheckpoint

        booster = LightGBMCheckpoint(checkpoint.path, checkpoint.filesystem).get_model()
        return cls(booster, **cls.checkpoint_defaults(checkpoint, kwargs))

    @property
    def model_columns(self) -> list[str] | None:
        return self._model_columns

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        if self.num_threads is not None:
            kwargs.setdefault("num_threads", self.num_threads)
        return self.model.predict(data, **kwargs)
