"""TensorFlow checkpoints: a saved Keras model."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.tensorflow.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file
# Checkpoint metadata key: the Keras package that saved the model ("tf_keras" or "keras").
KERAS_KEY = "keras"


def _keras_package(model: Any) -> str:
    # tf.keras is tf_keras or Keras 3 depending on TF_USE_LEGACY_KERAS; the model's class tells which.
    return "keras" if type(model).__module__.split(".")[0] == "keras" else "tf_keras"


class TensorflowCheckpoint(Checkpoint):
    """A checkpoint holding a whole Keras model as ``model.keras``."""

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """Saves ``model`` (architecture, weights, compile state) into a new local checkpoint."""
        ckpt = cls.from_new_directory(
            "tensorflow", lambda path: model.save(os.path.join(path, MODEL_FILENAME)), preprocessor
        )
        ckpt.update_metadata({"framework": "tensorflow", KERAS_KEY: _keras_package(model)})
        return ckpt  # type: ignore[return-value]

    def get_model(self) -> Any:
        """The saved Keras model, loaded with the Keras package that saved it."""
        import importlib

        package = self.get_metadata().get(KERAS_KEY, "tf_keras")
        keras = importlib.import_module(package)
        with self.as_directory() as d:
            return keras.models.load_model(os.path.join(d, MODEL_FILENAME))
