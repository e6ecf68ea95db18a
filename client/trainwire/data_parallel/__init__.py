"""A bare data-parallel run, as ``ray.train.data_parallel_trainer``: the loop on N workers, no process group."""

from trainwire.trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
