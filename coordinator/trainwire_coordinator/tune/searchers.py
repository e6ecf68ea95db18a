"""Search algorithms run by the coordinator: random and grid search (BasicVariantGenerator) and Optuna's TPE."""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from trainwire_coordinator.tune.space import Param, SearchSpace, flatten
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, TrainwireError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import tune_pb2

Values = dict[tuple[str, ...], Any]

# Optuna's samplers take a seed in [0, 2**32): the coordinator draws one in that range.
MAX_SEED = 2**32 - 1
SEARCHER_FIELD = "tune_config.search_alg"


def library_error(owner: str, exc: Exception, field: str, *, started: bool) -> TrainwireError:
    """An exception raised inside a search algorithm or scheduler, as the error the caller sees.

    A library's ValueError is a bug of neither the caller nor the coordinator: it is the request
    (INVALID_ARGUMENT, before the search starts) or the search's state (FAILED_PRECONDITION, once
    trials ran) that the library refused. Either way the owner and the field are named.
    """
    if isinstance(exc, TrainwireError):
        return exc
    message = f"{owner} raised {type(exc).__name__}: {exc}"
    if started:
        return FailedPreconditionError(message, field=field)
    return InvalidArgumentError(message, field=field)


class Searcher(abc.ABC):
    """Suggests each trial's values and learns from how trials ended.

    Attributes:
        total: Trials in all; None: until the search's time budget runs out.
        max_concurrent: The most of its trials that may run at once (ConcurrencyLimiter; 0: no limit).
    """

    total: int | None
    max_concurrent: int = 0
    # Ray's class name, for messages that name the algorithm.
    display_name = "Searcher"

    @abc.abstractmethod
    def suggest(self, index: int) -> Values | None:
        """The values of trial ``index`` (``sample_from`` ones excluded), or None when the search is done."""

    def on_complete(self, index: int, values: Values, value: float | None) -> None:  # noqa: B027 - optional hook
        """Trial ``index`` ended with ``value`` of the search's metric (None: it failed or never reported it)."""


def planned_trials(num_samples: int, space: SearchSpace) -> int | None:
    """Ray's count: each grid point ``num_samples`` times; -1 samples: no end but the time budget."""
    if num_samples < 0:
        return None
    return max(num_samples, 1) * space.num_grid_points


def _points(alg: tune_pb2.SearchAlgorithm, space: SearchSpace) -> list[Values]:
    """points_to_evaluate, each as values of the searched parameters it names."""
    known = {p.path for p in space.params}
    points = []
    for i, point in enumerate(alg.points_to_evaluate):
        values = flatten(struct_to_dict(point))
        unknown = sorted("/".join(path) for path in values if path not in known)
        if unknown:
            raise InvalidArgumentError(
                f"points_to_evaluate[{i}] sets {', '.join(unknown)}, which are not searched",
                field=f"tune_config.search_alg.points_to_evaluate[{i}]",
            )
        points.append(values)
    return points


class VariantGenerator(Searcher):
    """Random and grid search, as Ray's BasicVariantGenerator.

    Trial ``i`` takes grid point ``i mod G`` and draws its random values from a generator seeded
    with ``(seed, i)``: the same seed gives the same trials, also after a coordinator restart.
    points_to_evaluate come first and count toward the trials.
    """

    def __init__(self, space: SearchSpace, num_samples: int, alg: tune_pb2.SearchAlgorithm) -> None:
        self.space, self.seed = space, int(alg.seed)
        self.total = planned_trials(num_samples, space)
        self.max_concurrent = alg.max_concurrent
        self.points = _points(alg, space)

    def suggest(self, index: int) -> Values | None:
        if self.total is not None and index >= self.total:
            return None
        rng = np.random.default_rng([self.seed & (2**63 - 1), index])
        values = self.space.grid_point(index % self.space.num_grid_points)
        values.update({p.path: p.sample(rng) for p in self.space.random})
        if index < len(self.points):
            values.update(self.points[index])
        return values


