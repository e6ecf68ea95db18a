"""scikit-learn support, mirroring ``ray.train.sklearn``."""

from trainwire.sklearn.predictor import SklearnPredictor
from trainwire.sklearn.trainer import SklearnCheckpoint, SklearnTrainer

__all__ = ["SklearnPredictor", "SklearnCheckpoint", "SklearnTrainer"]
