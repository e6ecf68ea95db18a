"""scikit-learn support, mirroring ``ray.train.sklearn``."""

from trainwire.sklearn.checkpoint import SklearnCheckpoint
from trainwire.sklearn.predictor import SklearnPredictor
from trainwire.sklearn.trainer import SklearnTrainer

__all__ = ["SklearnPredictor", "SklearnCheckpoint", "SklearnTrainer"]
