"""``TensorflowTrainer`` and ``TensorflowCheckpoint``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainwire.tensorflow.checkpoint import TensorflowCheckpoint
from trainwire.tensorflow.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer


@dataclass
class TensorflowConfig:
    """TensorFlow backend options, as ``ray.train.tensorflow.TensorflowConfig`` (none yet).

    Each worker gets ``TF_CONFIG`` naming every worker, for ``MultiWorkerMirroredStrategy``.
    """


class TensorflowTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with ``TF_CONFIG`` set for multi-worker training."""

    framework = FRAMEWORK.name
    checkpoint_cls = TensorflowCheckpoint

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        tensorflow_config: TensorflowConfig | None = None,
        **kwargs: Any,
    ) -> None:
        config = asdict(tensorflow_config or TensorflowConfig())
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, backend_config=config, **kwargs)
