"""Population Based Training, as ``ray.tune.schedulers.pbt``: the search's driver exploits and explores."""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from trainwire.tune.schedulers.trial_scheduler import TrialScheduler, _number
from trainwire.tune.search.sample import Domain, Function
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import tune_pb2

__all__ = ["PopulationBasedTraining", "PopulationBasedTrainingReplay"]

# How a search domain travels among the JSON mutations (the coordinator's tune.pbt.DOMAIN_KEY).
DOMAIN_KEY = "__domain__"


def _encode(value: Any, path: str) -> Any:
    """Mutations as JSON, or None when they hold code (functions: they travel pickled)."""
    if isinstance(value, Function):
        raise ValueError(
            "arbitrary tune.sample_from objects are not supported for `hyperparam_mutation` values."
            "You must use other built in primitives like tune.uniform, tune.loguniform, etc."
        )
    if isinstance(value, Domain):
        return {DOMAIN_KEY: json_format.MessageToDict(value.to_proto(), preserving_proto_field_name=True)}
    if isinstance(value, dict):
        parts = {str(k): _encode(v, f"{path}.{k}") for k, v in value.items()}
        return None if any(v is None for v in parts.values()) else parts
    if isinstance(value, list | tuple):
        try:
            json.dumps(list(value))
        except TypeError:
            return None  # objects: they travel pickled, as Ray keeps them
        return list(value)
    if callable(value):
        return None
    raise TypeError(
        "`hyperparam_mutation` values must be either a List, Tuple, Dict, a tune search space object, or a callable."
    )


def _pickle(code: dict[str, Any]) -> bytes:
    """cloudpickle, shipping the code of the caller's own modules (the cluster cannot import them)."""
    from trainwire.runtime_env import pickle_by_value

    try:
        return pickle_by_value(code, {getattr(v, "__module__", None) for v in _callables(code)})
    except Exception as exc:
        raise InvalidArgumentError(
            f"PopulationBasedTraining's functions cannot be pickled: {exc}", field="scheduler.hyperparam_mutations"
        ) from exc


