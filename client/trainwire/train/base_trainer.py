"""``ray.train.base_trainer``'s path to ``BaseTrainer``."""

from trainwire.trainer import BaseTrainer

__all__ = ["BaseTrainer"]
