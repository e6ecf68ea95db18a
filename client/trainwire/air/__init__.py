"""``ray.air`` under trainwire: ``from trainwire.air import session, Checkpoint, ScalingConfig, RunConfig``.

The same objects as ``trainwire`` and ``trainwire.train`` have, under Ray 2.4's names and module
paths (``trainwire.air.session``, ``.config``, ``.checkpoint``, ``.result``, ``.constants``).
"""

from trainwire.air import session
from trainwire.air.checkpoint import Checkpoint
from trainwire.air.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.air.result import Result

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "session",
]
