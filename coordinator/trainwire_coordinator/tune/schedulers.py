"""Trial schedulers: decide on each report, as it streams in, whether a trial goes on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwire_coordinator.tune import pbt, scheduling
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import tune_pb2

SCHEDULER_FIELD = "tune_config.scheduler"
# The most rungs a bracket may have (Ray's defaults give 4; 2**-60 of max_t at a factor of 2 is 60).
MAX_RUNGS = 64


@dataclass(frozen=True)
class Stop:
    """A scheduler's decision to stop a trial.

    Attributes:
        reason: Shown as the trial's state reason.
        early: Stopped before it finished (CANCELLED), not at ``max_t`` (a finished trial).
    """

    reason: str
    early: bool


class FIFOScheduler:
    """Lets every trial run to its end (Ray's FIFOScheduler)."""

    display_name = "FIFOScheduler"

    def on_result(self, trial: int, progress: float, value: float | None) -> Stop | None:
        return None


class _Bracket:
    """One bracket of rungs, as Ray's ``_Bracket``: milestones from ``max_t`` down to ``grace_period``."""

    def __init__(self, min_t: float, max_t: float, reduction_factor: float, s: int) -> None:
        self.rf = reduction_factor
        max_rungs = int(math.log(max_t / min_t) / math.log(reduction_factor) - s + 1)
        self.rungs: list[tuple[float, dict[int, float]]] = [
            (min_t * reduction_factor ** (k + s), {}) for k in reversed(range(max_rungs))
        ]

    def cutoff(self, recorded: dict[int, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial: int, progress: float, reward: float) -> float | None:
        """Records the trial at the rung it reached; returns the milestone it fell short at, if it did."""
        for milestone, recorded in self.rungs:
            if progress < milestone or trial in recorded:
                continue
            cutoff = self.cutoff(recorded)
            recorded[trial] = reward
            if cutoff is not None and reward < cutoff:
                return milestone
            break
        return None


class ASHAScheduler:
    """Asynchronous successive halving (Ray's ASHAScheduler / AsyncHyperBandScheduler).

    At each rung (``grace_period * reduction_factor**k``), a trial goes on only if its metric is
    in the top ``1 / reduction_factor`` of the trials that reached that rung before it.
    """

    display_name = "ASHAScheduler"

    def __init__(self, spec: tune_pb2.TrialScheduler, mode: str) -> None:
        self.time_attr = spec.time_attr or "training_iteration"
        self.max_t = spec.max_t or 100.0
        grace = spec.grace_period or 1.0
        rf = spec.reduction_factor or 4.0
        brackets = spec.brackets or 1
        field = "tune_config.scheduler"
        if not (0 < grace <= self.max_t) or not math.isfinite(self.max_t):
            raise InvalidArgumentError("ASHA needs 0 < grace_period <= max_t", field=f"{field}.grace_period")
        if rf <= 1 or not math.isfinite(rf):
            raise InvalidArgumentError("ASHA needs reduction_factor > 1", field=f"{field}.reduction_factor")
        if not 0 < brackets <= 16:
            raise InvalidArgumentError("ASHA takes 1 to 16 brackets", field=f"{field}.brackets")
        rungs = math.log(self.max_t / grace) / math.log(rf)
        if rungs > MAX_RUNGS:
            # Each rung is a list the scheduler keeps: a reduction factor of 1.0000001 would ask for billions.
            raise InvalidArgumentError(
                f"ASHA with grace_period {grace:g}, max_t {self.max_t:g} and reduction_factor {rf:g} has "
                f"{rungs:.0f} rungs; at most {MAX_RUNGS}: raise reduction_factor or grace_period",
                field=f"{field}.reduction_factor",
            )
        self.sign = 1.0 if mode == "max" else -1.0
        self.brackets = [_Bracket(grace, self.max_t, rf, s) for s in range(brackets)]
        self.rng = np.random.default_rng(0)
        self.bracket_of: dict[int, _Bracket] = {}

    def _bracket(self, trial: int) -> _Bracket:
        bracket = self.bracket_of.get(trial)
        if bracket is None:
            # As Ray: bracket s with probability proportional to reduction_factor**-s... by its rung count.
            sizes = np.array([len(b.rungs) for b in self.brackets], dtype=float)
            weights = np.exp(sizes) / np.exp(sizes).sum()
            bracket = self.bracket_of[trial] = self.brackets[int(self.rng.choice(len(self.brackets), p=weights))]
        return bracket

    def on_result(self, trial: int, progress: float, value: float | None) -> Stop | None:
        if progress >= self.max_t:
            return Stop(f"reached max_t: {self.time_attr} {_number(progress)}", early=False)
        if value is None or not math.isfinite(value):
            return None
        milestone = self._bracket(trial).on_result(trial, progress, self.sign * value)
        if milestone is not None:
            return Stop(f"stopped by ASHA at {self.time_attr} {_number(progress)}", early=True)
        return None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def make_scheduler(spec: tune_pb2.TrialScheduler, mode: str, metric: str = "") -> Any:
    """The request's scheduler (default: FIFO).

    FIFO and ASHA decide on each report alone (``on_result``); the others are driven as Ray's
    TuneController drives them (``scheduling.ControllerScheduler``).
    """
    name = spec.name or "fifo"
    options = struct_to_dict(spec.options)
    if name == "fifo":
        return FIFOScheduler()
    if name in ("asha", "async_hyperband"):
        return ASHAScheduler(spec, mode)
    if name == "median_stopping_rule":
        return scheduling.MedianStoppingRule(options, metric, mode)
    if name == "hyperband":
        return scheduling.HyperBandScheduler(options, metric, mode)
    if name == "hb_bohb":
        return scheduling.HyperBandForBOHB(options, metric, mode)
    if name == "pbt":
        return pbt.make_pbt(spec, options, metric, mode)
    if name == "pb2":
        return pbt.make_pb2(options, metric, mode)
    if name == "pbt_replay":
        return pbt.PopulationBasedTrainingReplay(options)
    raise InvalidArgumentError(
        f"unknown scheduler {name!r}; known: {', '.join(NAMES)}",
        field="tune_config.scheduler.name",
    )


# The schedulers a request may name (ResourceChangingScheduler travels as its base scheduler).
NAMES = ("fifo", "asha", "async_hyperband", "median_stopping_rule", "hyperband", "hb_bohb", "pbt", "pb2", "pbt_replay")
