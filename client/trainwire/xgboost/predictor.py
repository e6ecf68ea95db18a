"""``XGBoostPredictor``, as ``ray.train.xgboost.XGBoostPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.xgboost.framework import FRAMEWORK

# Keyword arguments ``Booster.inplace_predict`` takes; any other goes to ``Booster.predict`` on a DMatrix.
_INPLACE_ARGS = {"iteration_range", "predict_type", "missing", "validate_features", "base_margin", "strict_shape"}


class XGBoostPredictor(Predictor):
    """Scores with an XGBoost booster.

    Args:
        model: The ``xgboost.Booster``.
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Input columns (default: the checkpoint's metadata, else the booster's feature names).
        nthread: Threads per prediction call (default: XGBoost's). The predictor service uses 1:
            it scores many small batches at once, where more threads only contend.

    The predictor service also compiles the booster (``use_compiled``): the same outputs within 1e-6, faster.
    """

    framework = FRAMEWORK.name
    # Each row walks the trees alone.
    batch_invariant = True

    def __init__(
        self,
        model: Any,
        preprocessor: Any = None,
        feature_columns: list[str] | None = None,
        nthread: int | None = None,
    ) -> None:
        names = model.feature_names
        super().__init__(preprocessor, feature_columns or names)
        if nthread is not None:
            model.set_param({"nthread": nthread})
        self.model = model
        # Read once: the booster's names are a call into XGBoost, and every predict needs them.
        self._model_columns = names or self.feature_columns

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> XGBoostPredictor:
        from trainwire.xgboost.checkpoint import XGBoostCheckpoint

        booster = XGBoostCheckpoint.get_model(checkpoint)
        return cls(booster, **cls.checkpoint_defaults(checkpoint, kwargs))

    @property
    def model_columns(self) -> list[str] | None:
        return self._model_columns

    def _predict_numpy(self, data: np.ndarray, dmatrix_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Scores a 2-D array whose columns are in the booster's order.

        Args:
            dmatrix_kwargs: Passed to ``xgboost.DMatrix`` (as in Ray 2.4).
            **kwargs: Passed to ``Booster.predict``, e.g. ``pred_contribs=True`` for SHAP values.
        """
        if not dmatrix_kwargs and kwargs.keys() <= _INPLACE_ARGS:
            # inplace_predict skips building a DMatrix.
            return self.model.inplace_predict(data, **{"validate_features": False, **kwargs})
        import xgboost

        # inplace_predict takes none of pred_contribs, pred_leaf, output_margin...: Booster.predict takes them all.
        matrix = xgboost.DMatrix(data, feature_names=self.model.feature_names, **(dmatrix_kwargs or {}))
        return self.model.predict(matrix, validate_features=False, **kwargs)
