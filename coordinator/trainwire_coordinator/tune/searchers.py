"""Search algorithms run by the coordinator: random and grid search (BasicVariantGenerator) and Optuna's TPE."""

from __future__ import annotations

import abc
import inspect
import json
import logging
import math
from typing import Any

import numpy as np

from trainwire_coordinator.tune.space import Param, SearchSpace, check_path, flatten
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, TrainwireError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import tune_pb2

logger = logging.getLogger(__name__)

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

    # Whether suggestions come from an actor (RemoteSearcher): a request's checks then suggest nothing.
    remote = False

    @abc.abstractmethod
    def suggest(self, index: int) -> Values | None:
        """The values of trial ``index`` (``sample_from`` ones excluded), or None when the search is done."""

    async def asuggest(self, index: int) -> Values | None:
        """``suggest``, for the search's driver (a RemoteSearcher awaits its actor)."""
        return self.suggest(index)

    def on_complete(  # noqa: B027 - optional hook
        self,
        index: int,
        values: Values,
        value: float | None,
        result: dict[str, Any] | None = None,
        error: bool = False,
    ) -> None:
        """Trial ``index`` ended with ``value`` of the search's metric (None: it failed or never reported it).

        Args:
            index: The trial.
            values: Its parameters, by path.
            value: The search metric's value in its last result.
            result: Its last result (multi-objective searchers read their metrics there).
            error: Whether it failed.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases what the searcher holds (an actor)."""

    def known(self, index: int, values: Values) -> None:  # noqa: B027 - optional hook
        """Trial ``index`` was suggested ``values`` by a coordinator before this one (a search taken over)."""


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


