"""TensorFlow support, mirroring ``ray.train.tensorflow``.

Training loops build their model under ``tf.distribute.MultiWorkerMirroredStrategy()``;
workers run with ``TF_USE_LEGACY_KERAS=1``, so ``tf.keras`` is tf-keras (Keras 2).
The Keras callback lives in ``trainwire.tensorflow.keras``.
"""

from __future__ import annotations

from typing import Any

from trainwire.tensorflow.checkpoint import TensorflowCheckpoint
from trainwire.tensorflow.predictor import TensorflowPredictor
from trainwire.tensorflow.trainer import TensorflowConfig, TensorflowTrainer

__all__ = [
    "TensorflowCheckpoint",
    "TensorflowConfig",
    "TensorflowPredictor",
    "TensorflowTrainer",
    "prepare_dataset_shard",
]


def prepare_dataset_shard(tf_dataset_shard: Any) -> Any:
    """A worker's ``tf.data.Dataset`` made from its own shard, ready for a distribution strategy, as Ray's.

    The shard is this worker's already (``get_dataset_shard``), so TensorFlow's auto-sharding,
    which would split it again across the workers, is turned off; batches are prefetched.

    Args:
        tf_dataset_shard: A ``tf.data.Dataset`` of this worker's shard (e.g. from ``to_tf``).

    Returns:
        The dataset with auto-sharding off and autotuned prefetching.
    """
    import tensorflow as tf  # here: importing trainwire.tensorflow must not import TensorFlow

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)
