"""Stoppers, as ``ray.tune.stopper``: ``RunConfig(stop=...)`` of a Tuner.

A Stopper (or a function of ``(trial_id, result)``) travels pickled with the search and decides
on every trial result in an actor of the search on the cluster, as Ray's stopper runs beside its
trials: it goes on deciding when this program stops watching. ``result`` is the trial's report
with Ray's auto-filled keys (``training_iteration``, ``trial_id``, ``time_total_s``,
``timestamp``, ``config``). A trial a stopper stops ends as finished (Ray's TERMINATED); when
``stop_all()`` is true, no trial starts after it and running ones are stopped.
"""

from __future__ import annotations

import abc
import datetime
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "CombinedStopper",
    "ExperimentPlateauStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
]


class Stopper(abc.ABC):  # noqa: B024 - as Ray's: both methods raise until a subclass gives them
    """Base class of experiment stoppers (``ray.tune.Stopper``): implement ``__call__`` and ``stop_all``."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Returns true if the trial should be terminated given the result."""
        raise NotImplementedError

    def stop_all(self) -> bool:
        """Returns true if the experiment should be terminated."""
        raise NotImplementedError


class CombinedStopper(Stopper):
    """Combines several stoppers with OR.

    Args:
        *stoppers: Stoppers to be combined.
    """

    def __init__(self, *stoppers: Stopper) -> None:
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any(s(trial_id, result) for s in self._stoppers)

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self._stoppers)


