"""Search-space samplers, as ``ray.tune.search.sample``.

Each sampler only holds its arguments: the coordinator samples (``to_proto()`` is what it
gets). Cheap checks (bounds, ``q``, empty lists) are done here; the coordinator checks again.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2

__all__ = [
    "Categorical",
    "Domain",
    "Float",
    "Function",
    "GridSearch",
    "Integer",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
]


def _number(value: Any, name: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InvalidArgumentError(f"{name} must be a finite number, got {value!r}", field=field)
    return float(value)


def _json_list(values: Any, name: str, field: str) -> struct_pb2.ListValue:
    """``values`` as a ListValue: a non-empty list of JSON values."""
    if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
        raise InvalidArgumentError(f"{name} takes a list of values, got {type(values).__name__}", field=field)
    if not values:
        raise InvalidArgumentError(f"{name} needs at least one value", field=field)
    msg = struct_pb2.ListValue()
    try:
        msg.extend([_plain(v) for v in values])
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{name} values must be JSON (numbers, strings, bools, None, lists, dicts) here; objects can be "
            f"searched in preprocessor, datasets and train_loop_config: {exc}",
            field=field,
        ) from exc
    return msg


def _values_list(values: Any, name: str) -> list[Any]:
    """``values`` as a non-empty list (any objects: those not JSON travel as alternatives)."""
    if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
        raise InvalidArgumentError(f"{name} takes a list of values, got {type(values).__name__}", field=name)
    if not values:
        raise InvalidArgumentError(f"{name} needs at least one value", field=name)
    return list(values)


def is_json(value: Any) -> bool:
    """Whether ``value`` travels as JSON (else a grid or choice carries it as an alternative)."""
    try:
        _plain(value)
    except (TypeError, ValueError):
        return False
    return True


def labels(values: Sequence[Any]) -> list[str]:
    """What a trial's config shows for each object: its repr when short and unique, else ``<ClassName #i>``.

    A string (a dataset's URI) shows as itself, as Ray's config shows it.
    """
    reprs = []
    for value in values:
        try:
            reprs.append(value if isinstance(value, str) else repr(value))
        except Exception:  # a repr that fails is the object's bug, not the search's
            reprs.append("")
    out = []
    for i, (value, text) in enumerate(zip(values, reprs, strict=True)):
        limit = 200 if isinstance(value, str) else 80
        if not text or len(text) > limit or "\n" in text or reprs.count(text) > 1:
            text = f"<{type(value).__name__} #{i}>"
        out.append(text)
    return out


def alternatives_domain(
    sampler: str, values: Sequence[Any], convert: Callable[[Any], tune_pb2.Alternative]
) -> tune_pb2.Domain:
    """A grid_search or choice whose values travel as alternatives, each turned by ``convert``."""
    msg = tune_pb2.Domain(sampler=sampler)
    for label, value in zip(labels(values), values, strict=True):
        alternative = convert(value)
        alternative.label = label
        msg.alternatives.append(alternative)
    return msg


def _plain(value: Any) -> Any:
    """A JSON value, or TypeError/ValueError (the coordinator samples, so values travel as JSON)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Real):
        if not math.isfinite(float(value)):
            raise ValueError(f"{value!r} is not a finite number")
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"dict keys must be strings: {value!r}")
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(f"{type(value).__name__} {value!r} is not JSON")


class Domain:
    """A dimension of a search space; ``to_proto()`` is what the coordinator samples from."""

    # The values of a grid or choice that are not all JSON: they travel as alternatives.
    has_objects = False

    def to_proto(self) -> tune_pb2.Domain:
        raise NotImplementedError


