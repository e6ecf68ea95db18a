"""``TorchTrainer``: data-parallel training over a gloo/nccl process group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainwire.torch.checkpoint import TorchCheckpoint
from trainwire.torch.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer


@dataclass
class TorchConfig:
    """Process-group options, as ``ray.train.torch.TorchConfig``.

    Args:
        backend: "gloo" or "nccl"; default: nccl with GPUs, else gloo.
        timeout_s: Process-group timeout.
    """

    backend: str | None = None
    timeout_s: int = 1800


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
