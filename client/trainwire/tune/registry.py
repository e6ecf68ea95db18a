"""Names for trainables, environments, schedulers and searchers, as Ray Tune's registry.

``tune.register_trainable("my_fn", fn)`` lets ``tune.run("my_fn")`` and ``Tuner("my_fn")`` find
it; ``create_scheduler("asha")`` and ``create_searcher("optuna")`` build a part by its name.
The registry is this program's: what a name stands for travels with the search like any trainable.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from trainwire_core.errors import InvalidArgumentError

__all__ = ["create_scheduler", "create_searcher", "register_env", "register_trainable", "registered_trainable"]

_TRAINABLES: dict[str, Any] = {}
_ENVS: dict[str, Callable[..., Any]] = {}

# Ray's names for its schedulers and search algorithms, and trainwire's classes for them.
SCHEDULERS = {
    "fifo": "FIFOScheduler",
    "async_hyperband": "AsyncHyperBandScheduler",
    "asynchyperband": "AsyncHyperBandScheduler",
    "median_stopping_rule": "MedianStoppingRule",
    "medianstopping": "MedianStoppingRule",
    "hyperband": "HyperBandScheduler",
    "hb_bohb": "HyperBandForBOHB",
    "pbt": "PopulationBasedTraining",
    "pbt_replay": "PopulationBasedTrainingReplay",
    "pb2": "PB2",
    "resource_changing": "ResourceChangingScheduler",
}
SEARCHERS = {
    "variant_generator": ("trainwire.tune.search", "BasicVariantGenerator"),
    "random": ("trainwire.tune.search", "BasicVariantGenerator"),
    "ax": ("trainwire.tune.search.ax", "AxSearch"),
    "hyperopt": ("trainwire.tune.search.hyperopt", "HyperOptSearch"),
    "bayesopt": ("trainwire.tune.search.bayesopt", "BayesOptSearch"),
    "bohb": ("trainwire.tune.search.bohb", "TuneBOHB"),
    "nevergrad": ("trainwire.tune.search.nevergrad", "NevergradSearch"),
    "optuna": ("trainwire.tune.search.optuna", "OptunaSearch"),
    "zoopt": ("trainwire.tune.search.zoopt", "ZOOptSearch"),
    "hebo": ("trainwire.tune.search.hebo", "HEBOSearch"),
}


def register_trainable(name: str, trainable: Callable | type, warn: bool = True) -> None:
    """Gives a function or Trainable class a name that ``tune.run`` and ``Tuner`` take in its place.

    Raises:
        TypeError: ``trainable`` is neither a function nor a class.
    """
    if not (callable(trainable) or isinstance(trainable, type)):
        raise TypeError(f"Second argument must be convertable to Trainable: {trainable}")
    _TRAINABLES[name] = trainable


def registered_trainable(name: str) -> Any:
    """The trainable ``register_trainable`` gave this name.

    Raises:
        InvalidArgumentError: No trainable has this name.
    """
    if name not in _TRAINABLES:
        known = ", ".join(sorted(_TRAINABLES)) or "none"
        raise InvalidArgumentError(
            f"no trainable is registered as {name!r} (registered: {known}); call tune.register_trainable first",
            field="trainable",
        )
    return _TRAINABLES[name]


def register_env(name: str, env_creator: Callable) -> None:
    """Names an environment creator, as Ray's registry does for RLlib (kept for scripts that call it).

    Raises:
        TypeError: ``env_creator`` is not callable.
    """
    if not callable(env_creator):
        raise TypeError(f"Second argument must be callable: {env_creator}")
    _ENVS[name] = env_creator


def create_scheduler(scheduler: str, **kwargs: Any) -> Any:
    """A scheduler by Ray's name for it (``"fifo"``, ``"async_hyperband"``, ``"pbt"``, ...).

    Raises:
        ValueError: Not one of Ray's names, or a scheduler trainwire does not have.
    """
    from trainwire.tune import schedulers

    name = scheduler.lower()
    if name not in SCHEDULERS:
        raise ValueError(f"The `scheduler` argument must be one of {list(SCHEDULERS)}. Got: {scheduler}")
    cls = getattr(schedulers, SCHEDULERS[name], None)
    if cls is None:
        have = [n for n, c in SCHEDULERS.items() if hasattr(schedulers, c)]
        raise ValueError(f"trainwire has no {SCHEDULERS[name]} (scheduler {scheduler!r}); it has {have}")
    return cls(**kwargs)


def create_searcher(search_alg: str, **kwargs: Any) -> Any:
    """A search algorithm by Ray's name for it (``"random"``, ``"optuna"``, ...); the keyword
    arguments its class does not take are left out, as Ray does.

    Raises:
        ValueError: Not one of Ray's names, or a search algorithm trainwire does not have.
    """
    name = search_alg.lower()
    if name not in SEARCHERS:
        raise ValueError(f"The `search_alg` argument must be one of {list(SEARCHERS)}. Got: {search_alg}")
    module_name, class_name = SEARCHERS[name]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ValueError(f"trainwire has no {class_name} (search_alg {search_alg!r})") from None
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return cls(**kwargs)
