"""Optuna's TPE search, as ``ray.tune.search.optuna``: it runs in the coordinator (optuna is not needed here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwire.tune.search.sample import Domain
from trainwire.tune.search.searcher import Searcher, check_mode, check_seed
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2

__all__ = ["OptunaSearch"]


class OptunaSearch(Searcher):
    """Optuna's TPE sampler over the search space, as ``ray.tune.search.optuna.OptunaSearch``.

    Args:
        space: None (the Tuner's param_space is searched, as in Ray), a dict of trainwire
            samplers keyed like param_space, which the Tuner adds to its param_space, or a
            define-by-run function of an ``optuna.Trial`` that calls its ``suggest_*`` methods and
            may return a dict of constants (Ray's define-by-run space: it travels pickled, needs the
            submit-code scope, and runs beside the study in an actor of the search; a ``/`` in a
            parameter's name nests it, as in Ray).
        metric: The metric to optimize (default: TuneConfig's), or a list of metrics for
            multi-objective optimization (then ``mode`` is a list of as many modes).
        mode: "min" or "max" (default: TuneConfig's), or a list, one per metric.
        points_to_evaluate: Configurations to try first, keyed like param_space.
        sampler: Not supported: the search runs in the coordinator with TPE; give ``seed``.
        seed: Makes the search repeatable; 0 to 2**32 - 1, as Optuna takes (None: the coordinator
            draws one and records it, so a coordinator that takes the search over repeats it).
        evaluated_rewards: Not supported (results of ``points_to_evaluate`` already known).
        study_name, storage: Not supported (the coordinator keeps the study).
    """

    name = "optuna"

    def __init__(
        self,
        space: dict[str, Any] | Callable[[Any], dict[str, Any] | None] | None = None,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list[Any] | None = None,
    ) -> None:
        many = isinstance(metric, list | tuple) or isinstance(mode, list | tuple)
        super().__init__(None if many else metric, None if many else mode)
        self.metrics: list[str] = []
        self.modes: list[str] = []
        if many:
            self._objectives(metric, mode)
        if sampler is not None:
            raise InvalidArgumentError(
                "OptunaSearch runs in the coordinator, which supports only its TPE sampler: "
                "drop sampler= and give seed= for repeatable searches",
                field="search_alg.sampler",
            )
        if study_name is not None or storage is not None:
            raise InvalidArgumentError(
                "OptunaSearch's study lives in the coordinator: study_name and storage are not supported",
                field="search_alg.storage" if storage is not None else "search_alg.study_name",
            )
        if evaluated_rewards:
            raise InvalidArgumentError(
                "evaluated_rewards is not supported: leave it out and the points are evaluated as trials",
                field="search_alg.evaluated_rewards",
            )
        self.function = space if callable(space) and not isinstance(space, dict) else None
        if self.function is not None:
            space = None
        elif space is not None and not isinstance(space, dict):
            raise InvalidArgumentError(
                "OptunaSearch(space=...) takes a dict of trainwire.tune samplers, a define-by-run function of an "
                "optuna Trial, or None for the param_space; optuna distributions are not supported",
                field="search_alg.space",
            )
        for key, value in (space or {}).items():
            if not _only_samplers(value):
                raise InvalidArgumentError(
                    f"OptunaSearch space[{key!r}] must hold trainwire.tune samplers (e.g. tune.uniform), "
                    f"not optuna distributions or constants",
                    field=f"search_alg.space.{key}",
                )
        check_seed(seed, "search_alg.seed")
        if seed is not None and not 0 <= seed <= 2**32 - 1:
            # Optuna's samplers take 32-bit seeds (as in Ray, where TPESampler raises ValueError).
            raise InvalidArgumentError(
                f"search_alg.seed must be between 0 and 2**32 - 1 (Optuna's range), got {seed}",
                field="search_alg.seed",
            )
        self.space = space
        self.points_to_evaluate = points_to_evaluate
        self.seed = seed

    def _objectives(self, metric: Any, mode: Any) -> None:
        """Multi-objective metric and mode lists, checked as Ray's study set-up checks them."""
        if metric is None:
            raise InvalidArgumentError(
                "If ``mode`` is a list (multi-objective optimization case), ``metric`` must be defined.",
                field="search_alg.metric",
            )
        metrics = [metric] if isinstance(metric, str) else list(metric)
        modes = [mode] if isinstance(mode, str) else list(mode or [])
        if not all(isinstance(m, str) and m for m in metrics):
            raise InvalidArgumentError("search_alg.metric must be a list of metric names", field="search_alg.metric")
        if len(modes) != len(metrics):
            raise InvalidArgumentError(
                f"search_alg.mode needs one mode per metric: {len(metrics)} metrics, {len(modes)} modes",
                field="search_alg.mode",
            )
        for i, one in enumerate(modes):
            check_mode(one, f"search_alg.mode[{i}]")
        self.metrics, self.modes = metrics, modes
        # As Ray's: the searcher's metric and mode are the lists (the request carries them as such).
        self.metric, self.mode = metrics, modes  # type: ignore[assignment]

    def to_proto(self) -> tune_pb2.SearchAlgorithm:
        """The algorithm as the Tune request names it; a define-by-run function travels pickled."""
        msg = super().to_proto()
        msg.metrics.extend(self.metrics)
        msg.modes.extend(self.modes)
        if self.function is not None:
            from trainwire.runtime_env import pickle_by_value

            try:
                msg.pickled_space = pickle_by_value(self.function)
            except Exception as exc:
                raise InvalidArgumentError(
                    f"OptunaSearch's define-by-run space cannot be pickled: {exc}", field="search_alg.space"
                ) from exc
        return msg


def _only_samplers(value: Any) -> bool:
    if isinstance(value, Domain):
        return True
    return isinstance(value, dict) and bool(value) and all(_only_samplers(v) for v in value.values())
