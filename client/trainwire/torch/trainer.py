"""``TorchTrainer``: data-parallel training over a gloo/nccl process group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainwire.torch.checkpoint import TorchCheckpoint
from trainwire.torch.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer

INIT_METHODS = ("env", "tcp")


@dataclass
class TorchConfig:
    """Process-group options, as ``ray.train.torch.TorchConfig``.

    Args:
        backend: "gloo" or "nccl"; default: nccl with GPUs, else gloo.
        init_method: How the workers find rank 0, as Ray's: "env" (``MASTER_ADDR`` / ``MASTER_PORT`` in
            every worker's environment, ``init_method="env://"``) or "tcp" (``tcp://addr:port``).
        timeout_s: Process-group timeout.

    Raises:
        ValueError: init_method is neither "env" nor "tcp".
    """

    backend: str | None = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if self.init_method not in INIT_METHODS:
            raise ValueError(
                f"The provided init_method ({self.init_method}) is not supported. Must be either 'env' or 'tcp'."
            )


class TorchTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker inside a torch process group."""

    framework = FRAMEWORK.name
    checkpoint_cls = TorchCheckpoint

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        torch_config: TorchConfig | None = None,
        **kwargs: Any,
    ) -> None:
        config = {k: v for k, v in asdict(torch_config or TorchConfig()).items() if v is not None}
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, backend_config=config, **kwargs)