class OptunaSearcher(Searcher):
    """Optuna's TPE over the space (Ray's OptunaSearch), with the search's metric and mode.

    A coordinator that takes a search over rebuilds the study from the trials that ended.
    """

    display_name = "OptunaSearch"

    def __init__(self, space: SearchSpace, num_samples: int, alg: tune_pb2.SearchAlgorithm, mode: str) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        for param in space.params:
            if param.sampler in ("grid_search", "sample_from", "randn", "qrandn"):
                raise InvalidArgumentError(
                    f"OptunaSearch cannot search {param.name} with {param.sampler}; use choice, uniform, "
                    "loguniform, randint and their q forms, or the default search",
                    field=f"{param.field}.domain.sampler",
                )
        self.space = space
        self.total = planned_trials(num_samples, space)
        self.max_concurrent = alg.max_concurrent
        self.distributions = {p.name: _distribution(optuna, p) for p in space.params}
        seed = int(alg.seed) if alg.HasField("seed") else None
        if seed is not None and not 0 <= seed <= MAX_SEED:
            # Refused, not reduced: a seed that silently meant another one would not repeat Optuna's search.
            raise InvalidArgumentError(
                f"OptunaSearch's seed must be between 0 and 2**32 - 1 (Optuna's range), got {seed}",
                field=f"{SEARCHER_FIELD}.seed",
            )
        self.study = optuna.create_study(
            direction="maximize" if mode == "max" else "minimize",
            sampler=optuna.samplers.TPESampler(seed=seed),
        )
        for point in _points(alg, space):
            self.study.enqueue_trial({"/".join(path): self._encode(path, v) for path, v in point.items()})
        self.pending: dict[int, Any] = {}

    def _param(self, path: tuple[str, ...]) -> Param:
        return next(p for p in self.space.params if p.path == path)

    def _encode(self, path: tuple[str, ...], value: Any) -> Any:
        param = self._param(path)
        return param.values().index(value) if param.sampler == "choice" else value

    def _decode(self, param: Param, value: Any) -> Any:
        if param.sampler == "choice":
            return param.values()[int(value)]
        if param.sampler in ("qloguniform", "qlograndint"):
            q = param.domain.q or 1
            rounded = round(value / q) * q
            return int(rounded) if param.sampler == "qlograndint" else float(rounded)
        return value

    def suggest(self, index: int) -> Values | None:
        if self.total is not None and index >= self.total:
            return None
        trial = self.study.ask(self.distributions)
        self.pending[index] = trial
        return {p.path: self._decode(p, trial.params[p.name]) for p in self.space.params}

    def on_complete(self, index: int, values: Values, value: float | None) -> None:
        state = self.optuna.trial.TrialState
        ok = value is not None and math.isfinite(value)
        trial = self.pending.pop(index, None)
        if trial is not None:
            self.study.tell(trial, value if ok else None, state=state.COMPLETE if ok else state.FAIL)
            return
        # Suggested by a coordinator before this one: told as a finished trial of the same values.
        try:
            params = {"/".join(path): self._encode(path, v) for path, v in values.items()}
            self.study.add_trial(
                self.optuna.trial.create_trial(
                    params=params,
                    distributions=self.distributions,
                    value=value if ok else None,
                    state=state.COMPLETE if ok else state.FAIL,
                )
            )
        except ValueError:  # values outside today's distributions: nothing to learn from
            pass


def _distribution(optuna: Any, p: Param) -> Any:
    d, dist = p.domain, optuna.distributions
    if p.sampler == "choice":
        return dist.CategoricalDistribution(list(range(len(p.values()))))
    if p.sampler in ("uniform", "quniform"):
        return dist.FloatDistribution(d.lower, d.upper, step=d.q or None)
    if p.sampler in ("loguniform", "qloguniform"):  # Optuna has no log scale with a step: rounded after
        return dist.FloatDistribution(d.lower, d.upper, log=True)
    if p.sampler == "randint":  # Ray's randint leaves out its upper bound
        return dist.IntDistribution(int(d.lower), int(d.upper) - 1)
    if p.sampler == "qrandint":
        return dist.IntDistribution(int(d.lower), int(d.upper), step=int(d.q or 1))
    return dist.IntDistribution(int(d.lower), int(d.upper) - (p.sampler == "lograndint"), log=True)


def make_searcher(request: tune_pb2.TuneRequest, space: SearchSpace, mode: str) -> Searcher:
    """The request's search algorithm (default: BasicVariantGenerator)."""
    alg = request.tune_config.search_alg
    if alg.max_concurrent < 0:
        raise InvalidArgumentError("max_concurrent must be >= 0", field="tune_config.search_alg.max_concurrent")
    name = alg.name or "variant_generator"
    if name == "variant_generator":
        return VariantGenerator(space, request.tune_config.num_samples, alg)
    if name == "optuna":
        try:
            return OptunaSearcher(space, request.tune_config.num_samples, alg, mode)
        except Exception as exc:  # Optuna refusing the space or its arguments: the caller's input
            raise library_error("OptunaSearch", exc, SEARCHER_FIELD, started=False) from exc
    raise InvalidArgumentError(
        f"unknown search algorithm {name!r}; known: variant_generator, optuna", field="tune_config.search_alg.name"
    )
