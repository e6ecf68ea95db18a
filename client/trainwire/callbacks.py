"""Run callbacks: hooks the SDK calls from a run's event stream while ``fit()`` waits.

``RunConfig(callbacks=[...])`` takes them, as Ray's does. Experiment trackers
(``trainwire.air.integrations.mlflow``, ``wandb``, TensorBoard) and Train V2's
``UserCallback`` are built on this one interface: every hook sees what the
coordinator recorded, so a callback works the same for any coordinator.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwire.result import Result
    from trainwire_core.v1 import coordinator_pb2

logger = logging.getLogger(__name__)


class RunCallback:
    """Base class: override the hooks you need; each one's default does nothing.

    ``run`` is the coordinator's ``RunInfo`` (``run_id``, ``name``, ``state``...).
    """

    def on_run_start(self, run: coordinator_pb2.RunInfo, config: dict[str, Any]) -> None:
        """The run was accepted; ``config`` is the trainer's parameters (as a tracker logs them)."""

    def on_metrics(self, run: coordinator_pb2.RunInfo, metrics: dict[str, Any]) -> None:
        """Rank 0 reported ``metrics`` (one call per report, in order)."""

    def on_checkpoint(self, run: coordinator_pb2.RunInfo, checkpoint: coordinator_pb2.CheckpointInfo) -> None:
        """A checkpoint was committed to the store."""

    def on_state(self, run: coordinator_pb2.RunInfo, state: str, reason: str) -> None:
        """The run's state changed (``state`` as the RunState name)."""

    def on_worker_error(self, run: coordinator_pb2.RunInfo, error: coordinator_pb2.WorkerError) -> None:
        """A worker raised (the run may restart it, as its FailureConfig says)."""

    def on_run_end(self, run: coordinator_pb2.RunInfo, result: Result) -> None:
        """The run ended (any terminal state); ``result`` is what ``fit()`` returns or raises with."""


def dispatch(callbacks: list[RunCallback], hook: str, *args: Any) -> None:
    """Calls ``hook`` on every callback; one that raises is logged and does not stop the run or the others."""
    for callback in callbacks:
        try:
            getattr(callback, hook)(*args)
        except Exception:  # a tracker's failure must not lose the run's result
            logger.exception("trainwire: %s.%s raised", type(callback).__name__, hook)
