"""``SklearnPredictor``, as ``ray.train.sklearn.SklearnPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.sklearn.framework import FRAMEWORK
from trainwire_core.errors import FailedPreconditionError


class SklearnPredictor(Predictor):
    """Scores with a fitted scikit-learn estimator (``predict``).

    Args:
        estimator: The fitted estimator.
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Input columns (default: the checkpoint's metadata, else ``feature_names_in_``).
    """

    framework = FRAMEWORK.name
    takes_frame = True

    def __init__(self, estimator: Any, preprocessor: Any = None, feature_columns: list[str] | None = None) -> None:
        names = getattr(estimator, "feature_names_in_", None)
        super().__init__(preprocessor, feature_columns or (list(names) if names is not None else None))
        self.estimator = estimator

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> SklearnPredictor:
        from trainwire.sklearn.checkpoint import SklearnCheckpoint

        estimator = SklearnCheckpoint(checkpoint.path, checkpoint.filesystem).get_estimator()
        if not callable(getattr(estimator, "predict", None)):
            raise FailedPreconditionError(
                f"the checkpoint's model is a {type(estimator).__name__}, not an estimator with predict()"
            )
        return cls(estimator, **cls.checkpoint_defaults(checkpoint, kwargs))

    @property
    def model_columns(self) -> list[str] | None:
        names = getattr(self.estimator, "feature_names_in_", None)
        return list(names) if names is not None else self.feature_columns

    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> np.ndarray:
        # An estimator fitted on a DataFrame wants one (column names are checked).
        if getattr(self.estimator, "feature_names_in_", None) is None:
            return self.estimator.predict(data.to_numpy(), **kwargs)
        return self.estimator.predict(data, **kwargs)