@dataclass(frozen=True)
class Float(Domain):
    """A float from ``uniform``, ``loguniform`` or ``normal`` (``randn``), rounded to ``q`` if given."""

    lower: float | None
    upper: float | None
    kind: str = "uniform"
    q: float | None = None
    base: float = 10.0
    mean: float = 0.0
    sd: float = 1.0

    def __post_init__(self) -> None:
        name = self.sampler
        if self.kind == "normal":
            _number(self.mean, f"{name} mean", name)
            if _number(self.sd, f"{name} sd", name) < 0:
                raise InvalidArgumentError(f"{name} sd must be >= 0, got {self.sd!r}", field=name)
        else:
            lower = _number(self.lower, f"{name} lower", name)
            upper = _number(self.upper, f"{name} upper", name)
            if not lower < upper:
                raise InvalidArgumentError(f"{name} needs lower < upper, got {lower!r} and {upper!r}", field=name)
            if self.kind == "loguniform":
                _check_log(lower, self.base, name)
        if self.q is not None and not _number(self.q, f"{name} q", name) > 0:
            raise InvalidArgumentError(f"{name} q must be > 0, got {self.q!r}", field=name)

    @property
    def sampler(self) -> str:
        base = {"uniform": "uniform", "loguniform": "loguniform", "normal": "randn"}[self.kind]
        return ("q" if self.q is not None else "") + base

    def quantized(self, q: float) -> Float:
        """This domain with values rounded to multiples of ``q``."""
        return Float(self.lower, self.upper, self.kind, q, self.base, self.mean, self.sd)

    def to_proto(self) -> tune_pb2.Domain:
        msg = tune_pb2.Domain(sampler=self.sampler, q=self.q or 0.0)
        if self.kind == "normal":
            msg.mean, msg.sd = self.mean, self.sd
        else:
            msg.lower, msg.upper = float(self.lower), float(self.upper)  # type: ignore[arg-type]
        if self.kind == "loguniform":
            msg.base = self.base
        return msg


@dataclass(frozen=True)
class Integer(Domain):
    """An integer from ``uniform`` or ``loguniform``; ``upper`` is exclusive (inclusive for ``q`` > 1), as Ray's."""

    lower: int
    upper: int
    kind: str = "uniform"
    q: int | None = None
    base: float = 10.0

    def __post_init__(self) -> None:
        name = self.sampler
        for bound in ("lower", "upper"):
            value = getattr(self, bound)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidArgumentError(f"{name} {bound} must be an integer, got {value!r}", field=name)
        if not self.lower < self.upper:
            raise InvalidArgumentError(f"{name} needs lower < upper, got {self.lower!r} and {self.upper!r}", field=name)
        if self.kind == "loguniform":
            _check_log(self.lower, self.base, name)
        if self.q is not None and (isinstance(self.q, bool) or not isinstance(self.q, numbers.Integral) or self.q <= 0):
            raise InvalidArgumentError(f"{name} q must be an integer > 0, got {self.q!r}", field=name)

    @property
    def sampler(self) -> str:
        return ("q" if self.q is not None else "") + ("randint" if self.kind == "uniform" else "lograndint")

    def quantized(self, q: int) -> Integer:
        """This domain with values rounded to multiples of ``q``."""
        return Integer(self.lower, self.upper, self.kind, q, self.base)

    def to_proto(self) -> tune_pb2.Domain:
        msg = tune_pb2.Domain(sampler=self.sampler, lower=self.lower, upper=self.upper, q=self.q or 0)
        if self.kind == "loguniform":
            msg.base = self.base
        return msg


def _check_log(lower: float, base: float, name: str) -> None:
    if not lower > 0:
        raise InvalidArgumentError(f"{name} needs lower > 0 (a logarithm), got {lower!r}", field=name)
    if not _number(base, f"{name} base", name) > 0 or base == 1:
        raise InvalidArgumentError(f"{name} base must be > 0 and not 1, got {base!r}", field=name)


