"""Population Based Training (Ray 2.60's ``PopulationBasedTraining`` and ``PopulationBasedTrainingReplay``).

Exploit: a trial in the bottom quantile stops, and starts again from the latest committed
checkpoint of a trial in the top quantile (its run is a new run of the same trial, with
``resume_from_checkpoint`` set). Explore: its config is the top trial's, perturbed as Ray's
``_explore`` perturbs it. Mutations given as data (lists, search domains) are explored here;
mutations that hold code (functions, a ``custom_explore_fn``) arrive pickled and are explored in an
actor of the search on the cluster, never in the coordinator's process.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import ray
from google.protobuf import json_format

from trainwire_coordinator.tune.scheduling import (
    CONTINUE,
    FIELD,
    NOOP,
    PAUSE,
    PAUSED,
    PENDING,
    Controller,
    ControllerScheduler,
    SchedTrial,
    _real,
)
from trainwire_coordinator.tune.space import FLOAT_SAMPLERS, Param
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_core.v1 import tune_pb2

logger = logging.getLogger(__name__)

# How a search domain travels among JSON mutations: {"__domain__": <tune_pb2.Domain as JSON>}.
DOMAIN_KEY = "__domain__"


def explore(
    config: dict[str, Any],
    mutations: dict[str, Any],
    resample_probability: float,
    perturbation_factors: tuple[float, ...] | list[float],
    custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None,
    rng: random.Random,
    sample: Callable[[Any], Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A perturbed copy of ``config`` and the operations done, as Ray's ``pbt._explore``.

    The same calls on ``rng`` in the same order as Ray's on ``random``, so one seed gives one
    config. ``sample(distribution)`` draws from a search domain or calls a function.
    """
    operations: dict[str, Any] = {}
    new_config = copy.deepcopy(config)
    for key, distribution in mutations.items():
        if isinstance(distribution, dict):
            nested, nested_ops = explore(
                config[key], distribution, resample_probability, perturbation_factors, None, rng, sample
            )
            new_config[key] = nested
            operations[key] = nested_ops
        elif isinstance(distribution, list | tuple):
            if rng.random() < resample_probability or config[key] not in distribution:
                new_config[key] = rng.choice(distribution)
                operations[key] = "resample"
            else:
                shift = rng.choice([-1, 1])
                old_idx = list(distribution).index(config[key])
                new_idx = min(max(old_idx + shift, 0), len(distribution) - 1)
                new_config[key] = distribution[new_idx]
                operations[key] = f"shift {'left' if shift == -1 else 'right'}{' (noop)' if old_idx == new_idx else ''}"
        else:
            if rng.random() < resample_probability:
                new_config[key] = sample(distribution)
                operations[key] = "resample"
            else:
                factor = rng.choice(perturbation_factors)
                new_config[key] = config[key] * factor
                operations[key] = f"* {factor}"
            if isinstance(config[key], bool):
                new_config[key] = bool(new_config[key])
            elif isinstance(config[key], int) and not _float_domain(distribution):
                # A request's values are JSON: 1.0 arrives as 1. A float domain says it is a float.
                new_config[key] = int(round(new_config[key]))
    if custom_explore_fn:
        new_config = custom_explore_fn(new_config)
        if new_config is None:
            raise ValueError("Custom explore fn failed to return new config")
    return new_config, operations


def _float_domain(distribution: Any) -> bool:
    sampler = getattr(getattr(distribution, "domain", None), "sampler", None) or getattr(distribution, "sampler", None)
    return sampler in FLOAT_SAMPLERS


def fill_config(config: dict[str, Any], attr: str, space: Any, rng: random.Random, sample: Callable) -> None:
    """Samples a parameter PBT mutates but the trial's config lacks (Ray's ``_fill_config``)."""
    if isinstance(space, dict):
        config[attr] = {}
        for key, value in space.items():
            fill_config(config[attr], key, value, rng, sample)
    elif isinstance(space, list | tuple):
        config[attr] = rng.choice(space)
    else:
        config[attr] = sample(space)


