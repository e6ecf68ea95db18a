"""Search algorithms, as ``ray.tune.search`` (OptunaSearch is in ``trainwire.tune.search.optuna``)."""

from trainwire.tune.search.sample import grid_search
from trainwire.tune.search.searcher import BasicVariantGenerator, ConcurrencyLimiter, Searcher

# Ray's name for the interface the searchers implement.
SearchAlgorithm = Searcher

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "SearchAlgorithm", "Searcher", "grid_search"]
