"""Converting between JSON-like dicts and ``google.protobuf.Struct``."""

from __future__ import annotations

import math
import numbers
from typing import Any

from google.protobuf import json_format, struct_pb2

from trainwire_core.errors import InvalidArgumentError


def to_struct(values: dict[str, Any] | None, field: str) -> struct_pb2.Struct:
    """A dict of JSON values as a Struct; anything else is bad input naming ``field``."""
    msg = struct_pb2.Struct()
    try:
        json_format.ParseDict(values or {}, msg)
    except (json_format.ParseError, TypeError) as exc:
        raise InvalidArgumentError(f"{field} must hold JSON values: {exc}", field=field) from exc
    return msg


def struct_to_dict(msg: Any) -> dict[str, Any]:
    """A Struct as a dict; whole numbers come back as ints (a Struct keeps only doubles)."""
    return _ints(json_format.MessageToDict(msg))


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def metrics_to_struct(metrics: dict[str, Any]) -> struct_pb2.Struct:
    """Converts report metrics to a Struct, keeping what JSON can hold."""
    out = struct_pb2.Struct()
    for key, value in metrics.items():
        out[str(key)] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Number):
        number = float(value)  # numpy and torch scalars too
        return number if math.isfinite(number) else str(number)
    if hasattr(value, "item") and callable(value.item):
        return _plain(value.item())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def flatten_metrics(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a/b": 1}, as Ray's metrics_dataframe shows nested metrics."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_metrics(value, f"{name}/"))
        else:
            out[name] = value
    return out


def merge_dicts(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in key by key, nested dicts too (as Ray merges param spaces)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_dicts(merged[key], value)
        else:
            merged[key] = value
    return merged
