"""Ray's controller-driven trial schedulers: MedianStoppingRule, HyperBand and HyperBandForBOHB.

They decide as Ray 2.60's ``ray.tune.schedulers`` do, on the same calls: ``on_trial_add``,
``on_trial_result`` (CONTINUE, PAUSE, STOP or NOOP), ``on_trial_complete`` / ``on_trial_error`` /
``on_trial_remove`` and ``choose_trial_to_run``, against a controller that lists the search's
trials and stops or pauses them. The search's driver is that controller: a paused trial's run
ends, and the trial later starts a new run from its latest committed checkpoint.
"""

from __future__ import annotations

import collections
import importlib.util
import math
from typing import Any, Protocol

import numpy as np

from trainwire_core.errors import InvalidArgumentError

CONTINUE, PAUSE, STOP, NOOP = "CONTINUE", "PAUSE", "STOP", "NOOP"
PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"
FIELD = "tune_config.scheduler"


class SchedTrial:
    """A trial as these schedulers see it (Ray's ``Trial``, reduced to what they read).

    Attributes:
        index: The trial's index in its search.
        config: Its parameters as the trainable sees them.
        status: PENDING, RUNNING, PAUSED, TERMINATED or ERROR (Ray's names).
        checkpoint: Its latest committed checkpoint (an id the controller understands), or None.
        last_result: Its last result.
    """

    def __init__(self, index: int, config: dict[str, Any] | None = None) -> None:
        self.index = index
        self.config: dict[str, Any] = config or {}
        self.status = PENDING
        self.checkpoint: Any = None
        self.last_result: dict[str, Any] = {}

    @property
    def trial_id(self) -> str:
        return str(self.index)

    def is_finished(self) -> bool:
        return self.status in (TERMINATED, ERROR)

    def __repr__(self) -> str:
        return f"SchedTrial({self.index}, {self.status})"


class Controller(Protocol):
    """What a scheduler may ask of the search (the part of Ray's TuneController they use)."""

    def get_trials(self) -> list[SchedTrial]: ...

    def get_live_trials(self) -> list[SchedTrial]: ...

    def stop_trial(self, trial: SchedTrial) -> None: ...

    def pause_trial(self, trial: SchedTrial) -> None: ...

    def exploit(self, trial: SchedTrial, source: SchedTrial, config: Any, checkpoint: Any, at: Any = None) -> None: ...


