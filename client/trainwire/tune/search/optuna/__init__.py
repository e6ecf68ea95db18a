"""Optuna's TPE search, as ``ray.tune.search.optuna``: it runs in the coordinator (optuna is not needed here)."""

from __future__ import annotations

from typing import Any

from trainwire.tune.search.sample import Domain
from trainwire.tune.search.searcher import Searcher, check_seed
from trainwire_core.errors import InvalidArgumentError

__all__ = ["OptunaSearch"]


class OptunaSearch(Searcher):
    """Optuna's TPE sampler over the search space, as ``ray.tune.search.optuna.OptunaSearch``.

    Args:
        space: None (the Tuner's param_space is searched, as in Ray) or a dict of trainwire
            samplers keyed like param_space, which the Tuner adds to its param_space.
        metric: The metric to optimize (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
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
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list[Any] | None = None,
    ) -> None:
        super().__init__(metric, mode)
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
        if space is not None and not isinstance(space, dict):
            raise InvalidArgumentError(
                "OptunaSearch(space=...) takes a dict of trainwire.tune samplers (or None for the param_space); "
                "optuna distributions and define-by-run functions are not supported",
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


def _only_samplers(value: Any) -> bool:
    if isinstance(value, Domain):
        return True
    return isinstance(value, dict) and bool(value) and all(_only_samplers(v) for v in value.values())
