"""``TensorflowPredictor``, as ``ray.train.tensorflow.TensorflowPredictor``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from trainwire.checkpoint import DICT_CHECKPOINT_NAME, Checkpoint
from trainwire.predictor import Predictor, one_dtype
from trainwire.tensorflow.framework import FRAMEWORK

# A dict checkpoint's model entry (``ray.air.constants.MODEL_KEY``): the model's weights in Ray 2.4's examples.
MODEL_KEY = "model"


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
    native_batch_format = "numpy"

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
    def from_checkpoint(
        cls, checkpoint: Checkpoint, model_definition: Callable[[], Any] | None = None, **kwargs: Any
    ) -> TensorflowPredictor:
        """Loads the Keras model of a ``TensorflowCheckpoint``, or of a Ray 2.4 dict checkpoint.

        Args:
            checkpoint: A ``TensorflowCheckpoint`` (``model.keras``), or a checkpoint of
                ``Checkpoint.from_dict({"model": model.get_weights()})`` as Ray 2.4's examples made.
            model_definition: Builds the model (a function or a Keras model class), as in Ray 2.4:
                the checkpoint's weights are then loaded into it. Needed for weights-only checkpoints.
            **kwargs: Passed to the constructor (``use_gpu``, ``preprocessor``, ``feature_columns``).
        """
        from trainwire.tensorflow.checkpoint import MODEL_FILENAME, TensorflowCheckpoint

        with checkpoint.as_directory() as d:
            ckpt = TensorflowCheckpoint.from_directory(d)
            if os.path.exists(os.path.join(d, MODEL_FILENAME)):
                model = _load_saved(ckpt, os.path.join(d, MODEL_FILENAME), model_definition)
            elif os.path.exists(os.path.join(d, DICT_CHECKPOINT_NAME)):
                model = _load_dict(ckpt, model_definition)
            else:
                raise ValueError(
                    f"checkpoint {checkpoint.uri} holds neither {MODEL_FILENAME} nor a dict checkpoint's model"
                )
        return cls(model, **cls.checkpoint_defaults(checkpoint, kwargs))

    def _predict_numpy(self, data: np.ndarray, dtype: Any = None, **kwargs: Any) -> np.ndarray:
        """Scores a 2-D array as one tensor.

        Args:
            dtype: The tensor's ``tf.DType`` (default float32), as Ray's ``predict(..., dtype=)``.
            **kwargs: Passed to the model's ``call``.
        """
        import tensorflow as tf

        dtype = one_dtype(dtype)
        np_dtype = np.float32 if dtype is None else tf.as_dtype(dtype).as_numpy_dtype
        with tf.device(self.device):
            out = self.model(tf.convert_to_tensor(np.asarray(data, dtype=np_dtype)), training=False, **kwargs)
        return np.asarray(out)


def _load_saved(ckpt: Any, path: str, model_definition: Callable[[], Any] | None) -> Any:
    """The saved model, or ``model_definition()`` with the saved model's weights."""
    if model_definition is None:
        return ckpt.get_model()
    model = model_definition()
    try:
        # Weights in order, whichever Keras package saved the model and builds this one.
        model.set_weights(ckpt.get_model().get_weights())
    except Exception:  # noqa: BLE001 - e.g. custom layers the saved model cannot be rebuilt without
        model.load_weights(path)
    return model


def _load_dict(ckpt: Any, model_definition: Callable[[], Any] | None) -> Any:
    """The model of a dict checkpoint: a Keras model, or weights loaded into ``model_definition()``."""
    saved = ckpt.to_dict().get(MODEL_KEY)
    if saved is None:
        raise ValueError(f"this dict checkpoint has no {MODEL_KEY!r} entry to load the model from")
    if hasattr(saved, "predict") and hasattr(saved, "get_weights"):
        return saved
    if model_definition is None:
        raise ValueError(
            "this checkpoint holds the model's weights only: pass model_definition=... "
            "(a function building the model) to load them into"
        )
    model = model_definition()
    model.set_weights(saved)
    return model
