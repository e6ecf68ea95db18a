"""``HorovodTrainer``: data-parallel training with ``horovod.torch`` over gloo, no horovodrun."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainwire.horovod.checkpoint import HorovodCheckpoint
from trainwire.horovod.framework import FRAMEWORK
from trainwire.trainer import DataParallelTrainer
from trainwire_core.errors import InvalidArgumentError


@dataclass
class HorovodConfig:
    """Horovod setup, as ``ray.train.horovod.HorovodConfig``.

    Args:
        nics: Network interfaces gloo may use (the first is taken); default: the
            loopback when every worker is on one node, else each node's Ray address's.
        verbose: Rendezvous server logging (0 quiet).
        timeout_s: How long ``hvd.init()`` waits for the other workers (gloo rendezvous).
    """

    nics: set[str] | None = None
    verbose: int = 1
    timeout_s: int = 300

    def __post_init__(self) -> None:
        if self.nics is not None and (
            isinstance(self.nics, str) or not all(isinstance(n, str) and n for n in self.nics)
        ):
            raise InvalidArgumentError(
                f"nics must be a set of interface names such as {{'eth0'}}, got {self.nics!r}", field="nics"
            )
        if not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise InvalidArgumentError(
                f"timeout_s must be a positive whole number of seconds, got {self.timeout_s!r}", field="timeout_s"
            )
        if not isinstance(self.verbose, int) or self.verbose < 0:
            raise InvalidArgumentError(f"verbose must be 0 or more, got {self.verbose!r}", field="verbose")

    def to_dict(self) -> dict[str, Any]:
        options: dict[str, Any] = {"verbose": self.verbose, "timeout_s": self.timeout_s}
        if self.nics:
            options["nics"] = sorted(self.nics)
        return options


class HorovodTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker`` on every worker with Horovod's gloo controller set up.

    Args:
        train_loop_per_worker: A function taking ``config`` (or nothing), or ``"package.module:function"``.
        train_loop_config: Passed to the loop.
        horovod_config: Horovod setup options.
        **kwargs: ``scaling_config``, ``run_config``, ``datasets``, ``resume_from_checkpoint``,
            ``preprocessor``, ``metadata``, as every trainer.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = HorovodCheckpoint

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        horovod_config: HorovodConfig | None = None,
        **kwargs: Any,
    ) -> None:
        horovod_config = horovod_config or HorovodConfig()
        if not isinstance(horovod_config, HorovodConfig):
            raise InvalidArgumentError("horovod_config must be a HorovodConfig", field="horovod_config")
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=horovod_config.to_dict(),
            **kwargs,
        )
