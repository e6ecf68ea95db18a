"""``ray.air.config``: the run's configuration objects.

Ray 2.4's ``DatasetConfig`` has no counterpart: trainwire shards every dataset passed to a trainer
across the workers (``train.get_dataset_shard``).
"""

from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig

__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig", "ScalingConfig", "SyncConfig"]
