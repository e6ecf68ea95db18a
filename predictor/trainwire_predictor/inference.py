"""What every front end hands the data plane, and what it gets back: no protocol in sight.

The gRPC servicer and the REST endpoints convert their messages into an
``InferenceRequest`` whose tensors are still undecoded (raw little-endian
bytes, or the protocol's list of elements), so decoding happens where the data
plane times it (its input time), and on a worker thread for models that are
not batched. Answers come back as an ``InferenceResponse`` of numpy arrays,
which each front end encodes its own way.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference.codec import DTYPES, MAX_DIM, check_shape, datatype_of, from_raw, to_raw
from trainwire_predictor.shared_memory import SharedMemoryRef

# The datatype of a numpy dtype, looked up once per dtype (on every request and output otherwise).
datatype_name = functools.cache(datatype_of)


@dataclass(slots=True)
class InputTensor:
    """One input tensor as it arrived.

    Attributes:
        name: The tensor's name.
        datatype: Its Open Inference Protocol datatype (``FP32``, ``BYTES``, ...).
        shape: Its shape.
        data: Raw little-endian row-major bytes (BYTES elements length-prefixed), or a
            sequence of its elements (flat or nested, row-major), or where its raw bytes lie
            in a registered shared memory region (the data plane reads them before decoding).
        field: Where the data sits in the caller's request, for error messages.
    """

    name: str
    datatype: str
    shape: Sequence[int]
    data: bytes | memoryview | Sequence[Any] | SharedMemoryRef
    field: str = "inputs"

    @property
    def raw(self) -> bool:
        return isinstance(self.data, (bytes, bytearray, memoryview))


@dataclass(slots=True)
class InferenceRequest:
    """One inference request, protocol-neutral.

    Attributes:
        model_name: A run name or id.
        model_version: A checkpoint id or an alias ("" for the model's traffic policy, else
            its best, else latest checkpoint).
        id: The caller's request id, echoed back.
        inputs: The input tensors, in request order.
        outputs: The outputs asked for, by name (empty: every output).
        routing_key: The caller's sticky-routing key (the ``routing_key`` parameter or the
            ``routing-key`` header); "" for none.
        output_regions: Outputs to write into shared memory regions (name -> where), or None.
        shared_memory: Whether any input or output lies in shared memory.
    """

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[InputTensor] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    routing_key: str = ""
    output_regions: dict[str, SharedMemoryRef] | None = None
    shared_memory: bool = False


@dataclass(slots=True)
class InferenceResponse:
    """The answer to one request: output name -> array, in the order asked for.

    ``output_regions`` names the outputs already written into shared memory: front ends
    answer only their metadata (and where they lie).
    """

    model_name: str
    model_version: str
    id: str
    outputs: list[tuple[str, np.ndarray]]
    output_regions: dict[str, SharedMemoryRef] | None = None


def raw_bytes(arr: np.ndarray) -> bytes:
    """``to_raw``: raw little-endian row-major bytes, without looking the datatype up again per call."""
    dtype = arr.dtype
    if dtype.kind in "biuf" and dtype.itemsize <= 8 and dtype.byteorder in "=|<" and sys.byteorder == "little":
        return arr.tobytes()  # C order, whatever the array's strides
    return to_raw(arr)


def decode_inputs(request: InferenceRequest) -> dict[str, np.ndarray]:
    """Decodes every input tensor of a request; returns name -> array.

    Raises:
        InvalidArgumentError: No inputs, a nameless or repeated input, or data that does not
            match its shape and datatype (the field names where).
    """
    if not request.inputs:
        raise InvalidArgumentError("the request has no inputs", field="inputs")
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        name = tensor.name
        if not name:
            raise InvalidArgumentError(f"input {i} has no name", field=f"inputs[{i}].name")
        if name in arrays:
            raise InvalidArgumentError(f"input {name!r} is given twice", field=f"inputs[{i}].name")
        if tensor.raw:
            arr = _from_raw_fast(tensor.data, tensor.datatype, tensor.shape)  # type: ignore[arg-type]
            if arr is None:  # BYTES, or something wrong: the full decoder says what
                arr = from_raw(tensor.data, tensor.datatype, tensor.shape, name, tensor.field)  # type: ignore[arg-type]
            arrays[name] = arr
        else:
            arrays[name] = from_values(tensor.data, tensor.datatype, tensor.shape, name, tensor.field)  # type: ignore[arg-type]
    return arrays


def _from_raw_fast(buf: bytes | memoryview, datatype: str, shape: Sequence[int]) -> np.ndarray | None:
    """``from_raw`` of a well-formed numeric tensor, on the request path; None for anything else."""
    dtype = DTYPES.get(datatype)
    if dtype is None or datatype == "BYTES":
        return None
    dims = tuple(shape)
    if any(type(d) is not int for d in dims) or (dims and not (0 <= min(dims) and max(dims) <= MAX_DIM)):
        return None
    if len(buf) != math.prod(dims) * dtype.itemsize:
        return None
    return np.frombuffer(buf, dtype=dtype).reshape(dims)


def from_values(values: Sequence[Any], datatype: str, shape: Sequence[int], name: str, field: str) -> np.ndarray:
    """Decodes a tensor given as its elements (typed gRPC contents, or JSON data, flat or nested).

    Raises:
        InvalidArgumentError: An unknown datatype, a bad shape, the wrong number of elements, or
            elements that are not of the datatype (a string in an FP32 tensor, 1.5 in an INT32 one,
            a value out of an integer type's range).
    """
    dtype = DTYPES.get(datatype)
    if dtype is None:
        raise InvalidArgumentError(
            f"tensor {name!r} has unknown datatype {datatype!r}; use one of {', '.join(DTYPES)}", field=field
        )
    dims = check_shape(shape, name, field)
    count = math.prod(dims)
    if datatype == "BYTES":
        flat = _flatten(values)
        if any(not isinstance(v, (str, bytes)) for v in flat):
            raise InvalidArgumentError(f"tensor {name!r} of datatype BYTES holds a non-string element", field=field)
        arr = np.empty(len(flat), dtype=object)
        arr[:] = [v.encode("utf-8") if isinstance(v, str) else v for v in flat]
    else:
        try:
            arr = np.asarray(values, dtype=np.float64 if dtype.kind == "f" else None)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidArgumentError(
                f"tensor {name!r}: its data is not {datatype} elements ({exc})", field=field
            ) from None
        if arr.size and not _kind_fits(arr.dtype, dtype):
            raise InvalidArgumentError(
                f"tensor {name!r}: its data holds {arr.dtype.name} values, not {datatype}", field=field
            )
        # Narrow types travel widened (INT8 as a JSON or int32 number): check the range before casting.
        if dtype.kind in "iu" and arr.size:
            info = np.iinfo(dtype)
            if arr.min() < info.min or arr.max() > info.max:
                raise InvalidArgumentError(f"tensor {name!r}: a value is out of range for {datatype}", field=field)
        arr = arr.astype(dtype, copy=False).reshape(-1)
    if arr.size != count:
        raise InvalidArgumentError(
            f"tensor {name!r}: its data holds {arr.size} elements, but shape {list(dims)} needs {count}", field=field
        )
    return arr.reshape(dims)


def _kind_fits(got: np.dtype, want: np.dtype) -> bool:
    """Whether decoded elements of dtype ``got`` may stand for datatype ``want`` without guessing."""
    if want.kind == "b":
        return got.kind == "b"
    if want.kind in "iu":
        return got.kind in "biu"
    return got.kind in "biuf"


def _flatten(values: Any) -> list[Any]:
    """The elements of a flat or nested list, row-major."""
    if isinstance(values, (str, bytes)):
        return [values]
    out: list[Any] = []
    stack = [iter(values)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, (list, tuple)):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out
