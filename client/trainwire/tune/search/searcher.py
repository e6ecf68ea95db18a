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


class SearcherWrapper(Searcher):
    """A search algorithm around another one (ConcurrencyLimiter, Repeater, SearchGenerator): ``searcher``."""

    searcher: Searcher


def _wrapped(searcher: Any, owner: str) -> Searcher:
    if not isinstance(searcher, Searcher):
        raise InvalidArgumentError(
            f"{owner} takes a trainwire search algorithm, got {type(searcher).__name__}", field="search_alg"
        )
    return searcher


class ConcurrencyLimiter(SearcherWrapper):
    """Runs at most ``max_concurrent`` of ``searcher``'s trials at once, as Ray's.

    Args:
        searcher: The search algorithm to limit.
        max_concurrent: The limit (>= 1).
        batch: Accepted for Ray's signature; has no effect.
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        _wrapped(searcher, "ConcurrencyLimiter")
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


class Repeater(SearcherWrapper):
    """Runs each configuration ``searcher`` suggests ``repeat`` times, as ``ray.tune.search.Repeater``.

    The searcher sees one trial per group: once all of a group's trials have ended, it is told
    the mean of their final metric (NaN values left out). Set ``TuneConfig(num_samples=...)`` to a
    multiple of ``repeat``: it counts every trial, repeats included (a last, partial group runs but
    its searcher is never told, as in Ray). The grouping runs in the coordinator.

    Args:
        searcher: The search algorithm whose suggestions are repeated.
        repeat: Trials per configuration (>= 1).
        set_index: Puts ``__trial_index__`` (0 to ``repeat - 1``) in each trial's config, e.g. for seeds.
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        _wrapped(searcher, "Repeater")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise InvalidArgumentError(
                f"search_alg.repeat must be an integer >= 1, got {repeat!r}", field="search_alg.repeat"
            )
        if _repeats(searcher):
            raise InvalidArgumentError("a Repeater cannot wrap another Repeater", field="search_alg.repeat")
        super().__init__()
        self.metric, self.mode = searcher.metric, searcher.mode
        self.searcher, self.repeat, self.set_index = searcher, repeat, bool(set_index)

    def to_proto(self) -> tune_pb2.SearchAlgorithm:
        msg = self.searcher.to_proto()
        msg.repeat = self.repeat
        msg.repeat_without_index = not self.set_index
        return msg


def _repeats(searcher: Searcher) -> bool:
    while isinstance(searcher, SearcherWrapper):
        if isinstance(searcher, Repeater):
            return True
        searcher = searcher.searcher
    return False


class SearchGenerator(SearcherWrapper):
    """A Searcher as a search algorithm, as Ray's ``SearchGenerator``: the Tuner takes either.

    Ray's Tuner wraps every Searcher in one; here the coordinator runs the searcher it wraps,
    so this sends that searcher as it is.

    Args:
        searcher: The search algorithm.
    """

    def __init__(self, searcher: Searcher) -> None:
        _wrapped(searcher, "SearchGenerator")
        super().__init__()
        self.metric, self.mode = searcher.metric, searcher.mode
        self.searcher = searcher

    def to_proto(self) -> tune_pb2.SearchAlgorithm:
        return self.searcher.to_proto()
