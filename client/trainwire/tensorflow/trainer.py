"""``TensorflowTrainer`` and ``TensorflowCheckpoint``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.tensorflow.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer

MODEL_FILENAME = FRAMEWORK.model_file
# Checkpoint metadata key: the Keras package that saved the model ("tf_keras" or "keras").
KERAS_KEY = "keras"


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


def _keras_package(model: Any) -> str:
    # tf.keras is tf_keras or Keras 3 depending on TF_USE_LEGACY_KERAS; the model's class tells which.
    return "keras" if type(model).__module__.split(".")[0] == "keras" else "tf_keras"


@dataclass
class TensorflowConfig:
    """TensorFlow backend options, as ``ray.train.tensorflow.TensorflowConfig`` (none yet).

    Each worker gets ``TF_CONFIG`` naming every worker, for ``MultiWorkerMirroredStrategy``.
    """


class TensorflowTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with ``TF_CONFIG`` set for multi-worker training."""

    framework = FRAMEWORK.name
    checkpoint_cls = TensorflowCheckpoint

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        tensorflow_config: TensorflowConfig | None = None,
        **kwargs: Any,
    ) -> None:
        config = asdict(tensorflow_config or TensorflowConfig())
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, backend_config=config, **kwargs)