def _callables(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [c for v in value.values() for c in _callables(v)]
    return [value] if callable(value) and not isinstance(value, Domain) else []


class PopulationBasedTraining(TrialScheduler):
    """Population Based Training, as ``ray.tune.schedulers.PopulationBasedTraining``.

    Every ``perturbation_interval`` of ``time_attr``, a trial in the bottom ``quantile_fraction``
    of the population stops and goes on, in a new run, from the latest committed checkpoint of a
    trial in the top quantile (exploit), with that trial's config perturbed (explore: each
    continuous value times one of ``perturbation_factors``, a list value moved to a neighbour, or
    resampled with ``resample_probability``), as Ray's do. Trials should report a checkpoint with
    their results and load ``train.get_checkpoint()`` when they start.

    Mutations given as lists and search domains are explored by the coordinator; functions (and a
    ``custom_explore_fn``) are pickled (a ``submit-code`` token) and run in an actor of the search.

    Args:
        time_attr: The reported metric that counts progress.
        metric: The metric trials are compared on (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
        perturbation_interval: Trials are considered for exploit every this much ``time_attr``.
        burn_in_period: No trial is perturbed before this much ``time_attr``.
        hyperparam_mutations: For each key: a list, a dict of these, a search domain or a function.
        quantile_fraction: The top and bottom fraction of trials (0 to 0.5).
        resample_probability: The chance a value is drawn anew rather than perturbed.
        perturbation_factors: The factors continuous values are multiplied by.
        custom_explore_fn: ``f(config) -> config``, called after the built-in perturbations.
        log_config: Accepted for Ray's signature; each exploit is in the trial's state reason and
            its run's ``resume_from_checkpoint``.
        require_attrs: Fail the search when a result lacks ``time_attr`` or ``metric``.
        synch: Perturb all trials at once, when each has reached the interval.
    """

    name = "pbt"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: dict[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
    ) -> None:
        super().__init__(metric, mode)
        hyperparam_mutations = hyperparam_mutations or {}
        if not isinstance(hyperparam_mutations, dict):
            raise InvalidArgumentError("hyperparam_mutations must be a dict", field="scheduler.hyperparam_mutations")
        encoded = _encode(hyperparam_mutations, "hyperparam_mutations")
        if not hyperparam_mutations and not custom_explore_fn:
            raise InvalidArgumentError(
                "You must specify at least one of `hyperparam_mutations` or `custom_explore_fn` to use PBT.",
                field="scheduler.hyperparam_mutations",
            )
        if not 0 <= _number(quantile_fraction, "quantile_fraction") <= 0.5:
            raise InvalidArgumentError(
                f"You must set `quantile_fraction` to a value between 0 and 0.5. Current value: '{quantile_fraction}'",
                field="scheduler.quantile_fraction",
            )
        if not _number(perturbation_interval, "perturbation_interval") > 0:
            raise InvalidArgumentError(
                "perturbation_interval must be a positive number greater than 0. "
                f"Current value: '{perturbation_interval}'",
                field="scheduler.perturbation_interval",
            )
        factors = list(perturbation_factors)
        if not factors or any(isinstance(f, bool) or not isinstance(f, numbers.Real) for f in factors):
            raise InvalidArgumentError("perturbation_factors must be numbers", field="scheduler.perturbation_factors")
        self.time_attr = time_attr
        self.perturbation_interval = float(perturbation_interval)
        self.burn_in_period = _number(burn_in_period, "burn_in_period")
        self.hyperparam_mutations = hyperparam_mutations
        self.quantile_fraction = float(quantile_fraction)
        self.resample_probability = _number(resample_probability, "resample_probability")
        self.perturbation_factors = tuple(perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.log_config, self.require_attrs, self.synch = bool(log_config), bool(require_attrs), bool(synch)
        self._encoded = encoded if custom_explore_fn is None else None

    def to_proto(self) -> tune_pb2.TrialScheduler:
        msg = super().to_proto()
        msg.time_attr = self.time_attr
        options: dict[str, Any] = {
            "time_attr": self.time_attr,
            "perturbation_interval": self.perturbation_interval,
            "burn_in_period": self.burn_in_period,
            "quantile_fraction": self.quantile_fraction,
            "resample_probability": self.resample_probability,
            "perturbation_factors": [float(f) for f in self.perturbation_factors],
            "log_config": self.log_config,
            "require_attrs": self.require_attrs,
            "synch": self.synch,
        }
        if self._encoded is not None:
            options["hyperparam_mutations"] = self._encoded
        else:
            code = {"hyperparam_mutations": self.hyperparam_mutations, "custom_explore_fn": self.custom_explore_fn}
            msg.pickled_code = _pickle(code)
        msg.options.CopyFrom(to_struct(options, "scheduler"))
        return msg


class PopulationBasedTrainingReplay(TrialScheduler):
    """Replays one trial's schedule of configs from a PBT policy file (``pbt_policy_<trial>.txt``).

    As ``ray.tune.schedulers.PopulationBasedTrainingReplay``: the file is read here; the search's
    one trial starts with the policy's first config, and at each change point it goes on in a new
    run, from its latest checkpoint, with the next config.

    Args:
        policy_file: The policy file (JSON lines of Ray's ``[old_tag, new_tag, old_step,
            new_step, old_config, new_config]``).
    """

    name = "pbt_replay"

    def __init__(self, policy_file: str) -> None:
        super().__init__()
        path = Path(policy_file).expanduser()
        if not path.exists():
            raise ValueError(f"Policy file not found: {path.as_posix()}")
        self.policy_file = path.as_posix()
        self.config, self._policy = self._load_policy(self.policy_file)
        self.current_config = self.config

    @staticmethod
    def _load_policy(policy_file: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
        raw = []
        with open(policy_file) as fp:
            for row in fp.readlines():
                try:
                    raw.append(tuple(json.loads(row)))
                except json.JSONDecodeError:
                    raise ValueError(f"Could not read PBT policy file: {policy_file}.") from None
        policy, last_new_tag, last_old_conf = [], None, None
        for old_tag, new_tag, _old_step, new_step, old_conf, new_conf in reversed(raw):
            if last_new_tag and old_tag != last_new_tag:
                break  # the tag chain ended: earlier changes were overwritten by the last one
            last_new_tag, last_old_conf = new_tag, old_conf
            policy.append((new_step, new_conf))
        return last_old_conf, list(reversed(policy))  # type: ignore[return-value]

    def to_proto(self) -> tune_pb2.TrialScheduler:
        msg = super().to_proto()
        options = {"initial_config": self.config, "policy": [[step, conf] for step, conf in self._policy]}
        msg.options.CopyFrom(to_struct(options, "scheduler.policy_file"))
        return msg
