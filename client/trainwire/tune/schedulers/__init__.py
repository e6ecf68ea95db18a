"""Trial schedulers, as ``ray.tune.schedulers``: they hold their arguments; the coordinator runs them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from trainwire.tune.schedulers.trial_scheduler import (
    FIFOScheduler,
    TrialScheduler,
    _number,
    _options,
    _positive,
)
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "ResourceChangingScheduler",
    "TrialScheduler",
]


# Ray's default resources_allocation_function is an instance of DistributeResources; a marker here.
_DISTRIBUTE: Any = None


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


class MedianStoppingRule(TrialScheduler):
    """Stops a trial whose best result is worse than the median of the others' running means.

    As ``ray.tune.schedulers.MedianStoppingRule``; a paused trial (``hard_stop=False``, or while
    too few trials can be compared and others wait) ends its run and goes on later in a new run
    from its latest checkpoint.

    Args:
        time_attr: The reported metric that counts progress (``time_total_s``: seconds since the trial started).
        metric: The metric trials are compared on (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
        grace_period: No trial is stopped before this much progress; means count from here.
        min_samples_required: Trials to compare with before stopping one.
        min_time_slice: A trial runs at least this long before it yields to waiting trials.
        hard_stop: Stop poor trials (True) or pause them (False).
    """

    name = "median_stopping_rule"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: int = 0,
        hard_stop: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        self.time_attr, self.hard_stop = time_attr, bool(hard_stop)
        self.grace_period = _number(grace_period, "grace_period")
        self.min_samples_required = _number(min_samples_required, "min_samples_required")
        self.min_time_slice = _number(min_time_slice, "min_time_slice")

    def to_proto(self) -> tune_pb2.TrialScheduler:
        return _options(
            super().to_proto(),
            {
                "time_attr": self.time_attr,
                "grace_period": self.grace_period,
                "min_samples_required": self.min_samples_required,
                "min_time_slice": self.min_time_slice,
                "hard_stop": self.hard_stop,
            },
        )


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand, as ``ray.tune.schedulers.HyperBandScheduler``.

    Trials pause at their bracket's milestone (their run ends) until every trial of the bracket
    reaches it; the bracket is then halved, and the better trials go on, each in a new run from
    its latest checkpoint. A trial should report a checkpoint with each result it may pause at.

    Args:
        time_attr: The reported metric that counts progress.
        metric: The metric trials are compared on (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
        max_t: Trials stop at this much progress.
        reduction_factor: Keeps 1 / reduction_factor of a bracket's trials at each halving (> 1).
        stop_last_trials: Stop the last trials of a bracket at ``max_t``.
    """

    name = "hyperband"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ) -> None:
        super().__init__(metric, mode)
        self.time_attr, self.stop_last_trials = time_attr, bool(stop_last_trials)
        self.max_t = _positive(max_t, "max_t")
        if not _positive(reduction_factor, "reduction_factor") > 1:
            raise InvalidArgumentError(
                f"scheduler.reduction_factor must be > 1, got {reduction_factor!r}", field="scheduler.reduction_factor"
            )
        self.reduction_factor = float(reduction_factor)

    def to_proto(self) -> tune_pb2.TrialScheduler:
        msg = super().to_proto()
        msg.time_attr, msg.max_t, msg.reduction_factor = self.time_attr, self.max_t, self.reduction_factor
        return _options(
            msg,
            {
                "time_attr": self.time_attr,
                "max_t": self.max_t,
                "reduction_factor": self.reduction_factor,
                "stop_last_trials": self.stop_last_trials,
            },
        )


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand as BOHB runs it (``ray.tune.schedulers.HyperBandForBOHB``): the largest bracket first.

    The coordinator runs it only where BOHB's libraries (``hpbandster``, ``ConfigSpace``) are
    installed; elsewhere the search is refused, naming them.
    """

    name = "hb_bohb"


class ResourceChangingScheduler(TrialScheduler):
    """Wraps a scheduler, as ``ray.tune.schedulers.ResourceChangingScheduler``.

    Trials are decided on by ``base_scheduler`` (default: FIFO). trainwire does not change a
    running trial's resources: each trial keeps the ScalingConfig it started with, and
    ``resources_allocation_function`` is kept but not called (a warning says so).

    Args:
        base_scheduler: The scheduler that decides on results.
        resources_allocation_function: Ray's function of (controller, trial, result, scheduler).
    """

    def __init__(
        self,
        base_scheduler: TrialScheduler | None = None,
        resources_allocation_function: Callable[..., Any] | None = _DISTRIBUTE,
    ) -> None:
        if base_scheduler is not None and not isinstance(base_scheduler, TrialScheduler):
            raise InvalidArgumentError(
                "ResourceChangingScheduler's base_scheduler must be a trainwire.tune.schedulers scheduler",
                field="scheduler.base_scheduler",
            )
        self.base_scheduler = base_scheduler or FIFOScheduler()
        self.resources_allocation_function = resources_allocation_function
        if resources_allocation_function is not None:
            warnings.warn(
                "ResourceChangingScheduler: trainwire keeps each trial's resources as it started "
                "(resources_allocation_function is not called); trials are decided on by its base scheduler",
                stacklevel=2,
            )
        super().__init__(self.base_scheduler.metric, self.base_scheduler.mode)

    def to_proto(self) -> tune_pb2.TrialScheduler:
        return self.base_scheduler.to_proto()


# PB2 is importable from here as Ray's (lazily there), and not in __all__, as there.
from trainwire.tune.schedulers.pb2 import PB2  # noqa: E402, F401
from trainwire.tune.schedulers.pbt import PopulationBasedTraining, PopulationBasedTrainingReplay  # noqa: E402
