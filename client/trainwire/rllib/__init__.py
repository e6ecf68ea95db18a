"""Reinforcement learning with RLlib, as Ray's ``RLTrainer`` (``ray.rllib`` is imported lazily)."""

import os

# trainwire's RL path runs on torch. Left alone, RLlib imports TensorFlow and switches it to TF1
# behaviour for the whole process (tf1.disable_v2_behavior), after which Keras models saved in
# the current format no longer load in that process (a predictor serving both, say).
os.environ.setdefault("RLLIB_TEST_NO_TF_IMPORT", "1")

from trainwire.rllib.checkpoint import RLCheckpoint  # noqa: E402
from trainwire.rllib.predictor import RLPredictor  # noqa: E402
from trainwire.rllib.trainer import RLTrainer  # noqa: E402

__all__ = ["RLCheckpoint", "RLPredictor", "RLTrainer"]