class NoopStopper(Stopper):
    """Never stops anything."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class FunctionStopper(Stopper):
    """Stops a trial when ``function(trial_id, result)`` returns true.

    Args:
        function: Takes the trial id and its result dict, returns a bool.
    """

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]) -> None:
        self._fn = function

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return self._fn(trial_id, result)

    def stop_all(self) -> bool:
        return False

    @classmethod
    def is_valid_function(cls, fn: Any) -> bool:
        """Whether ``fn`` is a plain function (not a Stopper); one with ``stop_all`` must subclass Stopper."""
        is_function = callable(fn) and not issubclass(type(fn), Stopper)
        if is_function and hasattr(fn, "stop_all"):
            raise ValueError("Stop object must be ray.tune.Stopper subclass to be detected correctly.")
        return is_function


class MaximumIterationStopper(Stopper):
    """Stops each trial after ``max_iter`` results.

    Args:
        max_iter: Number of iterations before stopping a trial.
    """

    def __init__(self, max_iter: int) -> None:
        self._max_iter = max_iter
        self._iter: defaultdict[str, int] = defaultdict(int)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._iter[trial_id] += 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self) -> bool:
        return False


class TrialPlateauStopper(Stopper):
    """Stops a trial once the standard deviation of its last ``num_results`` values of ``metric`` is below ``std``.

    Args:
        metric: Metric to check for convergence.
        std: Maximum standard deviation of a plateau.
        num_results: Number of results the deviation is taken over.
        grace_period: Minimum number of results before a trial can be stopped.
        metric_threshold: The value must be past this (by ``mode``) before the trial can be stopped.
        mode: "min" or "max"; required with ``metric_threshold``.
    """

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ) -> None:
        self._metric, self._mode, self._std = metric, mode, std
        self._num_results, self._grace_period = num_results, grace_period
        self._metric_threshold = metric_threshold
        if self._metric_threshold and mode not in ["min", "max"]:
            raise ValueError(
                f"When specifying a `metric_threshold`, the `mode` argument has to be one of [min, max]. Got: {mode}"
            )
        self._iter: defaultdict[str, int] = defaultdict(int)
        self._trial_results: defaultdict[str, deque[Any]] = defaultdict(lambda: deque(maxlen=self._num_results))

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        metric_result = result.get(self._metric)
        self._trial_results[trial_id].append(metric_result)
        self._iter[trial_id] += 1
        if self._iter[trial_id] < self._grace_period:
            return False
        if len(self._trial_results[trial_id]) < self._num_results:
            return False
        if self._metric_threshold is not None:
            if self._mode == "min" and metric_result > self._metric_threshold:
                return False
            if self._mode == "max" and metric_result < self._metric_threshold:
                return False
        try:
            current_std = np.std(self._trial_results[trial_id])
        except Exception:  # as Ray: values that have no deviation (None, strings) never plateau
            current_std = float("inf")
        return bool(current_std < self._std)

    def stop_all(self) -> bool:
        return False


class ExperimentPlateauStopper(Stopper):
    """Stops the whole search once the ``top`` best values of ``metric`` have plateaued for ``patience`` results.

    Args:
        metric: The metric to be monitored.
        std: The deviation of the top values at or under which they have plateaued (> 0).
        top: The number of best values to consider (> 1).
        mode: "min" or "max".
        patience: Results to wait for after the plateau is reached (>= 0).

    Raises:
        ValueError: As Ray's, for a bad mode, top, std or patience.
    """

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0) -> None:
        if mode not in ("min", "max"):
            raise ValueError("The mode parameter can only be either min or max.")
        if not isinstance(top, int) or top <= 1:
            raise ValueError("Top results to consider must be a positive integer greater than one.")
        if not isinstance(patience, int) or patience < 0:
            raise ValueError("Patience must be a strictly positive integer.")
        if not isinstance(std, float) or std <= 0:
            raise ValueError("The standard deviation must be a strictly positive float number.")
        self._mode, self._metric, self._patience = mode, metric, patience
        self._iterations = 0
        self._std, self._top = std, top
        self._top_values: list[float] = []

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._top_values.append(result[self._metric])
        if self._mode == "min":
            self._top_values = sorted(self._top_values)[: self._top]
        else:
            self._top_values = sorted(self._top_values)[-self._top :]
        self._iterations = self._iterations + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def has_plateaued(self) -> bool:
        return len(self._top_values) == self._top and bool(np.std(self._top_values) <= self._std)

    def stop_all(self) -> bool:
        return self.has_plateaued() and self._iterations >= self._patience


class TimeoutStopper(Stopper):
    """Stops the whole search after ``timeout``, counted while it is being decided on.

    Args:
        timeout: Seconds, or a ``datetime.timedelta``.
    """

    def __init__(self, timeout: int | float | datetime.timedelta) -> None:
        if isinstance(timeout, datetime.timedelta):
            self._timeout_seconds: float = timeout.total_seconds()
        elif isinstance(timeout, int | float):
            self._timeout_seconds = timeout
        else:
            raise ValueError(
                "`timeout` parameter has to be either a number or a `datetime.timedelta` object. "
                f"Found: {type(timeout)}"
            )
        self._budget = self._timeout_seconds
        self._last_check: float | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        now = time.time()
        if self._last_check:
            self._budget -= now - self._last_check
        self._last_check = now
        return self._budget <= 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        # As Ray's: the time between pickling and unpickling is not spent budget.
        state["_last_check"] = None
        self.__dict__.update(state)


def as_stopper(stop: Any) -> Stopper | None:
    """``RunConfig.stop`` as a Stopper, as Ray's Experiment reads it (None: a dict, or nothing).

    Raises:
        ValueError: A list with something other than Stoppers, or an object that is neither a
            dict, a Stopper nor a function.
    """
    if not stop or isinstance(stop, dict):
        return None
    if isinstance(stop, list):
        bad = [type(s) for s in stop if not isinstance(s, Stopper)]
        if bad:
            raise ValueError(
                "If you pass a list as the `stop` argument to `tune.RunConfig()`, each element must be an "
                f"instance of `tune.stopper.Stopper`. Got {[type(s) for s in stop]}."
            )
        return CombinedStopper(*stop)
    if callable(stop):
        if FunctionStopper.is_valid_function(stop):
            return FunctionStopper(stop)
        if isinstance(stop, Stopper):
            return stop
    raise ValueError(f"Invalid stop criteria: {stop}. Must be a callable or dict. Got {type(stop)}.")
