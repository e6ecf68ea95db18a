"""Splitting a param space into constants and searched values, as ``ray.tune.search.variant_generator``."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from trainwire.tune.search.sample import Domain, GridSearch, _plain, is_grid_marker
from trainwire_core.errors import InvalidArgumentError

Path = tuple[str, ...]
Searched = Domain | GridSearch


def _field(prefix: str, path: Path) -> str:
    return ".".join((prefix, *path)) if prefix else ".".join(path)


def _has_sampler(value: Any) -> bool:
    if isinstance(value, Domain) or is_grid_marker(value):
        return True
    if isinstance(value, dict):
        return any(_has_sampler(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_sampler(v) for v in value)
    return False


def split_space(
    space: dict[str, Any], prefix: str = "param_space"
) -> tuple[dict[str, Any], list[tuple[Path, Searched]]]:
    """Splits ``space`` into its constants and its (path, sampler) pairs.

    Grid markers (``tune.grid_search`` or Ray's ``{"grid_search": [...]}``) and samplers become
    searched values; dicts are walked; anything else must be JSON. A dict emptied by taking its
    samplers out is dropped (the coordinator creates it again when it sets the sampled values).

    Raises:
        InvalidArgumentError: A constant that is not JSON, or a sampler inside a list
            (``field`` is ``<prefix>.<path>``).
    """
    params: list[tuple[Path, Searched]] = []

    def walk(value: dict[str, Any], path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    f"{_field(prefix, path) or 'param_space'} keys must be strings, got {key!r}",
                    field=_field(prefix, path),
                )
            here = (*path, key)
            if isinstance(item, Domain):
                params.append((here, item))
            elif is_grid_marker(item):
                try:
                    marker = item if isinstance(item, GridSearch) else GridSearch(item["grid_search"])
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"{_field(prefix, here)}: {exc}", field=_field(prefix, here)) from None
                params.append((here, marker))
            elif isinstance(item, dict):
                inner = walk(item, here)
                if inner or not item:
                    out[key] = inner
            elif isinstance(item, list | tuple) and _has_sampler(item):
                raise InvalidArgumentError(
                    f"{_field(prefix, here)}: samplers inside a list cannot be searched; put them in a dict",
                    field=_field(prefix, here),
                )
            else:
                try:
                    _plain(item)
                except (TypeError, ValueError) as exc:
                    raise InvalidArgumentError(
                        f"{_field(prefix, here)} must be JSON (or a tune sampler): {exc}", field=_field(prefix, here)
                    ) from None
                out[key] = item
        return out

    return walk(space, ()), params


def join_space(constants: dict[str, Any], params: Iterable[tuple[Path, Any]]) -> dict[str, Any]:
    """The inverse of ``split_space``: ``constants`` with each value set at its path."""
    joined = copy.deepcopy(constants)
    for path, value in params:
        node = joined
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return joined
