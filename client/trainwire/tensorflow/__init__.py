"""TensorFlow support, mirroring ``ray.train.tensorflow``.

Training loops build their model under ``tf.distribute.MultiWorkerMirroredStrategy()``;
workers run with ``TF_USE_LEGACY_KERAS=1``, so ``tf.keras`` is tf-keras (Keras 2).
The Keras callback lives in ``trainwire.tensorflow.keras``.
"""

from trainwire.tensorflow.checkpoint import TensorflowCheckpoint
from trainwire.tensorflow.predictor import TensorflowPredictor
from trainwire.tensorflow.trainer import TensorflowConfig, TensorflowTrainer

__all__ = ["TensorflowCheckpoint", "TensorflowConfig", "TensorflowPredictor", "TensorflowTrainer"]
