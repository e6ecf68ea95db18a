"""Trial schedulers, as ``ray.tune.schedulers``: they hold their arguments; the coordinator runs them."""

from __future__ import annotations

import numbers

from trainwire.tune.search.searcher import check_mode
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler", "FIFOScheduler", "TrialScheduler"]


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise InvalidArgumentError(f"scheduler.{name} must be a number > 0, got {value!r}", field=f"scheduler.{name}")
    return float(value)


class TrialScheduler:
    """Base of the schedulers (``ray.tune.schedulers.TrialScheduler``)."""

    name = ""

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        check_mode(mode, "scheduler.mode")
        self.metric, self.mode = metric, mode

    def to_proto(self) -> tune_pb2.TrialScheduler:
        """The scheduler as the coordinator's Tune request names it."""
        return tune_pb2.TrialScheduler(name=self.name, metric=self.metric or "", mode=self.mode or "")


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its end, in the order they were created (the default)."""

    name = "fifo"

    def __init__(self) -> None:
        super().__init__()


class ASHAScheduler(TrialScheduler):
    """Asynchronous successive halving: stops poor trials early, as ``ray.tune.schedulers.ASHAScheduler``.

    Args:
        time_attr: The reported metric that counts progress.
        metric: The metric trials are compared on (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
        max_t: Trials stop at this much progress.
        grace_period: No trial is stopped before this much progress.
        reduction_factor: Keeps 1 / reduction_factor of the trials at each rung (> 1).
        brackets: Brackets of rungs (>= 1).
        stop_last_trials: Accepted for Ray's signature; trials always stop at ``max_t``.
    """

    name = "asha"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 100,
        grace_period: int = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        self.max_t = _positive(max_t, "max_t")
        self.grace_period = _positive(grace_period, "grace_period")
        if self.grace_period > self.max_t:
            raise InvalidArgumentError(
                f"scheduler.grace_period ({grace_period}) must be <= max_t ({max_t})", field="scheduler.grace_period"
            )
        if not _positive(reduction_factor, "reduction_factor") > 1:
            raise InvalidArgumentError(
                f"scheduler.reduction_factor must be > 1, got {reduction_factor!r}", field="scheduler.reduction_factor"
            )
        if isinstance(brackets, bool) or not isinstance(brackets, int) or brackets < 1:
            raise InvalidArgumentError(
                f"scheduler.brackets must be an integer >= 1, got {brackets!r}", field="scheduler.brackets"
            )
        self.time_attr, self.reduction_factor, self.brackets = time_attr, float(reduction_factor), brackets

    def to_proto(self) -> tune_pb2.TrialScheduler:
        msg = super().to_proto()
        msg.time_attr, msg.max_t, msg.grace_period = self.time_attr, self.max_t, self.grace_period
        msg.reduction_factor, msg.brackets = self.reduction_factor, self.brackets
        return msg


# Ray's other name for ASHA.
AsyncHyperBandScheduler = ASHAScheduler
