"""ModelInferRequest -> the batch a Predictor scores, and its predictions -> ModelInferResponse.

A tabular model takes one 1-D tensor per input column (``[N]`` or ``[N, 1]``),
or a single 2-D tensor ``[N, F]`` whose columns are the model's inputs in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference.codec import NUMERIC, datatype_of, fill_contents, from_contents, from_raw, to_raw
from trainwire_predictor.model_repository import LoadedModel


def decode_inputs(request: pb.ModelInferRequest) -> tuple[dict[str, np.ndarray], bool]:
    """Decodes every input tensor; returns name -> array and whether raw contents were used."""
    inputs = request.inputs
    raw = request.raw_input_contents
    if not inputs:
        raise InvalidArgumentError("the request has no inputs", field="inputs")
    if raw and len(raw) != len(inputs):
        raise InvalidArgumentError(
            f"raw_input_contents has {len(raw)} entries for {len(inputs)} inputs; send one per input, in order",
            field="raw_input_contents",
        )
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(inputs):
        name = tensor.name
        if not name:
            raise InvalidArgumentError(f"input {i} has no name", field=f"inputs[{i}].name")
        if name in arrays:
            raise InvalidArgumentError(f"input {name!r} is given twice", field=f"inputs[{i}].name")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"input {name!r} has typed contents while the request uses raw_input_contents; "
                    "send every input one way or the other",
                    field=f"inputs[{i}].contents",
                )
            arrays[name] = from_raw(raw[i], tensor.datatype, tensor.shape, name, f"raw_input_contents[{i}]")
        else:
            arrays[name] = from_contents(tensor.contents, tensor.datatype, tensor.shape, name, f"inputs[{i}].contents")
    return arrays, bool(raw)


def _check_datatype(name: str, arr: np.ndarray, expected: str, field: str) -> None:
    got = datatype_of(arr.dtype)
    if (expected in NUMERIC) != (got in NUMERIC):
        raise InvalidArgumentError(f"input {name!r} has datatype {got}, but the model expects {expected}", field=field)


def to_batch(arrays: dict[str, np.ndarray], model: LoadedModel) -> dict[str, np.ndarray] | np.ndarray:
    """Matches decoded tensors to the model's inputs; returns what ``Predictor.predict`` takes."""
    columns = model.columns
    specs = {s.name: s for s in model.inputs}
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


def encode_response(
    request: pb.ModelInferRequest, model: LoadedModel, columns: dict[str, np.ndarray], raw: bool
) -> pb.ModelInferResponse:
    """Builds the response: raw output contents when the request was raw, typed contents otherwise."""
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version=model.ref.checkpoint_id, id=request.id
    )
    names = list(columns)
    if request.outputs:
        wanted = []
        for i, out in enumerate(request.outputs):
            if out.name not in names:
                raise InvalidArgumentError(
                    f"unknown output {out.name!r}; the model's outputs are {', '.join(names)}",
                    field=f"outputs[{i}].name",
                )
            wanted.append(out.name)
        names = wanted
    for name in names:
        arr = _output_array(columns[name])
        tensor = response.outputs.add(name=name, datatype=datatype_of(arr.dtype), shape=arr.shape)
        if raw:
            response.raw_output_contents.append(to_raw(arr))
        else:
            fill_contents(tensor.contents, arr)
    return response


def _output_array(column: Any) -> np.ndarray:
    arr = np.asarray(column)
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)  # typed contents have no FP16 field
    return arr