def decode_mutations(value: Any, path: tuple[str, ...] = ()) -> Any:
    """Mutations from the request's JSON: lists stay lists, ``{"__domain__": ...}`` becomes a Param."""
    if isinstance(value, dict) and DOMAIN_KEY in value:
        domain = json_format.ParseDict(value[DOMAIN_KEY], tune_pb2.Domain())
        field = f"{FIELD}.options.hyperparam_mutations.{'.'.join(path)}"
        if domain.sampler in ("grid_search", "sample_from"):
            raise InvalidArgumentError(
                f"hyperparam_mutations take lists, functions and search domains; not {domain.sampler}", field=field
            )
        return Param(path, domain, field)
    if isinstance(value, dict):
        return {k: decode_mutations(v, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return value
    raise InvalidArgumentError(
        f"hyperparam_mutations[{'.'.join(path)!r}] must be a list, a dict, a function or a search domain, "
        f"got {value!r}",
        field=f"{FIELD}.options.hyperparam_mutations",
    )


def sampler(np_rng: np.random.Generator) -> Callable[[Any], Any]:
    """Draws from a coordinator Param, a client search domain (``to_proto``) or a function."""

    def sample(distribution: Any) -> Any:
        if isinstance(distribution, Param):
            return distribution.sample(np_rng)
        if hasattr(distribution, "to_proto"):
            return Param(("value",), distribution.to_proto(), "").sample(np_rng)
        return distribution()

    return sample


class LocalExplorer:
    """Explores mutations given as data, in the coordinator."""

    def __init__(
        self, mutations: dict[str, Any], resample: float, factors: tuple[float, ...], rng: random.Random, seed: int = 0
    ) -> None:
        # One random stream with the scheduler's, as Ray's explore and choice of trial share ``random``.
        self.mutations, self.resample, self.factors, self.rng = mutations, resample, factors, rng
        self.sample = sampler(np.random.default_rng(seed))

    def explore(self, config: dict[str, Any]) -> dict[str, Any]:
        return explore(config, self.mutations, self.resample, self.factors, None, self.rng, self.sample)[0]

    def fill(self, config: dict[str, Any]) -> bool:
        """Samples the mutated keys the config lacks; whether any was."""
        missing = [attr for attr in self.mutations if attr not in config]
        for attr in missing:
            fill_config(config, attr, self.mutations[attr], self.rng, self.sample)
        return bool(missing)

    def close(self) -> None:
        """Nothing to release."""


class ExplorerHost:
    """Holds pickled mutations and a custom explore function on the cluster (a Ray actor of no CPU)."""

    def __init__(self, pickled: bytes, resample: float, factors: list[float], seed: int) -> None:
        code = cloudpickle.loads(pickled)
        self.mutations = code.get("hyperparam_mutations") or {}
        self.custom = code.get("custom_explore_fn")
        self.resample, self.factors = resample, tuple(factors)
        self.rng = random.Random(seed)
        self.sample = sampler(np.random.default_rng(seed))

    def explore(self, config: dict[str, Any]) -> dict[str, Any]:
        return explore(config, self.mutations, self.resample, self.factors, self.custom, self.rng, self.sample)[0]


class RemoteExplorer:
    """Explores in an actor: ``explore`` answers a reference the search's driver awaits."""

    def __init__(self, pickled: bytes, resample: float, factors: tuple[float, ...], seed: int) -> None:
        self.args = (pickled, resample, list(factors), seed)
        self._actor: Any = None

    @property
    def actor(self) -> Any:
        # Made on first use: a request's checks build its plan too, and they explore nothing.
        if self._actor is None:
            host = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(ExplorerHost)
            self._actor = host.remote(*self.args)
        return self._actor

    def explore(self, config: dict[str, Any]) -> Any:
        return self.actor.explore.remote(config)

    def fill(self, config: dict[str, Any]) -> bool:
        """Nothing: mutations that hold code are not sampled for keys a trial's config lacks (give them)."""
        return False

    @staticmethod
    async def answer(ref: Any) -> dict[str, Any]:
        """The explored config; what the user's code raised fails the search naming the scheduler."""
        try:
            config = await ref
        except ray.exceptions.RayTaskError as exc:
            raise FailedPreconditionError(
                f"PopulationBasedTraining's explore raised {exc.cause!r}", field=f"{FIELD}.pickled_code"
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise FailedPreconditionError(
                f"PopulationBasedTraining's explore could not run: {exc}", field=f"{FIELD}.pickled_code"
            ) from None
        if not isinstance(config, dict):
            raise FailedPreconditionError(
                f"custom_explore_fn must return a dict, got {type(config).__name__}", field=f"{FIELD}.pickled_code"
            )
        return config

    def close(self) -> None:
        if self._actor is None:
            return
        try:
            ray.kill(self._actor, no_restart=True)
        except Exception:  # already gone (Ray shut down with the coordinator)
            logger.debug("the explorer actor was already gone", exc_info=True)


class _TrialState:
    """PBT's state of one trial (Ray's ``_PBTTrialState``)."""

    def __init__(self) -> None:
        self.last_score: float | None = None
        self.last_checkpoint: Any = None
        self.last_perturbation_time: float = 0
        self.last_train_time: float = 0
        self.last_result: dict[str, Any] | None = None


class PopulationBasedTraining(ControllerScheduler):
    """Ray's PopulationBasedTraining, deciding on the same results as Ray's does.

    Args:
        options: Ray's arguments by name (JSON values; mutations decoded by ``decode_mutations``).
        metric: The search's metric.
        mode: "min" or "max".
        explorer: Explores configs (``LocalExplorer`` or ``RemoteExplorer``).
        rng: Picks the trial to clone, as Ray's ``random.choice``.
    """

    display_name = "PopulationBasedTraining"

    def __init__(
        self,
        options: dict[str, Any],
        metric: str,
        mode: str,
        explorer: LocalExplorer | RemoteExplorer,
        rng: random.Random,
    ) -> None:
        super().__init__(metric, mode)
        self.time_attr = str(options.get("time_attr", "time_total_s"))
        self.perturbation_interval = _real(options.get("perturbation_interval", 60.0), "perturbation_interval")
        self.burn_in_period = _real(options.get("burn_in_period", 0.0), "burn_in_period")
        self.quantile_fraction = _real(options.get("quantile_fraction", 0.25), "quantile_fraction")
        if not 0 <= self.quantile_fraction <= 0.5:
            raise InvalidArgumentError(
                f"quantile_fraction must be between 0 and 0.5, got {self.quantile_fraction:g}",
                field=f"{FIELD}.options.quantile_fraction",
            )
        if self.perturbation_interval <= 0:
            raise InvalidArgumentError(
                "perturbation_interval must be > 0", field=f"{FIELD}.options.perturbation_interval"
            )
        self.require_attrs = bool(options.get("require_attrs", True))
        self.synch = bool(options.get("synch", False))
        self.explorer, self.rng = explorer, rng
        self.sign = 1.0 if mode == "max" else -1.0
        self.trial_state: dict[SchedTrial, _TrialState] = {}
        self.next_perturbation_sync = max(self.perturbation_interval, self.burn_in_period)
        self.num_checkpoints = 0
        self.num_perturbations = 0

    def on_trial_add(self, controller: Controller, trial: SchedTrial) -> None:
        self.trial_state[trial] = _TrialState()
        self.explorer.fill(trial.config)

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        for attr, what in ((self.time_attr, "time_attr"), (self.metric, "metric")):
            if attr not in result and self.require_attrs:
                # As Ray's RuntimeError: the search fails, naming the missing key.
                raise FailedPreconditionError(
                    f"PopulationBasedTraining cannot find {what} {attr!r} in trial {trial.index}'s result; "
                    "report it, or set PopulationBasedTraining(require_attrs=False)",
                    field=f"{FIELD}.{'time_attr' if what == 'time_attr' else 'metric'}",
                )
        if self.metric not in result or self.time_attr not in result:
            return CONTINUE
        time = result[self.time_attr]
        state = self.trial_state[trial]
        if time < self.burn_in_period:
            return CONTINUE
        if time - state.last_perturbation_time < self.perturbation_interval:
            return CONTINUE
        self._save_trial_state(state, time, result, trial)
        if not self.synch:
            state.last_perturbation_time = time
            lower, upper = self._quantiles()
            decision = CONTINUE
            if any(t.status in (PENDING, PAUSED) for t in controller.get_trials()):
                decision = PAUSE
            self._checkpoint_or_exploit(trial, controller, upper, lower)
            return NOOP if trial.status == PAUSED else decision
        if not any(
            self.trial_state[t].last_train_time < self.next_perturbation_sync and t is not trial
            for t in controller.get_live_trials()
        ):
            lower, upper = self._quantiles()
            middle = [t for t in controller.get_trials() if t not in lower and t not in upper]
            for t in upper + middle + lower:
                self.trial_state[t].last_perturbation_time = time
                self._checkpoint_or_exploit(t, controller, upper, lower)
            latest = max(self.trial_state[t].last_train_time for t in controller.get_trials())
            self.next_perturbation_sync = max(self.next_perturbation_sync + self.perturbation_interval, latest)
        return NOOP if trial.status == PAUSED else PAUSE

    def _save_trial_state(self, state: _TrialState, time: float, result: dict[str, Any], trial: SchedTrial) -> None:
        """Records the result a perturbation decision is made on (Ray's ``_save_trial_state``)."""
        state.last_score = self.sign * result[self.metric]
        state.last_train_time = time
        state.last_result = result

    def _new_config(self, trial: SchedTrial, source: SchedTrial) -> Any:
        """The config ``trial`` goes on with: ``source``'s, explored (a dict, or a reference the driver awaits)."""
        return self.explorer.explore(source.config)

    def _checkpoint_or_exploit(
        self, trial: SchedTrial, controller: Controller, upper: list[SchedTrial], lower: list[SchedTrial]
    ) -> None:
        state = self.trial_state[trial]
        if trial in upper:
            # Ray saves the trial now; a function trainable's save is its latest reported checkpoint.
            state.last_checkpoint = trial.checkpoint
            self.num_checkpoints += 1
        else:
            state.last_checkpoint = None
        if trial in lower:
            source = self.rng.choice(upper)
            if not self.trial_state[source].last_checkpoint:
                logger.info("PBT: no checkpoint for trial %s; trial %s is not exploited", source.index, trial.index)
                return
            self._exploit(controller, trial, source)

    def _exploit(self, controller: Controller, trial: SchedTrial, source: SchedTrial) -> None:
        new_config = self._new_config(trial, source)
        logger.info("PBT: trial %s clones trial %s (explored config %s)", trial.index, source.index, new_config)
        if isinstance(new_config, dict):
            trial.config = new_config
        source_state = self.trial_state[source]
        at = (source_state.last_result or {}).get("training_iteration")
        # Ray's saved checkpoint of the clone (at its last perturbation), not its newest.
        controller.exploit(trial, source, new_config, source_state.last_checkpoint, at)
        trial.status = PAUSED
        self.num_perturbations += 1
        state = self.trial_state[trial]
        state.last_perturbation_time = source_state.last_perturbation_time
        state.last_train_time = source_state.last_train_time

    def _quantiles(self) -> tuple[list[SchedTrial], list[SchedTrial]]:
        trials = [
            t
            for t, s in self.trial_state.items()
            if s.last_score is not None and not math.isnan(s.last_score) and not t.is_finished()
        ]
        trials.sort(key=lambda t: self.trial_state[t].last_score)  # type: ignore[arg-type,return-value]
        if len(trials) <= 1:
            return [], []
        n = int(math.ceil(len(trials) * self.quantile_fraction))
        if n > len(trials) / 2:
            n = int(math.floor(len(trials) / 2))
        return trials[:n], trials[len(trials) - n :]

    def choose_trial_to_run(self, controller: Controller) -> SchedTrial | None:
        candidates = [
            t
            for t in controller.get_trials()
            if t.status in (PENDING, PAUSED)
            and (not self.synch or self.trial_state[t].last_train_time < self.next_perturbation_sync)
        ]
        candidates.sort(key=lambda t: self.trial_state[t].last_train_time)
        return candidates[0] if candidates else None


class PB2(PopulationBasedTraining):
    """Ray's PB2: PBT whose explore picks the clone's new values by a Gaussian process bandit.

    The decisions on results (quantiles, exploit, checkpoints) are PBT's; the explore step calls
    Ray's own ``ray.tune.schedulers.pb2._explore`` on the same data Ray's PB2 records (each
    perturbation point's time, values within ``hyperparam_bounds`` and score), so the configs it
    picks are Ray's.
    """

    display_name = "PB2"

    def __init__(self, options: dict[str, Any], metric: str, mode: str, rng: random.Random) -> None:
        bounds = options.get("hyperparam_bounds") or {}
        if not isinstance(bounds, dict) or not bounds:
            raise InvalidArgumentError(
                "`hyperparam_bounds` must be specified to use PB2 scheduler.",
                field=f"{FIELD}.options.hyperparam_bounds",
            )
        self.bounds_flat = _flat_bounds(bounds)
        self.bounds = bounds
        seed = int(options.get("seed", 0) or 0)
        super().__init__(options, metric, mode, LocalExplorer({}, 0.0, (1.2, 0.8), rng, seed), rng)
        import pandas as pd

        self.pd = pd
        self.data = pd.DataFrame()
        self.current: Any = None
        self.last_exploration_time = 0.0

    def on_trial_add(self, controller: Controller, trial: SchedTrial) -> None:
        from ray.tune.schedulers.pb2 import _fill_config

        _fill_config(trial.config, self.bounds)  # values the config lacks: uniform within their bounds
        super().on_trial_add(controller, trial)

    def _save_trial_state(self, state: _TrialState, time: float, result: dict[str, Any], trial: SchedTrial) -> None:
        super()._save_trial_state(state, time, result, trial)
        flat = _flatten(trial.config)
        names = list(self.bounds_flat)
        row = [[str(trial.index), result[self.time_attr], *[flat[k] for k in names], state.last_score]]
        entry = self.pd.DataFrame(row, columns=["Trial", "Time", *names, "Reward"])
        self.data = self.pd.concat([self.data, entry]).reset_index(drop=True)
        self.data.Trial = self.data.Trial.astype("str")

    def _new_config(self, trial: SchedTrial, source: SchedTrial) -> Any:
        from ray.tune.schedulers.pb2 import _explore

        # As Ray's _get_new_config: a new time step forgets the points chosen in the last one.
        if self.data["Time"].max() > self.last_exploration_time:
            self.current = None
        new_flat, data = _explore(
            self.data, self.bounds_flat, self.current, str(source.index), str(trial.index), _flatten(source.config)
        )
        self.data = data.copy()
        new = np.array([new_flat[key] for key in self.bounds_flat]).reshape(1, -1)
        if self.data["Time"].max() > self.last_exploration_time:
            self.last_exploration_time = self.data["Time"].max()
            self.current = new.copy()
        else:
            self.current = np.concatenate((self.current, new), axis=0)
        return _unflatten(new_flat)


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        *parents, last = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def _flat_bounds(bounds: dict[str, Any], prefix: str = "") -> dict[str, tuple[float, float]]:
    """``hyperparam_bounds`` flattened, each a ``[low, high]`` pair (as Ray's checks)."""
    flat: dict[str, tuple[float, float]] = {}
    for key, value in bounds.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat_bounds(value, f"{name}/"))
            continue
        if (
            not isinstance(value, list | tuple)
            or len(value) != 2
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        ):
            raise InvalidArgumentError(
                "`hyperparam_bounds` values must either be a list or tuple of size 2, "
                f"but got {value} instead for the param '{name}'",
                field=f"{FIELD}.options.hyperparam_bounds",
            )
        low, high = value
        if low > high:
            raise InvalidArgumentError(
                "`hyperparam_bounds` values must be of the form [low, high] where low <= high, "
                f"but got {value} instead for param '{name}'.",
                field=f"{FIELD}.options.hyperparam_bounds",
            )
        flat[name] = (low, high)
    return flat


class PopulationBasedTrainingReplay(ControllerScheduler):
    """Replays one trial's schedule of configs from a PBT policy (Ray's ``PopulationBasedTrainingReplay``).

    The SDK reads the policy file and sends its initial config and its change points.
    """

    display_name = "PopulationBasedTrainingReplay"

    def __init__(self, options: dict[str, Any]) -> None:
        self.metric, self.mode = "", ""
        self.initial_config = options.get("initial_config")
        self.policy = [(float(step), config) for step, config in options.get("policy") or []]
        self.trial: SchedTrial | None = None
        self.step = 0.0
        self.num_perturbations = 0
        self._next = 0

    def on_trial_add(self, controller: Controller, trial: SchedTrial) -> None:
        if self.trial is not None:
            raise InvalidArgumentError(
                "More than one trial added to PBT replay run. This means the same schedule will be trained "
                "multiple times. Do you want to set `num_samples=1`?",
                field="tune_config.num_samples",
            )
        self.trial = trial
        if not trial.config and not self.policy and not self.initial_config:
            raise InvalidArgumentError(
                "No replay policy found and trial initialized without a valid config", field=f"{FIELD}.options"
            )
        if self.policy or not trial.config:
            trial.config = copy.deepcopy(self.initial_config or {})

    def on_trial_result(self, controller: Controller, trial: SchedTrial, result: dict[str, Any]) -> str:
        if "training_iteration" not in result or self._next >= len(self.policy):
            return CONTINUE
        self.step = result["training_iteration"]
        change_at, new_config = self.policy[self._next]
        if self.step < change_at:
            return CONTINUE
        trial.config = copy.deepcopy(new_config)
        controller.exploit(trial, trial, trial.config, trial.checkpoint, result["training_iteration"])
        trial.status = PAUSED
        self.num_perturbations += 1
        self._next += 1
        return NOOP


def make_pbt(spec: tune_pb2.TrialScheduler, options: dict[str, Any], metric: str, mode: str) -> PopulationBasedTraining:
    """The request's PBT: data mutations explored here, code in an actor."""
    seed = int(options.get("seed", 0) or 0)
    resample = _real(options.get("resample_probability", 0.25), "resample_probability")
    factors = options.get("perturbation_factors", [1.2, 0.8])
    if not isinstance(factors, list) or not factors or not all(isinstance(f, int | float) for f in factors):
        raise InvalidArgumentError(
            "perturbation_factors must be a list of numbers", field=f"{FIELD}.options.perturbation_factors"
        )
    mutations = decode_mutations(options.get("hyperparam_mutations") or {})
    if not mutations and not spec.pickled_code:
        raise InvalidArgumentError(
            "You must specify at least one of `hyperparam_mutations` or `custom_explore_fn` to use PBT.",
            field=f"{FIELD}.options.hyperparam_mutations",
        )
    rng = random.Random(seed)
    explorer: LocalExplorer | RemoteExplorer
    if spec.pickled_code:
        explorer = RemoteExplorer(spec.pickled_code, resample, tuple(factors), seed)
    else:
        explorer = LocalExplorer(mutations, resample, tuple(factors), rng, seed)
    return PopulationBasedTraining(options, metric, mode, explorer, rng)


def make_pb2(options: dict[str, Any], metric: str, mode: str) -> PB2:
    """The request's PB2 (its explore runs here: bounds are data)."""
    return PB2(options, metric, mode, random.Random(int(options.get("seed", 0) or 0)))
