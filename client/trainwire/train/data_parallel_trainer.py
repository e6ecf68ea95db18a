"""``ray.train.data_parallel_trainer``'s path to ``DataParallelTrainer``."""

from trainwire.trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
