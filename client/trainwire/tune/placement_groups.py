"""``tune.PlacementGroupFactory``, as Ray's: a trial's resources as bundles.

A trainwire trial of a function or class trainable is one worker process: it reserves the sum of
the factory's bundles (a warning says so when there are several, since nothing of the trial
can use the other bundles as separate actors).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PlacementGroupFactory"]

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroupFactory:
    """A trial's resource request, as ``ray.tune.PlacementGroupFactory``.

    Args:
        bundles: Resource dicts, e.g. ``[{"CPU": 1, "GPU": 0.5}]``; the first is the trainable's.
        strategy: "PACK", "SPREAD", "STRICT_PACK" or "STRICT_SPREAD".
        *args, **kwargs: Accepted for Ray's signature (passed to ``placement_group()`` there).

    Raises:
        ValueError: No bundles, only an empty one, or an unknown strategy.
    """

    def __init__(self, bundles: list[dict[str, int | float]], strategy: str = "PACK", *args: Any, **kwargs: Any):
        if not bundles:
            raise ValueError("Cannot initialize a ResourceRequest with zero bundles.")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self._bundles = [{k: float(v) for k, v in bundle.items() if v != 0} for bundle in bundles]
        self._head_bundle_is_empty = not self._bundles[0]
        if self._head_bundle_is_empty:
            self._bundles.pop(0)
            if not self._bundles:
                raise ValueError("Cannot initialize a ResourceRequest with an empty head and zero worker bundles.")
        self._strategy = strategy
        self._args, self._kwargs = args, kwargs

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle (the trainable's own) asked for nothing."""
        return self._head_bundle_is_empty

    @property
    def head_cpus(self) -> float:
        """The CPUs of the trainable's own bundle."""
        return 0.0 if self._head_bundle_is_empty else self._bundles[0].get("CPU", 0.0)

    @property
    def bundles(self) -> list[dict[str, float]]:
        """A copy of the bundles (an empty head bundle left out, as Ray's)."""
        return copy.deepcopy(self._bundles)

    @property
    def required_resources(self) -> dict[str, float]:
        """All bundles' resources summed: what a trainwire trial reserves."""
        total: dict[str, float] = {}
        for bundle in self._bundles:
            for key, amount in bundle.items():
                total[key] = total.get(key, 0.0) + amount
        return total

    @property
    def strategy(self) -> str:
        return self._strategy

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and self._bundles == other._bundles
            and self._strategy == other._strategy
            and self._head_bundle_is_empty == other._head_bundle_is_empty
        )

    def __hash__(self) -> int:
        return hash((repr(self._bundles), self._strategy, self._head_bundle_is_empty))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self._bundles}, strategy={self._strategy!r})"
