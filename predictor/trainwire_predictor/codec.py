"""Decoded input tensors -> the batch a Predictor scores, and its predictions -> the outputs asked for.

A tabular model takes one 1-D tensor per input column (``[N]`` or ``[N, 1]``),
or a single 2-D tensor ``[N, F]`` whose columns are the model's inputs in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference.codec import NUMERIC
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, datatype_name
from trainwire_predictor.models import LoadedModel


def _check_datatype(name: str, arr: np.ndarray, expected: str, field: str) -> None:
    got = datatype_name(arr.dtype)
    if (expected in NUMERIC) != (got in NUMERIC):
        raise InvalidArgumentError(f"input {name!r} has datatype {got}, but the model expects {expected}", field=field)


def to_batch(arrays: dict[str, np.ndarray], model: LoadedModel) -> dict[str, np.ndarray] | np.ndarray:
    """Matches decoded tensors to the model's inputs; returns what ``Predictor.predict`` takes."""
    if getattr(model.predictor, "takes_tensors", False):
        return _named_tensors(arrays, model)
    columns = model.columns
    specs = model.input_specs
    if len(arrays) == 1:
        name, arr = next(iter(arrays.items()))
        if not columns or (name not in specs and arr.ndim == 2):
            # One 2-D tensor of rows, columns in the model's order.
            width = len(columns) if columns else None
            if arr.ndim != 2 or (width is not None and arr.shape[1] != width):
                want = f"[N, {width}]" if width is not None else "[N, F]"
                raise InvalidArgumentError(
                    f"input {name!r} has shape {list(arr.shape)}; a single input must be a 2-D tensor {want} of rows"
                    + (f" with columns {', '.join(columns)}" if columns else ""),
                    field="inputs[0].shape",
                )
            _check_datatype(name, arr, model.inputs[0].datatype, "inputs[0].datatype")
            return arr
    if not columns:
        raise InvalidArgumentError(
            f"the model takes one 2-D input tensor; got {len(arrays)} inputs ({', '.join(arrays)})", field="inputs"
        )
    extra = [n for n in arrays if n not in specs]
    if extra:
        raise InvalidArgumentError(
            f"unexpected input(s) {', '.join(map(repr, extra))}; the model takes {', '.join(columns)}",
            field="inputs",
        )
    missing = [c for c in columns if c not in arrays]
    if missing:
        raise InvalidArgumentError(f"missing input(s): {', '.join(map(repr, missing))}", field="inputs")
    rows = None
    batch: dict[str, np.ndarray] = {}
    for i, (name, arr) in enumerate(arrays.items()):
        field = f"inputs[{i}]"
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise InvalidArgumentError(
                f"input {name!r} has shape {list(arr.shape)}; a column input must be [N] or [N, 1]",
                field=f"{field}.shape",
            )
        if rows is None:
            rows = len(arr)
        elif len(arr) != rows:
            raise InvalidArgumentError(
                f"input {name!r} has {len(arr)} rows, but other inputs have {rows}", field=f"{field}.shape"
            )
        _check_datatype(name, arr, specs[name].datatype, f"{field}.datatype")
        if arr.dtype == object:
            arr = np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in arr], dtype=object)
        batch[name] = arr
    return batch


def _named_tensors(arrays: dict[str, np.ndarray], model: LoadedModel) -> dict[str, np.ndarray]:
    """The tensors of a model of named tensors of any rank (ONNX, TorchScript), by its input names.

    A one-input model takes its one tensor under any name, as a tabular model takes its matrix.
    """
    specs = model.input_specs
    if len(arrays) == 1 and len(specs) == 1:
        return {model.inputs[0].name: next(iter(arrays.values()))}
    extra = [n for n in arrays if n not in specs]
    missing = [n for n in specs if n not in arrays]
    if extra or missing:
        raise InvalidArgumentError(
            f"the model takes inputs {', '.join(map(repr, specs))}; "
            + (f"unexpected {', '.join(map(repr, extra))}" if extra else f"missing {', '.join(map(repr, missing))}"),
            field="inputs",
        )
    for i, (name, arr) in enumerate(arrays.items()):
        _check_datatype(name, arr, specs[name].datatype, f"inputs[{i}].datatype")
    return arrays


def select_outputs(request: InferenceRequest, model: LoadedModel, columns: dict[str, np.ndarray]) -> InferenceResponse:
    """The answer to ``request``: the outputs it asked for (all when none), in its order.

    Raises:
        InvalidArgumentError: An output the model does not have (the field names it).
    """
    names = list(columns)
    if request.outputs:
        for i, name in enumerate(request.outputs):
            if name not in columns:
                raise InvalidArgumentError(
                    f"unknown output {name!r}; the model's outputs are {', '.join(names)}",
                    field=f"outputs[{i}].name",
                )
        names = request.outputs
    return InferenceResponse(
        request.model_name, model.ref.checkpoint_id, request.id, [(n, _output_array(columns[n])) for n in names]
    )


def _output_array(column: Any) -> np.ndarray:
    arr = np.asarray(column)
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)  # typed contents and JSON have no 16-bit float
    return arr
