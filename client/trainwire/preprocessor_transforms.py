"""Fitted Ray Data preprocessors as numpy operations on the request's columns.

``transform_batch`` on a small batch costs milliseconds: a DataFrame is built,
crosses into Arrow and back, and each column goes through pandas. The
preprocessors users fit most are a few arithmetic operations or a lookup per
column, so here they run directly on the 1-D arrays of a request, reading the
fitted ``stats_`` the way ``transform_batch`` does, with the same values,
dtypes, NaN handling and column order:

- StandardScaler, MinMaxScaler, MaxAbsScaler, RobustScaler
- SimpleImputer (mean, most_frequent, constant)
- OneHotEncoder, OrdinalEncoder, LabelEncoder
- Concatenator
- Chain of these

``vectorise`` returns None for anything else (the caller uses
``transform_batch``), and a transform returns None for a batch it cannot
reproduce exactly (a dtype or value it does not handle, a null an encoder
rejects, a missing column): the caller then uses ``transform_batch`` for that
batch, which also raises the preprocessor's own errors.

Columns are a dict of name -> array, in the frame's column order. Most are
1-D; OneHotEncoder and Concatenator outputs are 2-D (one row per input row),
where ``transform_batch`` holds one array per row in an object column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Columns = dict[Any, np.ndarray]
Step = Callable[[Columns], "Columns | None"]

_EPSILON = 1e-8  # ray.data.preprocessors.scaler._EPSILON
_NUMERIC = "iuf"
_FLOAT64 = np.dtype(np.float64)


def _numeric(arr: np.ndarray) -> bool:
    return arr.ndim == 1 and arr.dtype.kind in _NUMERIC


def _has_null(arr: np.ndarray) -> bool:
    if arr.dtype.kind == "f":
        return bool(np.isnan(arr).any())
    if arr.dtype == object:
        return any(v is None or (isinstance(v, float) and v != v) for v in arr)
    return False


class Vectorised:
    """A fitted preprocessor as a sequence of numpy steps; call it on a dict of columns."""

    def __init__(self, steps: list[Step], name: str) -> None:
        self.steps = steps
        self.name = name

    def __call__(self, columns: Columns) -> Columns | None:
        out = dict(columns)
        for step in self.steps:
            result = step(out)
            if result is None:
                return None
            out = result
        return out

    def __repr__(self) -> str:
        return f"Vectorised({self.name})"


# --- scalers -------------------------------------------------------------------
# A scaler maps each column to (x - shift) / scale; ZEROS: zeros of the column's dtype.
ZEROS = "zeros"


def _scaler(
    columns: list[str], outputs: list[str], params: dict[str, Any], always_float64: bool = False
) -> Step | None:
    """One step for a fitted scaler, from per-column (shift, scale) as the fit left them.

    ``always_float64``: Ray computes this scaler in Arrow, in float64 whatever the input's
    dtype (StandardScaler); the others compute in pandas with numpy's dtype rules, kept
    here by using the same Python scalars on each column.
    """
    if any(v is None for v in params.values()):
        return None  # a column without stats: transform_batch makes it all-NaN, in its own way
    fusable = all(params[c] != ZEROS for c in columns)
    shifts = np.array([float(params[c][0]) for c in columns]) if fusable else None
    scales = np.array([float(params[c][1]) for c in columns]) if fusable else None

    def step(cols: Columns) -> Columns | None:
        arrays = []
        all_float64 = True
        for name in columns:
            a = cols.get(name)
            if a is None or a.ndim != 1 or a.dtype.kind not in _NUMERIC:
                return None
            all_float64 = all_float64 and a.dtype == _FLOAT64
            arrays.append(a)
        if fusable and (always_float64 or all_float64):
            # All columns at once: the same float64 operations, one call each.
            block = (np.column_stack(arrays).astype(np.float64, copy=False) - shifts) / scales
            results = [block[:, i] for i in range(len(columns))]
        else:
            results = []
            for name, arr in zip(columns, arrays):
                param = params[name]
                if param == ZEROS:
                    results.append(np.zeros_like(arr))
                elif always_float64:
                    results.append(np.subtract(arr, float(param[0]), dtype=np.float64) / float(param[1]))
                else:
                    results.append((arr - param[0]) / param[1])
        for name, out in zip(outputs, results):
            cols[name] = out
        return cols

    return step


def _standard(p: Any) -> Step | None:
    params: dict[str, Any] = {}
    for name in p._columns:
        mean, std = p.stats_[f"mean({name})"], p.stats_[f"std({name})"]
        params[name] = None if mean is None or std is None else (mean, 1 if std < _EPSILON else std)
    return _scaler(p._columns, p._output_columns, params, always_float64=True)


def _min_max(p: Any) -> Step | None:
    params: dict[str, Any] = {}
    for name in p._columns:
        low, high = p.stats_[f"min({name})"], p.stats_[f"max({name})"]
        if low is None or high is None:
            params[name] = None
            continue
        diff = high - low
        params[name] = (low, 1 if diff < _EPSILON else diff)
    return _scaler(p._columns, p._output_columns, params)


def _max_abs(p: Any) -> Step | None:
    params: dict[str, Any] = {}
    for name in p._columns:
        abs_max = p.stats_[f"abs_max({name})"]
        params[name] = None if abs_max is None else (0, 1 if abs_max == 0 else abs_max)
    return _scaler(p._columns, p._output_columns, params)


def _robust(p: Any) -> Step | None:
    params: dict[str, Any] = {}
    for name in p._columns:
        low = p.stats_[f"low_quantile({name})"]
        median = p.stats_[f"median({name})"]
        high = p.stats_[f"high_quantile({name})"]
        if low is None or median is None or high is None:
            params[name] = None
            continue
        diff = high - low
        params[name] = ZEROS if diff == 0 else (median, diff)
    return _scaler(p._columns, p._output_columns, params)


# --- imputer -------------------------------------------------------------------
def _imputer(p: Any) -> Step:
    columns, outputs = list(p._columns), list(p._output_columns)
    values = {c: p._get_fill_value(c) for c in columns}

    def fill(arr: np.ndarray, value: Any) -> np.ndarray | None:
        if arr.ndim != 1:
            return None
        kind = arr.dtype.kind
        if kind in "iu":
            return arr  # nothing is missing in an integer column
        if kind == "f":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                return None
            mask = np.isnan(arr)
            if not mask.any():
                return arr
            cast = arr.dtype.type(value)
            # pandas casts a Python number to the column's dtype, but widens the column for a numpy
            # scalar it cannot hold exactly: leave that to transform_batch.
            if isinstance(value, np.generic) and float(cast) != float(value):
                return None
            out = arr.copy()
            out[mask] = cast
            return out
        if kind == "O" and isinstance(value, str):
            mask = np.fromiter((v is None or (isinstance(v, float) and v != v) for v in arr), bool, len(arr))
            if not mask.any():
                return arr
            if not all(isinstance(v, str) for v in arr[~mask]):
                return None
            out = arr.copy()
            out[mask] = value
            return out
        return None

    def step(cols: Columns) -> Columns | None:
        filled = []
        for name in columns:
            arr = cols.get(name)
            if arr is None or values[name] is None:
                return None
            out = fill(arr, values[name])
            if out is None:
                return None
            filled.append(out)
        for name, out in zip(outputs, filled):
            cols[name] = out
        return cols

    return step


# --- encoders ------------------------------------------------------------------
def _category_map(p: Any, column: str) -> dict[Any, int] | None:
    stats = p.stats_[f"unique_values({column})"]
    if isinstance(stats, dict):
        return stats
    try:  # Arrow form: (keys, values)
        keys, values = stats
        return {k.as_py(): v.as_py() for k, v in zip(keys, values)}
    except Exception:  # noqa: BLE001 - an unknown form: transform_batch knows it
        return None


def _scalar_column(arr: np.ndarray | None) -> bool:
    """A column of hashable scalars without nulls: strings or numbers (lists are left to transform_batch)."""
    if arr is None or arr.ndim != 1:
        return False
    if arr.dtype.kind in _NUMERIC:
        return not _has_null(arr)
    if arr.dtype.kind in "US":
        return True
    if arr.dtype == object:
        return all(isinstance(v, str) for v in arr)
    return False


def _lookup(arr: np.ndarray, mapping: dict[Any, int]) -> np.ndarray:
    """Codes of a column: int64 when every value is known, else float64 with NaN for the unknown ones."""
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    codes = [mapping.get(v) for v in arr.tolist()]
    if None in codes:
        return np.array([np.nan if c is None else c for c in codes], dtype=np.float64)
    return np.array(codes, dtype=np.int64)


def _ordinal(p: Any) -> Step | None:
    columns, outputs = list(p._columns), list(p._output_columns)
    maps = {c: _category_map(p, c) for c in columns}
    if any(m is None for m in maps.values()):
        return None

    def step(cols: Columns) -> Columns | None:
        codes = []
        for name in columns:
            arr = cols.get(name)
            if not _scalar_column(arr):
                return None
            codes.append(_lookup(arr, maps[name]))
        for name, out in zip(outputs, codes):
            cols[name] = out
        return cols

    return step


def _label(p: Any) -> Step | None:
    column, output = p._label_column, p._output_column
    mapping = _category_map(p, column)
    if mapping is None:
        return None

    def step(cols: Columns) -> Columns | None:
        arr = cols.get(column)
        if not _scalar_column(arr):
            return None
        cols[output] = _lookup(arr, mapping)
        return cols

    return step


def _one_hot(p: Any) -> Step | None:
    columns, outputs = list(p._columns), list(p._output_columns)
    maps = {c: _category_map(p, c) for c in columns}
    if any(m is None for m in maps.values()):
        return None

    def step(cols: Columns) -> Columns | None:
        encoded = []
        for name in columns:
            arr = cols.get(name)
            if not _scalar_column(arr):
                return None
            mapping = maps[name]
            if arr.dtype.kind in "US":
                arr = arr.astype(object)
            codes = np.fromiter((mapping.get(v, -1) for v in arr.tolist()), np.int64, len(arr))
            one_hot = np.zeros((len(arr), len(mapping)), dtype=np.uint8)
            known = codes >= 0
            one_hot[np.nonzero(known)[0], codes[known]] = 1
            encoded.append(one_hot)
        for name, out in zip(outputs, encoded):
            cols[name] = out
        return cols

    return step


# --- concatenator --------------------------------------------------------------
def _concatenator(p: Any) -> Step | None:
    columns, output = list(p._columns), p._output_column_name
    dropped = set(columns)
    dtype = p._dtype
    if getattr(p, "_flatten", False):
        return None

    def step(cols: Columns) -> Columns | None:
        arrays = [cols.get(c) for c in columns]
        if any(a is None or a.ndim != 1 for a in arrays):
            return None  # missing columns, or ones holding arrays per row
        stacked = np.column_stack([a if dtype is None else a.astype(dtype) for a in arrays])
        out = {k: v for k, v in cols.items() if k not in dropped}
        out[output] = stacked
        return out

    return step


def _chain(p: Any) -> list[Step] | None:
    steps: list[Step] = []
    for inner in p._preprocessors:
        inner_steps = _steps(inner)
        if inner_steps is None:
            return None
        steps.extend(inner_steps)
    return steps


def _builders() -> dict[type, Callable[[Any], Any]]:
    from ray.data import preprocessors as pp

    return {
        pp.StandardScaler: _standard,
        pp.MinMaxScaler: _min_max,
        pp.MaxAbsScaler: _max_abs,
        pp.RobustScaler: _robust,
        pp.SimpleImputer: _imputer,
        pp.OrdinalEncoder: _ordinal,
        pp.LabelEncoder: _label,
        pp.OneHotEncoder: _one_hot,
        pp.Concatenator: _concatenator,
    }


def _fitted(p: Any) -> bool:
    try:
        status = p.fit_status()
    except Exception:  # noqa: BLE001
        return False
    return status.name in ("FITTED", "NOT_FITTABLE")


def _steps(p: Any) -> list[Step] | None:
    from ray.data.preprocessors import Chain

    if type(p) is Chain:
        return _chain(p)
    builder = _builders().get(type(p))  # exact types: a subclass may transform otherwise
    if builder is None or not _fitted(p):
        return None
    try:
        step = builder(p)
    except (AttributeError, KeyError, TypeError):  # fields of another Ray version
        return None
    return None if step is None else [step]


def vectorise(preprocessor: Any) -> Vectorised | None:
    """The preprocessor as numpy steps, or None when it is not one of the supported, fitted kinds."""
    if preprocessor is None or not type(preprocessor).__module__.startswith("ray.data.preprocessors"):
        return None
    steps = _steps(preprocessor)
    return None if steps is None else Vectorised(steps, type(preprocessor).__name__)
