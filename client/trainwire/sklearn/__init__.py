"""scikit-learn support, mirroring ``ray.train.sklearn``."""

from trainwire.sklearn.trainer import SklearnCheckpoint, SklearnTrainer

__all__ = ["SklearnCheckpoint", "SklearnTrainer"]
