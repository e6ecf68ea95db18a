"""``ray.air`` under trainwire: ``from trainwire.air import session, Checkpoint, ScalingConfig, RunConfig``.

The same objects as ``trainwire`` and ``trainwire.train`` have, under Ray 2.4's names and module
paths (``trainwire.air.session``, ``.config``, ``.checkpoint``, ``.result``, ``.constants``).
"""

from typing import Union

from trainwire.air import session
from trainwire.air.checkpoint import Checkpoint
from trainwire.air.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, SyncConfig
from trainwire.air.result import Result

# What a predictor or preprocessor takes and returns, as Ray's type alias.
DataBatchType = Union["numpy.ndarray", "pyarrow.Table", "pandas.DataFrame", dict[str, "numpy.ndarray"]]  # noqa: F821, UP007

__all__ = [
    "Checkpoint",
    "DataBatchType",
    "CheckpointConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "session",
]
