"""Tensor <-> numpy conversions of the Open Inference Protocol."""

from __future__ import annotations

import numpy as np
import pytest

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference.codec import DTYPES, datatype_of, fill_contents, from_contents, from_raw, to_raw

pytestmark = pytest.mark.timeout(30)

NUMERIC_CASES = [name for name in DTYPES if name != "BYTES"]


@pytest.mark.parametrize("datatype", NUMERIC_CASES)
def test_raw_round_trip(datatype):
    arr = (np.arange(12) % 2 if datatype == "BOOL" else np.arange(12)).astype(DTYPES[datatype]).reshape(3, 4)
    assert datatype_of(arr.dtype) == datatype
    back = from_raw(to_raw(arr), datatype, [3, 4])
    assert back.dtype == arr.dtype and np.array_equal(back, arr)


@pytest.mark.parametrize("datatype", [d for d in NUMERIC_CASES if d != "FP16"] + ["BYTES"])
def test_typed_round_trip(datatype):
    if datatype == "BYTES":
        arr = np.array([b"a", b"", b"xyz", b"\x00"], dtype=object).reshape(2, 2)
    else:
        arr = (np.arange(4) % 2 if datatype == "BOOL" else np.arange(4)).astype(DTYPES[datatype]).reshape(2, 2)
    contents = pb.InferTensorContents()
    fill_contents(contents, arr)
    back = from_contents(contents, datatype, [2, 2])
    assert np.array_equal(back, arr)


def test_bytes_raw_round_trip():
    arr = np.array([b"hello", b"", "wörld".encode()], dtype=object)
    assert list(from_raw(to_raw(arr), "BYTES", [3])) == list(arr)


def test_raw_reads_without_copy():
    buf = np.arange(6, dtype="<f8").tobytes()
    arr = from_raw(buf, "FP64", [2, 3])
    assert arr.base is not None and not arr.flags.writeable  # a view over the message bytes


@pytest.mark.parametrize(
    ("buf", "datatype", "shape", "needle"),
    [
        (b"\x00" * 7, "FP64", [1], "raw contents hold 7 bytes"),
        (b"\x00" * 8, "FP99", [1], "unknown datatype 'FP99'"),
        (b"\x00" * 8, "FP64", [-1], "negative dimension"),
        (b"\x05\x00\x00\x00ab", "BYTES", [1], "runs past"),
        (b"\x01\x00\x00\x00a", "BYTES", [2], "exactly 2"),
    ],
)
def test_bad_raw(buf, datatype, shape, needle):
    with pytest.raises(InvalidArgumentError, match=needle):
        from_raw(buf, datatype, shape, "x")


def test_typed_contents_must_use_the_datatypes_field():
    contents = pb.InferTensorContents(fp32_contents=[1.0])
    with pytest.raises(InvalidArgumentError, match="must use contents.fp64_contents, not contents.fp32_contents"):
        from_contents(contents, "FP64", [1], "x")
    with pytest.raises(InvalidArgumentError, match="holds 1 elements, but shape \\[2\\] needs 2"):
        from_contents(contents, "FP32", [2], "x")
    with pytest.raises(InvalidArgumentError, match="out of range for INT8"):
        from_contents(pb.InferTensorContents(int_contents=[300]), "INT8", [1], "x")
