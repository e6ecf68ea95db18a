"""``ray.train.v2.api.data_parallel_trainer``: ``DataParallelTrainer`` (``trainwire.DataParallelTrainer``)."""

from trainwire.trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