class _SuggestCaptor:
    """An optuna Trial whose ``suggest_*`` calls are recorded by name, as Ray's ``_OptunaTrialSuggestCaptor``."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.captured: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        item = getattr(self.trial, name)
        if not (name.startswith("suggest_") and callable(item)):
            return item
        signature = inspect.signature(item)

        def capture(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            if "name" not in bound.arguments:
                raise ValueError("missing required argument: name")
            value = item(*args, **kwargs)
            self.captured[bound.arguments["name"]] = value
            return value

        return capture


def _objective_directions(alg: tune_pb2.SearchAlgorithm, mode: str) -> dict[str, Any]:
    """create_study's direction (one metric) or directions (Ray's multi-objective metric and mode lists)."""
    if alg.metrics:
        return {"directions": ["maximize" if m == "max" else "minimize" for m in alg.modes]}
    return {"direction": "maximize" if mode == "max" else "minimize"}


class OptunaSearcher(Searcher):
    """Optuna's TPE over the space (Ray's OptunaSearch), with the search's metric and mode.

    With ``function`` (Ray's define-by-run space: a function of an optuna Trial), the function
    asks for each trial's values; the searcher then runs in an actor (``RemoteSearcher``), never in
    the coordinator's process. With ``alg.metrics`` the study optimizes every metric at once
    (Ray's multi-objective ``metric=[...]``, ``mode=[...]``).

    A coordinator that takes a search over rebuilds the study from the trials that ended.

    Args:
        space: The request's searched parameters (none when ``function`` is given).
        num_samples: TuneConfig.num_samples.
        alg: The request's search algorithm.
        mode: The search's mode ("min" or "max"; multi-objective: ``alg.modes``).
        function: A define-by-run function, unpickled.
        prefix: The keys a define-by-run parameter's name is under (a function trainable's config).
    """

    display_name = "OptunaSearch"

    def __init__(
        self,
        space: SearchSpace,
        num_samples: int,
        alg: tune_pb2.SearchAlgorithm,
        mode: str,
        function: Any = None,
        prefix: tuple[str, ...] = (),
    ) -> None:
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
        self.space, self.function, self.prefix = space, function, prefix
        self.metrics = list(alg.metrics)
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
        # As Ray's _setup_study: TPE (single- and multi-objective), no pruner.
        self.study = optuna.create_study(
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.NopPruner(),
            study_name="optuna",
            **_objective_directions(alg, mode),
        )
        if function is None:
            for point in _points(alg, space):
                self.study.enqueue_trial({"/".join(path): self._encode(path, v) for path, v in point.items()})
        else:  # a define-by-run space's points are keyed by its parameters' names
            for point in alg.points_to_evaluate:
                values = flatten(struct_to_dict(point))
                self.study.enqueue_trial({"/".join(path[len(prefix) :]): v for path, v in values.items()})
        self.pending: dict[int, Any] = {}
        # Define-by-run: the distributions its trials asked for (a taken-over search's ended trials
        # are told once they are known, at the next suggestion).
        self.seen: dict[str, Any] = {}
        self.untold: list[tuple[Values, Any, bool]] = []

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
        if self.function is None:
            trial = self.study.ask(self.distributions)
            self.pending[index] = trial
            return {p.path: self._decode(p, trial.params[p.name]) for p in self.space.params}
        trial = self.study.ask()
        captor = _SuggestCaptor(trial)
        returned = self.function(captor)
        if returned is not None and not isinstance(returned, dict):  # Ray's TypeErrors, word for word
            raise TypeError(
                "The return value of the define-by-run function passed in the `space` argument should be "
                f"either None or a `dict` with `str` keys. Got {type(returned)}."
            )
        if returned is not None and not all(isinstance(k, str) for k in returned):
            raise TypeError(
                "At least one of the keys in the dict returned by the define-by-run function passed in the "
                "`space` argument was not a `str`."
            )
        self.pending[index] = trial
        self.seen.update(trial.distributions)
        untold, self.untold = self.untold, []
        for values, objective, error in untold:
            self._add_finished(values, objective, error)
        params = {**captor.captured, **(returned or {})}
        return {(*self.prefix, *name.split("/")): value for name, value in params.items()}

    def _objective(self, value: float | None, result: dict[str, Any] | None) -> Any:
        """The value(s) Optuna is told: the metric's, or each metric's (None: not all finite)."""
        if not self.metrics:
            return value if value is not None and math.isfinite(value) else None
        values = [(result or {}).get(m) for m in self.metrics]
        if all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            return [float(v) for v in values]
        return None

    def on_complete(
        self,
        index: int,
        values: Values,
        value: float | None,
        result: dict[str, Any] | None = None,
        error: bool = False,
    ) -> None:
        objective = self._objective(value, result)
        trial = self.pending.pop(index, None)
        if trial is not None:
            self.study.tell(trial, objective, state=self._state(objective, error))
            return
        # Suggested by a coordinator before this one: told as a finished trial of the same values.
        if self.function is not None and not self.seen:
            self.untold.append((values, objective, error))
            return
        self._add_finished(values, objective, error)

    def _state(self, objective: Any, error: bool) -> Any:
        # As Ray's on_trial_complete: no value is a failure when the trial errored, else pruned.
        state = self.optuna.trial.TrialState
        return state.COMPLETE if objective is not None else state.FAIL if error else state.PRUNED

    def _add_finished(self, values: Values, objective: Any, error: bool) -> None:
        try:
            if self.function is None:
                params = {"/".join(path): self._encode(path, v) for path, v in values.items()}
                distributions = self.distributions
            else:
                named = {"/".join(path[len(self.prefix) :]): v for path, v in values.items()}
                params = {k: v for k, v in named.items() if k in self.seen}
                distributions = {k: self.seen[k] for k in params}
            many = isinstance(objective, list)
            self.study.add_trial(
                self.optuna.trial.create_trial(
                    params=params,
                    distributions=distributions,
                    value=None if many else objective,
                    values=objective if many else None,
                    state=self._state(objective, error),
                )
            )
        except (ValueError, KeyError, StopIteration):  # values outside today's distributions: nothing to learn
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


SPACE_FIELD = f"{SEARCHER_FIELD}.pickled_space"


class SearcherHost:
    """Holds a define-by-run OptunaSearch on the cluster (a Ray actor of no CPU): the user's function runs here.

    It answers JSON, never raises: the coordinator unpickles nothing a user's code made.

    Args:
        request: A TuneRequest without its trainer's content (its kind is kept), serialized.
        mode: The search's mode.
    """

    def __init__(self, request: bytes, mode: str) -> None:
        self.error = ""
        self.searcher: OptunaSearcher | None = None
        try:
            import cloudpickle

            tune_request = tune_pb2.TuneRequest.FromString(request)
            alg = tune_request.tune_config.search_alg
            prefix = ("train_loop_config",) if tune_request.function_trainable else ()
            function = cloudpickle.loads(alg.pickled_space)
            space = SearchSpace(tune_request)
            self.searcher = OptunaSearcher(space, tune_request.tune_config.num_samples, alg, mode, function, prefix)
        except Exception as exc:  # told to the coordinator at its first suggestion
            self.error = f"could not be set up: {type(exc).__name__}: {exc}"

    def suggest(self, index: int) -> str:
        """``{"values": [[path, value], ...]}``, ``{"done": true}`` or ``{"error": message}``, as JSON."""
        if self.error or self.searcher is None:
            return json.dumps({"error": self.error})
        try:
            values = self.searcher.suggest(index)
        except Exception as exc:
            return json.dumps({"error": f"raised {type(exc).__name__}: {exc}"})
        if values is None:
            return json.dumps({"done": True})
        try:
            return json.dumps({"values": [[list(path), value] for path, value in values.items()]}, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return json.dumps({"error": f"suggested a value that is not JSON: {exc}"})

    def on_complete(self, index: int, values: str, value: float | None, result: str, error: bool) -> None:
        """Tells the study how trial ``index`` ended; what this raises is told at the next suggestion."""
        if self.searcher is None:
            return
        try:
            flat = {tuple(path): v for path, v in json.loads(values)}
            self.searcher.on_complete(index, flat, value, json.loads(result), error)
        except Exception as exc:
            self.error = f"raised {type(exc).__name__} when told of trial {index}: {exc}"


class RemoteSearcher(Searcher):
    """A searcher whose study runs in an actor (``SearcherHost``): suggestions are awaited.

    Args:
        request: The Tune request (its trainer's content stays here).
        mode: The search's mode.
        total: Trials in all (None: until the time budget runs out).
    """

    display_name = "OptunaSearch"
    remote = True

    def __init__(self, request: tune_pb2.TuneRequest, mode: str, total: int | None) -> None:
        light = tune_pb2.TuneRequest()
        light.CopyFrom(request)
        kind = request.trainer.WhichOneof("trainer")
        light.ClearField("trainer")
        if kind:
            getattr(light.trainer, kind).SetInParent()  # the space's checks read the trainer's kind only
        self.request, self.mode, self.kind = light.SerializeToString(), mode, kind
        self.total, self.max_concurrent = total, request.tune_config.search_alg.max_concurrent
        self._actor: Any = None

    @property
    def actor(self) -> Any:
        # Made on first use: a request's checks build a plan too, and suggest nothing from it.
        if self._actor is None:
            import ray

            host = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(SearcherHost)
            self._actor = host.remote(self.request, self.mode)
        return self._actor

    def suggest(self, index: int) -> Values | None:
        raise NotImplementedError("a RemoteSearcher's suggestions are awaited: asuggest")

    async def asuggest(self, index: int) -> Values | None:
        import ray

        if self.total is not None and index >= self.total:
            return None
        try:
            answer = json.loads(await self.actor.suggest.remote(index))
        except ray.exceptions.RayActorError as exc:  # its process died
            raise FailedPreconditionError(
                f"OptunaSearch's define-by-run space could not run: {exc}", field=SPACE_FIELD
            ) from None
        if "error" in answer:
            raise FailedPreconditionError(f"OptunaSearch's define-by-run space {answer['error']}", field=SPACE_FIELD)
        if answer.get("done"):
            return None
        values = {tuple(path): value for path, value in answer["values"]}
        for path in values:
            try:
                check_path(path, SPACE_FIELD, self.kind == "data_parallel", self.kind == "gbdt")
            except InvalidArgumentError as exc:
                name = "/".join(path)
                raise FailedPreconditionError(
                    f"OptunaSearch's define-by-run space suggested {name!r}: {exc.message}", field=SPACE_FIELD
                ) from None
        return values

    def on_complete(
        self,
        index: int,
        values: Values,
        value: float | None,
        result: dict[str, Any] | None = None,
        error: bool = False,
    ) -> None:
        # Submitted in order (one caller, one actor); not awaited: a failure shows at the next suggestion.
        flat = json.dumps([[list(path), v] for path, v in values.items()])
        self.actor.on_complete.remote(index, flat, value, json.dumps(result or {}), error)

    def close(self) -> None:
        if self._actor is None:
            return
        import ray

        try:
            ray.kill(self._actor, no_restart=True)
        except Exception:  # already gone (Ray shut down with the coordinator)
            logger.debug("the searcher's actor was already gone", exc_info=True)


# Ray's tune.search.repeater.TRIAL_INDEX: a repeated trial's index in its group.
TRIAL_INDEX = "__trial_index__"


class RepeatSearcher(Searcher):
    """Ray's Repeater: each configuration ``inner`` suggests runs ``repeat`` times.

    Trial ``i`` is trial ``i % repeat`` of group ``i // repeat``; the group's first trial asks
    ``inner`` for the configuration, as suggestion ``i // repeat``. Once every trial of a group has
    ended, ``inner`` is told the mean of their metric values (NaN and missing ones left out, as
    Ray's ``np.nanmean``), as that suggestion's result. A last group cut short by ``total`` is never
    told, as in Ray.

    Args:
        inner: The search algorithm whose suggestions are repeated.
        repeat: Trials per configuration.
        index_path: Where ``__trial_index__`` goes in a trial's values (None: nowhere).
    """

    def __init__(self, inner: Searcher, repeat: int, index_path: tuple[str, ...] | None) -> None:
        self.inner, self.repeat, self.index_path = inner, repeat, index_path
        self.total, self.max_concurrent = inner.total, inner.max_concurrent
        self.display_name, self.remote = inner.display_name, inner.remote
        self.configs: dict[int, Values] = {}
        self.ended: dict[int, dict[int, tuple[float, dict[str, Any] | None, bool]]] = {}
        self.told: set[int] = set()

    def _values(self, index: int, config: Values) -> Values:
        values = dict(config)
        if self.index_path is not None:
            values[self.index_path] = index % self.repeat
        return values

    def suggest(self, index: int) -> Values | None:
        if self.total is not None and index >= self.total:
            return None
        group = index // self.repeat
        if group not in self.configs:
            config = self.inner.suggest(group)
            if config is None:
                return None
            self.configs[group] = config
        return self._values(index, self.configs[group])

    async def asuggest(self, index: int) -> Values | None:
        if self.total is not None and index >= self.total:
            return None
        group = index // self.repeat
        if group not in self.configs:
            config = await self.inner.asuggest(group)
            if config is None:
                return None
            self.configs[group] = config
        return self._values(index, self.configs[group])

    def known(self, index: int, values: Values) -> None:
        # A group begun by the coordinator before this one goes on with its configuration.
        self.configs.setdefault(index // self.repeat, {k: v for k, v in values.items() if k != self.index_path})

    def on_complete(
        self,
        index: int,
        values: Values,
        value: float | None,
        result: dict[str, Any] | None = None,
        error: bool = False,
    ) -> None:
        group = index // self.repeat
        ended = self.ended.setdefault(group, {})
        ended[index] = (math.nan if value is None else value, result, error)
        if group in self.told or len(ended) < self.repeat:
            return
        self.told.add(group)
        scores = [score for score, _, _ in ended.values() if not math.isnan(score)]
        mean = sum(scores) / len(scores) if scores else None
        failed = [e for _, _, e in ended.values()]
        config = {k: v for k, v in values.items() if k != self.index_path}
        self.inner.on_complete(
            group,
            config,
            mean,
            result=_mean_result(r for _, r, _ in ended.values()),
            error=(mean is None and any(failed)),
        )

    def close(self) -> None:
        self.inner.close()


def _mean_result(results: Any) -> dict[str, Any] | None:
    """The mean of each number every result holds (a multi-objective searcher reads its metrics there)."""
    given = [r for r in results if r is not None]
    if not given:
        return None
    out: dict[str, Any] = {}
    for key in set.intersection(*(set(r) for r in given)):
        numbers = [r[key] for r in given if isinstance(r[key], int | float) and not isinstance(r[key], bool)]
        finite = [float(n) for n in numbers if math.isfinite(n)]
        if len(numbers) == len(given) and finite:
            out[key] = sum(finite) / len(finite)
    return out


def _check_objectives(alg: tune_pb2.SearchAlgorithm) -> None:
    """Multi-objective metric and mode lists, as Ray's OptunaSearch takes them."""
    if not alg.metrics and not alg.modes:
        return
    field = f"{SEARCHER_FIELD}.metrics"
    if (alg.name or "variant_generator") != "optuna":
        raise InvalidArgumentError("only OptunaSearch optimizes several metrics", field=field)
    if alg.metric or alg.mode:
        raise InvalidArgumentError(
            "a multi-objective search gives its metrics and modes as lists only", field=f"{SEARCHER_FIELD}.metric"
        )
    if not alg.metrics:
        # Ray's _setup_study: a mode list needs its metrics.
        raise InvalidArgumentError(
            "If ``mode`` is a list (multi-objective optimization case), ``metric`` must be defined.", field=field
        )
    if len(alg.metrics) != len(alg.modes):
        raise InvalidArgumentError(
            f"{len(alg.metrics)} metrics but {len(alg.modes)} modes: give one mode per metric",
            field=f"{SEARCHER_FIELD}.modes",
        )
    for i, (metric, mode) in enumerate(zip(alg.metrics, alg.modes, strict=True)):
        if not metric:
            raise InvalidArgumentError("a metric name is empty", field=f"{field}[{i}]")
        if mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"mode must be 'min' or 'max', got {mode!r}", field=f"{SEARCHER_FIELD}.modes[{i}]"
            )
    if len(set(alg.metrics)) != len(alg.metrics):
        raise InvalidArgumentError("a metric is given twice", field=field)


def make_searcher(request: tune_pb2.TuneRequest, space: SearchSpace, mode: str) -> Searcher:
    """The request's search algorithm (default: BasicVariantGenerator), repeated when it asks (Repeater)."""
    alg = request.tune_config.search_alg
    if alg.repeat < 0:
        raise InvalidArgumentError("repeat must be >= 1", field=f"{SEARCHER_FIELD}.repeat")
    searcher = _make_searcher(request, space, mode)
    if alg.repeat <= 1:
        return searcher
    total = planned_trials(request.tune_config.num_samples, space)
    if total is not None and total % alg.repeat:
        logger.warning(  # Ray's warning: the trials of a last, partial group are not told to the searcher
            "`num_samples` is now expected to be the total number of trials, including the repeat trials. "
            "Any leftover trials (num_samples mod repeat) will be ignored."
        )
    loop = request.trainer.WhichOneof("trainer") == "data_parallel"
    index_path = None
    if not alg.repeat_without_index:
        # A loop reads it from its config, as a Ray function trainable does; other trainers' configs record it.
        index_path = ("train_loop_config", TRIAL_INDEX) if loop else (TRIAL_INDEX,)
    return RepeatSearcher(searcher, alg.repeat, index_path)


def _make_searcher(request: tune_pb2.TuneRequest, space: SearchSpace, mode: str) -> Searcher:
    alg = request.tune_config.search_alg
    if alg.max_concurrent < 0:
        raise InvalidArgumentError("max_concurrent must be >= 0", field="tune_config.search_alg.max_concurrent")
    name = alg.name or "variant_generator"
    _check_objectives(alg)
    if alg.pickled_space and name != "optuna":
        raise InvalidArgumentError("only OptunaSearch takes a define-by-run space", field=SPACE_FIELD)
    if name == "variant_generator":
        return VariantGenerator(space, request.tune_config.num_samples, alg)
    if name == "optuna" and alg.pickled_space:
        if space.params:
            # As Ray's tune.run when the searcher holds its own space.
            raise InvalidArgumentError(
                "You passed a `param_space` parameter to `tune.Tuner()` with unresolved parameters, but the "
                "search algorithm was already instantiated with a search space. Make sure that `config` does not "
                "contain any more parameter definitions - include them in the search algorithm's search space "
                "if necessary.",
                field=f"{space.params[0].field}",
            )
        if alg.max_concurrent < 0:
            raise InvalidArgumentError("max_concurrent must be >= 0", field=f"{SEARCHER_FIELD}.max_concurrent")
        return RemoteSearcher(request, mode, planned_trials(request.tune_config.num_samples, space))
    if name == "optuna":
        try:
            return OptunaSearcher(space, request.tune_config.num_samples, alg, mode)
        except Exception as exc:  # Optuna refusing the space or its arguments: the caller's input
            raise library_error("OptunaSearch", exc, SEARCHER_FIELD, started=False) from exc
    raise InvalidArgumentError(
        f"unknown search algorithm {name!r}; known: variant_generator, optuna", field="tune_config.search_alg.name"
    )
