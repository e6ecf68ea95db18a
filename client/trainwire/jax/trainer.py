"""``JaxTrainer``: SPMD training with ``jax.distributed`` initialised across the worker group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.jax.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer


@dataclass
class JaxConfig:
    """How ``jax.distributed`` is set up, as ``ray.train.v2.jax.JaxConfig``.

    Args:
        use_gpu: Run on the CUDA devices Ray gives each worker (``JAX_PLATFORMS=cuda``); default: the
            scaling config's ``use_gpu``. Without it the workers run on CPU (``JAX_PLATFORMS=cpu``).
        use_tpu: Accepted for Ray's API; trainwire places no TPU workers.
        timeout_s: How long ``jax.distributed.initialize`` waits for every process to join.
    """

    use_gpu: bool | None = None
    use_tpu: bool = False
    timeout_s: int = 300


class JaxTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker after ``jax.distributed.initialize``.

    Each worker is one JAX process (``jax.process_index()`` is its world rank); collectives
    across processes (``multihost_utils.process_allgather``, ``psum`` under ``pmap`` or
    ``shard_map``) reach every worker's devices.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = Checkpoint

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        jax_config: JaxConfig | None = None,
        **kwargs: Any,
    ) -> None:
        config = {k: v for k, v in asdict(jax_config or JaxConfig()).items() if v is not None}
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, backend_config=config, **kwargs)
        if "use_gpu" not in self.backend_config:
            self.backend_config["use_gpu"] = bool(self.scaling_config.use_gpu)
