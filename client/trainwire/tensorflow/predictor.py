"""``TensorflowPredictor``, as ``ray.train.tensorflow.TensorflowPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.tensorflow.framework import FRAMEWORK


class TensorflowPredictor(Predictor):
    """Scores with a Keras model on a float32 2-D tensor (one row per example).

    Args:
        model: The Keras model.
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Input columns in the order the model reads them (None: all columns as given).
        use_gpu: Score on the first GPU.
    """

    framework = FRAMEWORK.name
    input_datatype = "FP32"

    def __init__(
        self,
        model: Any,
        preprocessor: Any = None,
        feature_columns: list[str] | None = None,
        use_gpu: bool = False,
    ) -> None:
        super().__init__(preprocessor, feature_columns)
        self.model = model
        self.device = "/GPU:0" if use_gpu else "/CPU:0"

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> TensorflowPredictor:
        """Loads the Keras model of a ``TensorflowCheckpoint``."""
        from trainwire.tensorflow.checkpoint import TensorflowCheckpoint

        model = TensorflowCheckpoint(checkpoint.path, checkpoint.filesystem).get_model()
        return cls(model, **cls.checkpoint_defaults(checkpoint, kwargs))

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        import tensorflow as tf

        with tf.device(self.device):
            out = self.model(tf.convert_to_tensor(np.asarray(data, dtype=np.float32)), training=False, **kwargs)
        return np.asarray(out)
