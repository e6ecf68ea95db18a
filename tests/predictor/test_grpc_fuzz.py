"""Property-based: malformed ModelInferRequests never crash the predictor nor get INTERNAL."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.inference.codec import CONTENTS_FIELDS, DTYPES

pytestmark = pytest.mark.timeout(300)

CLIENT_FAULTS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
MODELS = ["pred-cancer-xgb", "pred-cancer-torch"]
COLUMNS = ["mean_radius", "mean_texture", "worst_area", "input"]

names = st.one_of(st.sampled_from(COLUMNS), st.text(max_size=8))
datatypes = st.one_of(st.sampled_from(sorted(DTYPES)), st.text(max_size=6))
shapes = st.lists(st.one_of(st.integers(-2, 6), st.integers(0, 2**62)), max_size=3)
scalars = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1),
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=6),
}


@st.composite
def contents(draw):
    msg = pb.InferTensorContents()
    for field in draw(st.lists(st.sampled_from(sorted(set(CONTENTS_FIELDS.values()))), max_size=2)):
        getattr(msg, field).extend(draw(st.lists(scalars[field], max_size=8)))
    return msg


@st.composite
def arbitrary_request(draw):
    request = pb.ModelInferRequest(
        model_name=draw(st.one_of(st.sampled_from(MODELS), st.text(max_size=6))),
        model_version=draw(st.one_of(st.just(""), st.text(max_size=4))),
    )
    for _ in range(draw(st.integers(0, 4))):
        tensor = request.inputs.add(name=draw(names), datatype=draw(datatypes), shape=draw(shapes))
        if draw(st.booleans()):
            tensor.contents.CopyFrom(draw(contents()))
    if draw(st.booleans()):
        request.raw_input_contents.extend(draw(st.lists(st.binary(max_size=64), max_size=4)))
    for name in draw(st.lists(st.sampled_from(["predictions", "x", ""]), max_size=2)):
        request.outputs.add(name=name)
    return request


@st.composite
def mutated_valid_request(draw, features):
    """A valid raw XGBoost request with one thing broken (or none)."""
    rows = draw(st.integers(0, 3))
    data = np.asarray(draw(st.lists(st.floats(allow_nan=True), min_size=rows * len(features), max_size=rows * 30)))
    data = data[: rows * len(features)].reshape(rows, len(features))
    request = pb.ModelInferRequest(model_name="pred-cancer-xgb")
    for i, col in enumerate(features):
        request.inputs.add(name=col, datatype="FP64", shape=[rows])
        request.raw_input_contents.append(np.ascontiguousarray(data[:, i]).tobytes())
    i = draw(st.integers(0, len(features) - 1))
    mutation = draw(st.sampled_from(["none", "datatype", "shape", "bytes", "drop", "dup", "typed", "name"]))
    if mutation == "datatype":
        request.inputs[i].datatype = draw(datatypes)
    elif mutation == "shape":
        request.inputs[i].shape[:] = draw(shapes)
    elif mutation == "bytes":
        request.raw_input_contents[i] = draw(st.binary(max_size=40))
    elif mutation == "drop":
        del request.inputs[i]
    elif mutation == "dup":
        request.inputs[i].name = request.inputs[(i + 1) % len(features)].name
    elif mutation == "typed":
        request.inputs[i].contents.CopyFrom(draw(contents()))
    elif mutation == "name":
        request.inputs[i].name = draw(st.text(max_size=8))
    return request


@pytest.fixture(scope="module")
def stub(predictor_address, xgb_result, torch_result):
    channel = grpc.insecure_channel(predictor_address)
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def check(stub, request):
    try:
        stub.ModelInfer(request, timeout=30)
    except grpc.RpcError as err:
        assert err.code() in CLIENT_FAULTS, (err.code(), err.details())
        assert err.details()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(request=arbitrary_request())
def test_arbitrary_requests_never_get_internal(stub, request):
    check(stub, request)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_requests_never_get_internal(stub, features, data):
    check(stub, data.draw(mutated_valid_request(features)))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=st.lists(arbitrary_request(), min_size=1, max_size=6))
def test_streams_answer_every_message(stub, requests):
    responses = list(stub.ModelStreamInfer(iter(requests), timeout=60))
    assert len(responses) == len(requests)
    for response in responses:
        if response.error_message:
            code = response.infer_response.parameters["error_code"].string_param
            assert code in {c.name for c in CLIENT_FAULTS}, (code, response.error_message)


def test_server_still_serves_after_the_fuzzing(stub):
    assert stub.ServerLive(pb.ServerLiveRequest()).live