class ControllerScheduler:
    """Base of the schedulers a controller drives (Ray's FIFOScheduler behaviour by default)."""

    display_name = "TrialScheduler"
    time_attr = "training_iteration"

    def __init__(self, metric: str, mode: str) -> None:
        if not metric or mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"{self.display_name} compares trials: set tune_config.metric and mode", field="tune_config.metric"
            )
        self.metric, self.mode = metric, mode

    def on_trial_add(self, controller: Controller, trial: SchedTrial) -> None:
        """A new trial (before it starts)."""

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        return CONTINUE

    def on_trial_complete(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> None:
        """A trial finished or was stopped while running."""

    def on_trial_error(self, controller: Controller, trial: SchedTrial) -> None:
        """A trial failed."""

    def on_trial_remove(self, controller: Controller, trial: SchedTrial) -> None:
        """A pending or paused trial was stopped."""

    def choose_trial_to_run(self, controller: Controller) -> SchedTrial | None:
        """Pending trials first, then paused ones, in order (Ray's FIFOScheduler)."""
        for status in (PENDING, PAUSED):
            for trial in controller.get_trials():
                if trial.status == status:
                    return trial
        return None


class MedianStoppingRule(ControllerScheduler):
    """Stops a trial whose best result is worse than the median of the others' running means (Ray's)."""

    display_name = "MedianStoppingRule"

    def __init__(self, options: dict[str, Any], metric: str, mode: str) -> None:
        super().__init__(metric, mode)
        self.time_attr = str(options.get("time_attr", "time_total_s"))
        self.grace_period = _real(options.get("grace_period", 60.0), "grace_period")
        self.min_samples_required = int(_real(options.get("min_samples_required", 3), "min_samples_required"))
        self.min_time_slice = _real(options.get("min_time_slice", 0), "min_time_slice")
        self.hard_stop = bool(options.get("hard_stop", True))
        self._compare = max if mode == "max" else min
        self._stopped: set[int] = set()
        self._last_pause: dict[int, float] = collections.defaultdict(lambda: float("-inf"))
        self._results: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        if self.time_attr not in result or self.metric not in result:
            return CONTINUE
        if trial.index in self._stopped:
            return CONTINUE  # paused once (hard_stop=False), then run FIFO
        time = result[self.time_attr]
        self._results[trial.index].append(result)
        if time < self.grace_period:
            return CONTINUE
        others = [i for i, results in self._results.items() if results[-1][self.time_attr] >= time]
        others.remove(trial.index)
        means = [m for m in (self._running_mean(i, time) for i in others) if np.isfinite(m)]
        if len(means) < self.min_samples_required:
            waiting = [t for t in controller.get_live_trials() if t.status in (PENDING, PAUSED)]
            if time - self._last_pause[trial.index] > self.min_time_slice and waiting:
                self._last_pause[trial.index] = time
                return PAUSE
            return CONTINUE
        median = np.median(means)
        best = self._compare([r[self.metric] for r in self._results[trial.index]])
        if self._compare(median, best) != best:
            self._stopped.add(trial.index)
            return STOP if self.hard_stop else PAUSE
        return CONTINUE

    def on_trial_complete(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> None:
        self._results[trial.index].append(result)

    def _running_mean(self, index: int, time: float) -> float:
        scoped = [r for r in self._results[index] if self.grace_period <= r[self.time_attr] <= time]
        if not scoped:
            return math.nan
        return float(np.mean([r[self.metric] for r in scoped]))


class _Bracket:
    """One HyperBand bracket, as Ray's ``hyperband._Bracket``."""

    def __init__(
        self, time_attr: str, max_trials: int, init_t: int, max_t: float, eta: float, s: int, stop_last: bool
    ) -> None:
        self.live: dict[SchedTrial, dict[str, Any] | None] = {}
        self.all: list[SchedTrial] = []
        self.time_attr = time_attr
        self.n = self.n0 = max_trials
        self.r = self.r0 = init_t
        self.max_t = max_t
        self.cumul_r = self.r0
        self.eta = eta
        self.halves = s
        self.total_work = self._total_work(self.n0, self.r0, s)
        self.completed = 0.0
        self.stop_last_trials = stop_last
        self.is_being_processed = False
        self.trials_to_unpause: set[SchedTrial] = set()

    def add_trial(self, trial: SchedTrial) -> None:
        self.live[trial] = None
        self.all.append(trial)

    def cur_iter_done(self) -> bool:
        return all(self._time(result) >= self.cumul_r for result in self.live.values())

    def finished(self) -> bool:
        return self.stop_last_trials and self.halves == 0 and self.cur_iter_done()

    def continue_trial(self, trial: SchedTrial) -> bool:
        if not self.stop_last_trials and self.halves == 0:
            return True
        return self._time(self.live[trial]) < self.cumul_r

    def filled(self) -> bool:
        return len(self.live) == self.n

    def successive_halving(self, metric: str, sign: float) -> tuple[list[SchedTrial], list[SchedTrial]]:
        if self.halves == 0 and not self.stop_last_trials:
            return list(self.live), []
        self.halves -= 1
        self.n = int(np.ceil(self.n / self.eta))
        self.r = int(min(self.r * self.eta, self.max_t))
        self.cumul_r = self.r
        ranked = sorted(self.live, key=lambda t: sign * self.live[t][metric])  # type: ignore[index]
        return ranked[-self.n :], ranked[: -self.n]

    def update_trial_stats(self, trial: SchedTrial, result: dict[str, Any]) -> None:
        self.completed += self._time(result) - self._time(self.live[trial])
        self.live[trial] = result
        self.trials_to_unpause.discard(trial)

    def cleanup_trial(self, trial: SchedTrial) -> None:
        self.live.pop(trial, None)

    def cleanup_full(self, controller: Controller) -> None:
        for trial in list(self.live):
            if trial.status == PAUSED:
                controller.stop_trial(trial)

    def completion_percentage(self) -> float:
        if self.finished():
            return 1.0
        return min(self.completed / self.total_work, 1.0) if self.total_work else 0.0

    def _time(self, result: dict[str, Any] | None) -> float:
        return 0 if result is None else result[self.time_attr]

    def _total_work(self, n: float, r: float, s: int) -> int:
        work, cumulative_r = 0, r
        for _ in range(s + 1):
            work += int(n) * int(r)
            n = int(np.ceil(n / self.eta))
            r = int(min(r * self.eta, self.max_t - cumulative_r))
        return work


class HyperBandScheduler(ControllerScheduler):
    """Synchronous HyperBand (Ray's): trials pause at each bracket's milestone until it is halved."""

    display_name = "HyperBandScheduler"

    def __init__(self, options: dict[str, Any], metric: str, mode: str) -> None:
        super().__init__(metric, mode)
        self.time_attr = str(options.get("time_attr", "training_iteration"))
        self.max_t = _real(options.get("max_t", 81), "max_t")
        self.eta = _real(options.get("reduction_factor", 3), "reduction_factor")
        if self.eta <= 1:
            raise InvalidArgumentError("HyperBand needs reduction_factor > 1", field=f"{FIELD}.reduction_factor")
        self.stop_last_trials = bool(options.get("stop_last_trials", True))
        self.s_max_1 = int(np.round(np.log(self.max_t) / np.log(self.eta))) + 1
        if not 0 < self.s_max_1 <= 64:
            raise InvalidArgumentError(
                f"HyperBand with max_t {self.max_t:g} and reduction_factor {self.eta:g} has {self.s_max_1} "
                "brackets; 1 to 64 are allowed",
                field=f"{FIELD}.max_t",
            )
        self.sign = 1.0 if mode == "max" else -1.0
        self.hyperbands: list[list[_Bracket | None]] = [[]]
        self.trial_info: dict[SchedTrial, _Bracket] = {}
        self.bracket: _Bracket | None = None
        self.band_idx = 0
        self.num_stopped = 0

    def _n0(self, s: int) -> int:
        return int(np.ceil(self.s_max_1 / (s + 1) * self.eta**s))

    def _r0(self, s: int) -> int:
        return int(self.max_t * self.eta ** (-s))

    def _next_s(self, band: list[_Bracket | None]) -> int:
        return len(band)

    def on_trial_add(self, controller: Controller, trial: SchedTrial) -> None:
        band = self.hyperbands[self.band_idx]
        if self.bracket is None or self.bracket.filled():
            while True:
                if len(band) == self.s_max_1:
                    band = []
                    self.hyperbands.append(band)
                    self.band_idx += 1
                s = self._next_s(band)
                if self._r0(s) == 0:
                    self.bracket = None  # too small a bracket: Ray records it as None and tries the next
                    band.append(None)
                    continue
                self.bracket = _Bracket(
                    self.time_attr, self._n0(s), self._r0(s), self.max_t, self.eta, s, self.stop_last_trials
                )
                band.append(self.bracket)
                break
        self.bracket.add_trial(trial)
        self.trial_info[trial] = self.bracket

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        bracket = self.trial_info[trial]
        bracket.update_trial_stats(trial, result)
        if bracket.continue_trial(trial):
            return CONTINUE
        return self._process_bracket(controller, bracket)

    def _process_bracket(self, controller: Controller, bracket: _Bracket) -> str:
        action = PAUSE
        if bracket.cur_iter_done():
            if bracket.finished():
                bracket.cleanup_full(controller)
                return STOP
            bracket.is_being_processed = True
            good, bad = bracket.successive_halving(self.metric, self.sign)
            self.num_stopped += len(bad)
            for t in bad:
                if t.status == PAUSED:
                    controller.stop_trial(t)
                elif t.status == RUNNING:
                    bracket.cleanup_trial(t)
                    action = STOP
            for t in good:
                if bracket.continue_trial(t):
                    if t.status == PAUSED:
                        self._unpause_trial(controller, t)
                        bracket.trials_to_unpause.add(t)
                    elif t.status == RUNNING:
                        action = CONTINUE
                elif bracket.finished() and bracket.stop_last_trials:
                    if t.status == PAUSED:
                        controller.stop_trial(t)
                    elif t.status == RUNNING:
                        bracket.cleanup_trial(t)
                        action = STOP
        return action

    def _unpause_trial(self, controller: Controller, trial: SchedTrial) -> None:
        """A trial may run again (BOHB tells its searcher)."""

    def on_trial_remove(self, controller: Controller, trial: SchedTrial) -> None:
        bracket = self.trial_info.get(trial)
        if bracket is None:
            return
        bracket.cleanup_trial(trial)
        if not bracket.finished() and not bracket.is_being_processed:
            self._process_bracket(controller, bracket)

    def on_trial_complete(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> None:
        self.on_trial_remove(controller, trial)

    def on_trial_error(self, controller: Controller, trial: SchedTrial) -> None:
        self.on_trial_remove(controller, trial)

    def _runnable(self, bracket: _Bracket) -> SchedTrial | None:
        for trial in list(bracket.live):
            if (trial.status == PAUSED and trial in bracket.trials_to_unpause) or trial.status == PENDING:
                return trial
        return None

    def choose_trial_to_run(self, controller: Controller) -> SchedTrial | None:
        for band in self.hyperbands:
            for bracket in sorted((b for b in band if b is not None), key=lambda b: b.completion_percentage()):
                trial = self._runnable(bracket)
                if trial is not None:
                    return trial
        return None


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand as BOHB runs it (Ray's): the largest bracket first; trials pause before it is filled."""

    display_name = "HyperBandForBOHB"

    def __init__(self, options: dict[str, Any], metric: str, mode: str) -> None:
        missing = [name for name in ("hpbandster", "ConfigSpace") if importlib.util.find_spec(name) is None]
        if missing and not options.get("_decisions_only"):
            raise InvalidArgumentError(
                "HyperBandForBOHB runs with BOHB's searcher (TuneBOHB), which needs the packages "
                f"{' and '.join(missing)}; they are not installed on the coordinator "
                "(pip install hpbandster ConfigSpace)",
                field=f"{FIELD}.name",
            )
        super().__init__(options, metric, mode)

    def _next_s(self, band: list[_Bracket | None]) -> int:
        return self.s_max_1 - len(band) - 1

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        result["hyperband_info"] = {}
        bracket = self.trial_info[trial]
        bracket.update_trial_stats(trial, result)
        if bracket.continue_trial(trial):
            return CONTINUE
        result["hyperband_info"]["budget"] = bracket.cumul_r
        if not bracket.filled() or any(t.status != PAUSED for t in bracket.live if t is not trial):
            return PAUSE
        return self._process_bracket(controller, bracket)

    def choose_trial_to_run(self, controller: Controller, allow_recurse: bool = True) -> SchedTrial | None:
        for band in self.hyperbands:
            for bracket in (b for b in band if b is not None):
                trial = self._runnable(bracket)
                if trial is not None:
                    return trial
        if not any(t.status == RUNNING for t in controller.get_trials()):
            for band in self.hyperbands:
                for bracket in band:
                    if bracket and any(t.status == PAUSED for t in bracket.live):
                        self._process_bracket(controller, bracket)
                        if allow_recurse and self._runnable(bracket) is not None:
                            return self.choose_trial_to_run(controller, allow_recurse=False)
        return None


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgumentError(f"scheduler.{name} must be a finite number, got {value!r}", field=f"{FIELD}.{name}")
    return float(value)
