"""Search algorithms, as ``ray.tune.search`` (OptunaSearch is in ``trainwire.tune.search.optuna``)."""

from trainwire.tune.search.sample import grid_search
from trainwire.tune.search.searcher import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    Searcher,
    SearchGenerator,
)

# Ray's name for the interface the searchers implement.
SearchAlgorithm = Searcher

# Ray's messages for a searcher given an unresolved or no search space, or no metric and mode
# (formatted with ``par``/``cls``, ``cls``/``space`` and ``cls``/``metric``/``mode``), word for word.
UNRESOLVED_SEARCH_SPACE = (
    "You passed a `{par}` parameter to {cls} that contained unresolved search "
    "space definitions. {cls} should however be instantiated with fully "
    "configured search spaces only. To use Ray Tune's automatic search space "
    "conversion, pass the space definition as part of the `param_space` argument "
    "to `tune.Tuner()` instead."
)

UNDEFINED_SEARCH_SPACE = (
    "Trying to sample a configuration from {cls}, but no search "
    "space has been defined. Either pass the `{space}` argument when "
    "instantiating the search algorithm, or pass a `param_space` to "
    "`tune.Tuner()`."
)

UNDEFINED_METRIC_MODE = (
    "Trying to sample a configuration from {cls}, but the `metric` "
    "({metric}) or `mode` ({mode}) parameters have not been set. "
    "Either pass these arguments when instantiating the search algorithm, "
    "or pass them to `tune.TuneConfig()`."
)

__all__ = [
    "UNDEFINED_METRIC_MODE",
    "UNDEFINED_SEARCH_SPACE",
    "UNRESOLVED_SEARCH_SPACE",
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "Searcher",
    "grid_search",
]
