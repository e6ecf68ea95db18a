"""Population Based Bandits, as ``ray.tune.schedulers.pb2``: PBT whose explore is a Gaussian process bandit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwire.tune.schedulers.pbt import PopulationBasedTraining
from trainwire.tune.schedulers.trial_scheduler import TrialScheduler, _number
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import tune_pb2

__all__ = ["PB2"]


def import_pb2_dependencies() -> Any:
    """scikit-learn, or None where it is not installed (Ray's check of PB2's Gaussian process library).

    trainwire's PB2 explores in the coordinator, which has it; a script may still ask, as Ray's examples do.
    """
    try:
        import sklearn
    except ImportError:
        return None
    return sklearn


def _check_bounds(bounds: dict[str, Any], prefix: str = "") -> None:
    for key, value in bounds.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _check_bounds(value, f"{name}/")
            continue
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise InvalidArgumentError(
                "`hyperparam_bounds` values must either be a list or tuple of size 2, "
                f"but got {value} instead for the param '{name}'",
                field=f"scheduler.hyperparam_bounds.{name}",
            )
        low, high = (_number(v, f"hyperparam_bounds.{name}") for v in value)
        if low > high:
            raise InvalidArgumentError(
                "`hyperparam_bounds` values must be of the form [low, high] where low <= high, "
                f"but got {value} instead for param '{name}'.",
                field=f"scheduler.hyperparam_bounds.{name}",
            )


class PB2(PopulationBasedTraining):
    """Population Based Bandits, as ``ray.tune.schedulers.pb2.PB2``.

    Decides on results as ``PopulationBasedTraining`` does (a trial in the bottom quantile goes
    on from a top trial's checkpoint); the clone's new values, within ``hyperparam_bounds``, are
    chosen by Ray's own PB2 explore (a Gaussian process bandit over the population's reward
    changes), run by the coordinator. Values a trial's config lacks are drawn uniformly within
    their bounds. Needs scikit-learn where the coordinator runs.

    Args:
        time_attr: The reported metric that counts progress.
        metric: The metric trials are compared on (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
        perturbation_interval: Trials are considered for exploit every this much ``time_attr``.
        hyperparam_bounds: For each key (nested dicts allowed): ``[low, high]``.
        quantile_fraction: The top and bottom fraction of trials (0 to 0.5).
        log_config: Accepted for Ray's signature.
        require_attrs: Fail the search when a result lacks ``time_attr`` or ``metric``.
        synch: Perturb all trials at once, when each has reached the interval.
        custom_explore_fn: Not supported (InvalidArgumentError): PB2's explore runs in the coordinator.
    """

    name = "pb2"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict[str, dict | list | tuple] | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict], dict] | None = None,
    ) -> None:
        hyperparam_bounds = hyperparam_bounds or {}
        if not hyperparam_bounds or not isinstance(hyperparam_bounds, dict):
            raise InvalidArgumentError(
                "`hyperparam_bounds` must be specified to use PB2 scheduler.", field="scheduler.hyperparam_bounds"
            )
        if custom_explore_fn is not None:
            raise InvalidArgumentError(
                "PB2's explore runs in the coordinator: custom_explore_fn is not supported "
                "(PopulationBasedTraining takes one)",
                field="scheduler.custom_explore_fn",
            )
        _check_bounds(hyperparam_bounds)
        TrialScheduler.__init__(self, metric, mode)
        super().__init__(
            time_attr=time_attr,
            metric=metric,
            mode=mode,
            perturbation_interval=perturbation_interval,
            hyperparam_mutations=dict(hyperparam_bounds),
            quantile_fraction=quantile_fraction,
            resample_probability=0,
            log_config=log_config,
            require_attrs=require_attrs,
            synch=synch,
        )
        self.hyperparam_bounds = hyperparam_bounds

    def to_proto(self) -> tune_pb2.TrialScheduler:
        msg = TrialScheduler.to_proto(self)
        msg.time_attr = self.time_attr
        options = {
            "time_attr": self.time_attr,
            "perturbation_interval": self.perturbation_interval,
            "quantile_fraction": self.quantile_fraction,
            "log_config": self.log_config,
            "require_attrs": self.require_attrs,
            "synch": self.synch,
            "hyperparam_bounds": _as_lists(self.hyperparam_bounds),
        }
        msg.options.CopyFrom(to_struct(options, "scheduler"))
        return msg


def _as_lists(bounds: dict[str, Any]) -> dict[str, Any]:
    return {k: _as_lists(v) if isinstance(v, dict) else [float(x) for x in v] for k, v in bounds.items()}