@dataclass(frozen=True, eq=False)
class Categorical(Domain):
    """One of ``categories``, drawn uniformly by the coordinator.

    Values that are not JSON (preprocessors, datasets, functions) travel as alternatives, each as its
    place in the request carries a plain value; the coordinator draws an index.
    """

    categories: Sequence[Any]

    def __post_init__(self) -> None:
        _values_list(self.categories, "choice")

    @property
    def has_objects(self) -> bool:  # type: ignore[override]
        return not all(is_json(v) for v in self.categories)

    @property
    def sampler(self) -> str:
        return "choice"

    @property
    def options(self) -> list[Any]:
        """The values, in order."""
        return list(self.categories)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Categorical) and list(self.categories) == list(other.categories)

    def __hash__(self) -> int:
        return hash(repr(list(self.categories)))

    def to_proto(self) -> tune_pb2.Domain:
        return tune_pb2.Domain(sampler="choice", values=_json_list(self.categories, "choice", "choice"))


@dataclass(frozen=True)
class Function(Domain):
    """A value computed by ``func(spec)`` (``spec.config``: the trial's config so far), on the cluster."""

    func: Callable[..., Any]

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise InvalidArgumentError(
                f"sample_from takes a function, got {type(self.func).__name__}", field="sample_from"
            )

    @property
    def sampler(self) -> str:
        return "sample_from"

    def to_proto(self) -> tune_pb2.Domain:
        from trainwire.runtime_env import pickle_by_value

        return tune_pb2.Domain(sampler="sample_from", pickled_function=pickle_by_value(self.func))


class GridSearch(dict):
    """``tune.grid_search(values)``: Ray's ``{"grid_search": values}`` marker, which it still equals.

    Values that are not JSON travel as alternatives (see ``Categorical``).
    """

    sampler = "grid_search"

    def __init__(self, values: Sequence[Any]) -> None:
        super().__init__(grid_search=_values_list(values, "grid_search"))

    @property
    def has_objects(self) -> bool:
        return not all(is_json(v) for v in self["grid_search"])

    @property
    def options(self) -> list[Any]:
        """The values, in order."""
        return list(self["grid_search"])

    def to_proto(self) -> tune_pb2.Domain:
        values = _json_list(self["grid_search"], "grid_search", "grid_search")
        return tune_pb2.Domain(sampler="grid_search", values=values)


def is_grid_marker(value: Any) -> bool:
    """True for ``tune.grid_search(...)`` and Ray's ``{"grid_search": [...]}`` dict form."""
    return isinstance(value, dict) and list(value) == ["grid_search"] and isinstance(value["grid_search"], list | tuple)


def grid_search(values: Sequence[Any]) -> GridSearch:
    """Every value in turn (each repeated ``num_samples`` times), as ``ray.tune.grid_search``."""
    return GridSearch(values)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, drawn uniformly."""
    return Categorical(categories)


def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly between ``lower`` and ``upper``."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """``uniform`` rounded to a multiple of ``q`` (which makes ``upper`` inclusive)."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float drawn uniformly in log space between ``lower`` > 0 and ``upper``."""
    return Float(lower, upper, "loguniform", base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """``loguniform`` rounded to a multiple of ``q``."""
    return Float(lower, upper, "loguniform", q=q, base=base)


def randint(lower: int, upper: int) -> Integer:
    """An integer in ``[lower, upper)``."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of ``q`` in ``[lower, upper]`` (``upper`` exclusive when ``q`` is 1, as Ray's)."""
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An integer in ``[lower, upper)`` drawn uniformly in log space."""
    return Integer(lower, upper, "loguniform", base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """``lograndint`` rounded to a multiple of ``q``."""
    return Integer(lower, upper, "loguniform", q=q, base=base)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    """A float from the normal distribution."""
    return Float(None, None, "normal", mean=mean, sd=sd)


def qrandn(mean: float, sd: float, q: float) -> Float:
    """``randn`` rounded to a multiple of ``q``."""
    return Float(None, None, "normal", q=q, mean=mean, sd=sd)


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed by ``func(spec)`` on the cluster; ``spec.config`` holds the trial's other values.

    The function is pickled (the code of your own modules travels with it); its value must be JSON.
    """
    return Function(func)
