"""Search algorithms, as ``ray.tune.search``: they hold their arguments; the coordinator runs them."""

from __future__ import annotations

from typing import Any

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import tune_pb2


def check_mode(mode: str | None, field: str) -> None:
    if mode is not None and mode not in ("min", "max"):
        raise InvalidArgumentError(f"{field} must be 'min' or 'max', got {mode!r}", field=field)


def check_seed(seed: Any, field: str) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidArgumentError(f"{field} must be an integer seed, got {type(seed).__name__}", field=field)


class Searcher:
    """Base of the search algorithms (``ray.tune.search.Searcher``).

    Args:
        metric: The metric to optimize (default: TuneConfig's).
        mode: "min" or "max" (default: TuneConfig's).
    """

    name = ""

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        check_mode(mode, "search_alg.mode")
        self.metric, self.mode = metric, mode
        self.points_to_evaluate: list[dict[str, Any]] | None = None
        self.seed: int | None = None
        self.max_concurrent = 0

    def to_proto(self) -> tune_pb2.SearchAlgorithm:
        """The algorithm as the coordinator's Tune request names it."""
        # A multi-objective searcher's lists travel in its own fields (OptunaSearch.to_proto).
        metric = self.metric if isinstance(self.metric, str) else ""
        mode = self.mode if isinstance(self.mode, str) else ""
        msg = tune_pb2.SearchAlgorithm(name=self.name, metric=metric, mode=mode, max_concurrent=self.max_concurrent)
        if self.seed is not None:
            msg.seed = self.seed
        for i, point in enumerate(self.points_to_evaluate or []):
            field = f"search_alg.points_to_evaluate[{i}]"
            if not isinstance(point, dict):
                raise InvalidArgumentError(f"{field} must be a dict keyed like param_space", field=field)
            msg.points_to_evaluate.append(to_struct(point, field))
        return msg


class BasicVariantGenerator(Searcher):
    """Random and grid search (Tune's default), as ``ray.tune.search.BasicVariantGenerator``.

    Args:
        points_to_evaluate: Configurations to try first, keyed like param_space.
        max_concurrent: At most this many trials at once (0: no limit).
        constant_grid_search: Accepted for Ray's signature; has no effect.
        random_state: An integer seed that makes the samples repeatable.
    """

    name = "variant_generator"

    def __init__(
        self,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state: int | None = None,
    ) -> None:
        super().__init__()
        check_seed(random_state, "search_alg.random_state")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 0:
            raise InvalidArgumentError(
                f"search_alg.max_concurrent must be an integer >= 0, got {max_concurrent!r}",
                field="search_alg.max_concurrent",
            )
        self.points_to_evaluate = points_to_evaluate
        self.max_concurrent = max_concurrent
        self.seed = random_state


class ConcurrencyLimiter(Searcher):
    """Runs at most ``max_concurrent`` of ``searcher``'s trials at once, as Ray's.

    Args:
        searcher: The search algorithm to limit.
        max_concurrent: The limit (>= 1).
        batch: Accepted for Ray's signature; has no effect.
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(searcher, Searcher):
            raise InvalidArgumentError(
                f"ConcurrencyLimiter takes a trainwire search algorithm, got {type(searcher).__name__}",
                field="search_alg",
            )
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise InvalidArgumentError(
                f"search_alg.max_concurrent must be an integer >= 1, got {max_concurrent!r}",
                field="search_alg.max_concurrent",
            )
        super().__init__()
        self.metric, self.mode = searcher.metric, searcher.mode  # a multi-objective searcher's lists too
        self.searcher, self.max_concurrent, self.batch = searcher, max_concurrent, batch

    def to_proto(self) -> tune_pb2.SearchAlgorithm:
        msg = self.searcher.to_proto()
        msg.max_concurrent = self.max_concurrent
        return msg
