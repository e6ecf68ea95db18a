"""Search spaces: each searched parameter checked once, then sampled or enumerated (ray.tune.search.sample)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.search_space import ROOTS, SCALING_FIELDS
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import tune_pb2

FLOAT_SAMPLERS = ("uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn")
INT_SAMPLERS = ("randint", "qrandint", "lograndint", "qlograndint")
# Places a grid or choice over alternatives (objects) may set, besides train_loop_config's values.
OBJECT_ROOTS = ("preprocessor", "datasets")
SAMPLERS = ("grid_search", "choice", "sample_from", *FLOAT_SAMPLERS, *INT_SAMPLERS)


@dataclass(frozen=True)
class Param:
    """One searched parameter, checked.

    Attributes:
        path: Its keys from param_space's root.
        domain: What it is drawn from.
        field: Its name in error messages (``search_space[3].domain``).
    """

    path: tuple[str, ...]
    domain: tune_pb2.Domain
    field: str

    @property
    def name(self) -> str:
        """The parameter's name as Ray's config columns spell it (``train_loop_config/lr``)."""
        return "/".join(self.path)

    @property
    def sampler(self) -> str:
        return self.domain.sampler

    def values(self) -> list[Any]:
        """A grid's or a choice's values; over alternatives, their labels (what the trial's config shows)."""
        if self.domain.alternatives:
            return [a.label for a in self.domain.alternatives]
        return list(struct_to_dict(self.domain.values))  # a ListValue converts to a list

    def alternative(self, label: Any) -> tune_pb2.Alternative:
        """The alternative a sampled label stands for.

        Raises:
            InvalidArgumentError: No alternative has that label.
        """
        for alternative in self.domain.alternatives:
            if alternative.label == label:
                return alternative
        raise InvalidArgumentError(f"{self.name} has no alternative {label!r}", field=f"{self.field}.domain")

    def sample(self, rng: np.random.Generator) -> Any:
        """One value drawn as Ray's sampler of the same name draws it."""
        d, sampler = self.domain, self.domain.sampler
        if sampler == "choice":
            values = self.values()
            return values[int(rng.integers(len(values)))]
        if sampler in ("uniform", "quniform"):
            return _quantize(float(rng.uniform(d.lower, d.upper)), d.q)
        if sampler in ("loguniform", "qloguniform"):
            base = d.base or 10.0
            value = base ** rng.uniform(math.log(d.lower, base), math.log(d.upper, base))
            return _quantize(float(value), d.q)
        if sampler in ("randn", "qrandn"):
            return _quantize(float(rng.normal(d.mean, d.sd or 1.0)), d.q)
        if sampler == "randint":
            return int(rng.integers(int(d.lower), int(d.upper)))
        if sampler == "qrandint":  # Ray's qrandint includes its upper bound
            q = int(d.q or 1)
            return int(round(int(rng.integers(int(d.lower), int(d.upper) + 1)) / q) * q)
        if sampler in ("lograndint", "qlograndint"):
            base = d.base or 10.0
            value = base ** rng.uniform(math.log(d.lower, base), math.log(d.upper, base))
            if sampler == "qlograndint":
                q = int(d.q or 1)
                return int(round(value / q) * q)
            return min(int(value), int(d.upper) - 1)
        raise AssertionError(f"{sampler} is not sampled at random")


def _quantize(value: float, q: float) -> float:
    return float(np.round(value / q) * q) if q else value


def _check(param: tune_pb2.SearchParam, i: int, data_parallel: bool, gbdt: bool) -> Param:
    field = f"search_space[{i}]"
    path = tuple(param.path)
    if not path or any(not part for part in path):
        raise InvalidArgumentError("a searched parameter needs a path of non-empty keys", field=f"{field}.path")
    d = param.domain
    check_path(path, f"{field}.path", data_parallel, gbdt, objects=bool(d.alternatives))
    sampler = d.sampler
    if sampler not in SAMPLERS:
        raise InvalidArgumentError(
            f"unknown sampler {sampler!r} for {'/'.join(path)}; known: {', '.join(SAMPLERS)}",
            field=f"{field}.domain.sampler",
        )
    if sampler in ("grid_search", "choice") and not d.values.values and not d.alternatives:
        raise InvalidArgumentError(f"{sampler} for {'/'.join(path)} has no values", field=f"{field}.domain.values")
    if d.alternatives:
        _check_alternatives(path, d, field)
    if sampler == "sample_from" and not d.pickled_function:
        raise InvalidArgumentError("sample_from needs a function", field=f"{field}.domain.pickled_function")
    bounds = (d.lower, d.upper, d.q, d.base, d.mean, d.sd)
    if not all(math.isfinite(v) for v in bounds):
        raise InvalidArgumentError(f"{'/'.join(path)}: bounds must be finite", field=f"{field}.domain")
    if d.q < 0 or d.sd < 0:
        raise InvalidArgumentError(f"{'/'.join(path)}: q and sd must be >= 0", field=f"{field}.domain.q")
    if sampler in FLOAT_SAMPLERS[:4] + INT_SAMPLERS and not d.lower < d.upper:
        raise InvalidArgumentError(
            f"{sampler} for {'/'.join(path)} needs lower < upper (got {d.lower:g}, {d.upper:g})",
            field=f"{field}.domain.upper",
        )
    if "log" in sampler and (d.lower <= 0 or (d.base and (d.base <= 0 or d.base == 1))):
        raise InvalidArgumentError(
            f"{sampler} for {'/'.join(path)} needs lower > 0 and a base > 0 other than 1",
            field=f"{field}.domain.lower",
        )
    if sampler in INT_SAMPLERS and not (d.lower.is_integer() and d.upper.is_integer() and float(d.q).is_integer()):
        raise InvalidArgumentError(
            f"{sampler} for {'/'.join(path)} needs integer bounds and q", field=f"{field}.domain.lower"
        )
    return Param(path, d, field)


def _check_alternatives(path: tuple[str, ...], d: tune_pb2.Domain, field: str) -> None:
    """A grid or choice over alternatives: labelled once each, and each of the kind its path carries."""
    name = "/".join(path)
    if d.sampler not in ("grid_search", "choice") or d.values.values:
        raise InvalidArgumentError(
            f"{name}: alternatives are for grid_search and choice, instead of values",
            field=f"{field}.domain.alternatives",
        )
    labels = [a.label for a in d.alternatives]
    if not all(labels) or len(set(labels)) != len(labels):
        raise InvalidArgumentError(
            f"{name}: each alternative needs a label of its own", field=f"{field}.domain.alternatives"
        )
    # What each place of a FitRequest can hold for a plain value.
    kinds = {"preprocessor": ("pickled", "preprocessor", None), "datasets": ("dataset",)}.get(path[0], ("pickled",))
    for i, alternative in enumerate(d.alternatives):
        kind = alternative.WhichOneof("value")
        if kind not in kinds:
            raise InvalidArgumentError(
                f"{name}: alternative {alternative.label!r} is {kind or 'empty'}; {path[0]} takes "
                + ", ".join(k or "empty" for k in kinds),
                field=f"{field}.domain.alternatives[{i}]",
            )


def check_path(path: Sequence[str], field: str, data_parallel: bool, gbdt: bool, objects: bool = False) -> None:
    """Refuses a searched path no trainer of this kind takes (InvalidArgumentError naming ``field``).

    ``objects``: the path is searched over alternatives, so ``preprocessor`` and ``datasets.<name>``
    may be searched too.
    """
    root = path[0]
    if root in OBJECT_ROOTS:
        if not objects:
            raise InvalidArgumentError(f"{root} is searched only over alternatives (grid_search, choice)", field=field)
        if (root == "preprocessor") != (len(path) == 1) or len(path) > 2:
            raise InvalidArgumentError(f"{root} is searched as preprocessor or datasets.<name>", field=field)
        return
    if objects and (root != "train_loop_config" or len(path) < 2):
        raise InvalidArgumentError(
            f"{'.'.join(path)} takes JSON values only, not alternatives (objects go in train_loop_config.<key>)",
            field=field,
        )
    if root not in ROOTS:
        raise InvalidArgumentError(
            f"param_space key {root!r} cannot be searched; use one of {', '.join(ROOTS)}", field=field
        )
    if root == "train_loop_config" and not data_parallel:
        raise InvalidArgumentError("train_loop_config is searched only for loop trainers", field=field)
    if root in ("params", "num_boost_round") and not gbdt:
        raise InvalidArgumentError(f"{root} is searched only for XGBoost and LightGBM", field=field)
    if root == "num_boost_round" and len(path) != 1:
        raise InvalidArgumentError("num_boost_round is a number, not a dict", field=field)
    if root == "scaling_config" and (len(path) < 2 or path[1] not in SCALING_FIELDS):
        raise InvalidArgumentError(
            f"scaling_config fields that can be searched: {', '.join(SCALING_FIELDS)}", field=field
        )


class SearchSpace:
    """A request's searched parameters and constants, checked.

    Args:
        request: The TuneRequest.
    """

    def __init__(self, request: tune_pb2.TuneRequest) -> None:
        trainer = request.trainer.WhichOneof("trainer")
        data_parallel, gbdt = trainer == "data_parallel", trainer == "gbdt"
        self.constants = struct_to_dict(request.param_space)
        for key, value in self.constants.items():
            keys = [(key, sub) for sub in value] if key == "scaling_config" and isinstance(value, dict) else [(key,)]
            for path in keys:
                check_path(path, "param_space." + ".".join(path), data_parallel, gbdt)
        self.params = [_check(p, i, data_parallel, gbdt) for i, p in enumerate(request.search_space)]
        seen: set[tuple[str, ...]] = set()
        for param in self.params:
            if param.path in seen:
                raise InvalidArgumentError(f"{param.name} is searched twice", field=f"{param.field}.path")
            seen.add(param.path)
        self.grid = [p for p in self.params if p.sampler == "grid_search"]
        self.random = [p for p in self.params if p.sampler not in ("grid_search", "sample_from")]
        self.derived = [p for p in self.params if p.sampler == "sample_from"]

    @property
    def num_grid_points(self) -> int:
        return math.prod(len(p.values()) for p in self.grid)

    def grid_point(self, k: int) -> dict[tuple[str, ...], Any]:
        """The k-th point of the grid; the last grid parameter varies fastest, as in Ray."""
        point: dict[tuple[str, ...], Any] = {}
        for param in reversed(self.grid):
            values = param.values()
            k, j = divmod(k, len(values))
            point[param.path] = values[j]
        return point


def nest(values: dict[tuple[str, ...], Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Flat ``{path: value}`` as the nested dict param_space spells (``{"params": {"eta": 0.1}}``)."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in (base or {}).items()}
    for path, value in values.items():
        node = out
        for key in path[:-1]:
            child = node.get(key)
            node[key] = child = dict(child) if isinstance(child, dict) else {}
            node = child
        node[path[-1]] = value
    return out


def flatten(config: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """The inverse of `nest`: every leaf by its path."""
    out: dict[tuple[str, ...], Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out
