"""scikit-learn checkpoints: a pickled estimator."""

from __future__ import annotations

import os
from typing import Any

import cloudpickle

from trainwire.checkpoint import Checkpoint
from trainwire.sklearn.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file


class SklearnCheckpoint(Checkpoint):
    """A checkpoint holding a fitted estimator (``model.pkl``)."""

    def get_estimator(self) -> Any:
        with self.as_directory() as d, open(os.path.join(d, MODEL_FILENAME), "rb") as f:
            return cloudpickle.load(f)

    get_model = get_estimator
