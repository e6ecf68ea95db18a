"""Tensors of the Open Inference Protocol <-> numpy arrays.

Raw contents are little-endian, row-major bytes read with ``numpy.frombuffer``
(no per-element Python work, except BYTES, whose elements each carry a 4-byte
length prefix). Typed contents use the ``InferTensorContents`` field of the
datatype.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError

# Datatype name -> numpy dtype (little-endian), as in the KServe v2 protocol.
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}

# Datatype name -> the InferTensorContents field that carries it typed (FP16: raw only).
CONTENTS_FIELDS: dict[str, str] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

NUMERIC = frozenset(DTYPES) - {"BYTES"}
# Larger dimensions cannot be real (a message is at most 2 GiB), and numpy cannot shape them.
MAX_DIM = 1 << 31
_LEN = struct.Struct("<I")


def datatype_of(dtype: np.dtype) -> str:
    """The protocol datatype of a numpy dtype (strings and objects are BYTES)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return "BYTES"
    for name, candidate in DTYPES.items():
        if name != "BYTES" and candidate == dtype.newbyteorder("<"):
            return name
    raise InvalidArgumentError(f"numpy dtype {dtype} has no Open Inference Protocol datatype", field="datatype")


def check_shape(shape: Any, name: str, field: str) -> tuple[int, ...]:
    """Validates a tensor shape (non-negative dims) and returns it as a tuple."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"tensor {name!r} has a negative dimension in shape {list(dims)}", field=field)
    if any(d > MAX_DIM for d in dims):
        raise InvalidArgumentError(f"tensor {name!r} has a dimension over {MAX_DIM} in shape {list(dims)}", field=field)
    return dims


def _check_datatype(datatype: str, name: str, field: str) -> np.dtype:
    try:
        return DTYPES[datatype]
    except KeyError:
        raise InvalidArgumentError(
            f"tensor {name!r} has unknown datatype {datatype!r}; use one of {', '.join(DTYPES)}", field=field
        ) from None


def from_raw(buf: bytes, datatype: str, shape: Any, name: str = "", field: str = "raw_input_contents") -> np.ndarray:
    """Decodes raw tensor bytes; the byte length must match shape and datatype."""
    dtype = _check_datatype(datatype, name, field)
    dims = check_shape(shape, name, field)
    count = math.prod(dims)
    if datatype == "BYTES":
        return _bytes_from_raw(buf, dims, count, name, field)
    expected = count * dtype.itemsize
    if len(buf) != expected:
        raise InvalidArgumentError(
            f"tensor {name!r}: raw contents hold {len(buf)} bytes, but shape {list(dims)} of {datatype} "
            f"needs {expected}",
            field=field,
        )
    return np.frombuffer(buf, dtype=dtype).reshape(dims)


def _bytes_from_raw(buf: bytes, dims: tuple[int, ...], count: int, name: str, field: str) -> np.ndarray:
    items: list[bytes] = []
    view = memoryview(buf)
    pos = 0
    # Each element is length-prefixed, so walking them one by one is unavoidable.
    while pos < len(buf) and len(items) <= count:
        if pos + 4 > len(buf):
            break
        (size,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + size > len(buf):
            raise InvalidArgumentError(f"tensor {name!r}: a BYTES element runs past the raw contents", field=field)
        items.append(bytes(view[pos : pos + size]))
        pos += size
    if len(items) != count or pos != len(buf):
        raise InvalidArgumentError(
            f"tensor {name!r}: raw BYTES contents do not hold exactly {count} length-prefixed elements "
            f"for shape {list(dims)}",
            field=field,
        )
    arr = np.empty(count, dtype=object)
    arr[:] = items
    return arr.reshape(dims)


def to_raw(arr: np.ndarray) -> bytes:
    """Encodes an array as raw little-endian row-major bytes (BYTES: length-prefixed)."""
    arr = np.asarray(arr)
    if datatype_of(arr.dtype) == "BYTES":
        parts = []
        for item in arr.ravel():
            data = item if isinstance(item, bytes) else str(item).encode()
            parts.append(_LEN.pack(len(data)))
            parts.append(data)
        return b"".join(parts)
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


def from_contents(contents: Any, datatype: str, shape: Any, name: str = "", field: str = "contents") -> np.ndarray:
    """Decodes typed ``InferTensorContents``; only the datatype's own field may be set."""
    dtype = _check_datatype(datatype, name, field)
    dims = check_shape(shape, name, field)
    own = CONTENTS_FIELDS.get(datatype)
    if own is None:
        raise InvalidArgumentError(
            f"tensor {name!r}: {datatype} has no typed contents field; send it in raw_input_contents", field=field
        )
    others = [f.name for f, _ in contents.ListFields() if f.name != own]
    if others:
        raise InvalidArgumentError(
            f"tensor {name!r} of datatype {datatype} must use contents.{own}, not contents.{others[0]}", field=field
        )
    values = getattr(contents, own)
    count = math.prod(dims)
    if len(values) != count:
        raise InvalidArgumentError(
            f"tensor {name!r}: contents.{own} holds {len(values)} elements, but shape {list(dims)} needs {count}",
            field=field,
        )
    if datatype == "BYTES":
        arr = np.empty(count, dtype=object)
        arr[:] = list(values)
        return arr.reshape(dims)
    # Narrow types travel widened (INT8 in int_contents): check the range before casting.
    wide = np.array(values, dtype=np.float64 if dtype.kind == "f" else None)
    if dtype.kind in "iu" and wide.size and (wide.min() < np.iinfo(dtype).min or wide.max() > np.iinfo(dtype).max):
        raise InvalidArgumentError(f"tensor {name!r}: a value is out of range for {datatype}", field=field)
    return wide.astype(dtype, copy=False).reshape(dims)


def fill_contents(contents: Any, arr: np.ndarray) -> None:
    """Writes an array into the typed ``InferTensorContents`` field of its datatype."""
    datatype = datatype_of(arr.dtype)
    own = CONTENTS_FIELDS.get(datatype)
    if own is None:  # FP16: widen, as typed contents have no 16-bit float field
        contents.fp32_contents.extend(arr.astype(np.float32).ravel().tolist())
        return
    flat = arr.ravel()
    if datatype == "BYTES":
        getattr(contents, own).extend(x if isinstance(x, bytes) else str(x).encode() for x in flat)
    else:
        getattr(contents, own).extend(flat.tolist())
