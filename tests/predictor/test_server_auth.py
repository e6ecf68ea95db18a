"""A predictor with ``auth_token``: inference calls need the bearer token; health and reflection stay open."""

from __future__ import annotations

import grpc
import numpy as np
import pandas as pd
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from serving_fixtures import commit_checkpoint

from trainwire_core.errors import UnauthenticatedError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(120)

TOKEN = "pred-s3cret"
MODEL = "auth-model"


@pytest.fixture(scope="module")
def secured(tmp_path_factory, local_booster, monkeypatch_module):
    """A predictor whose token comes from TRAINWIRE_PREDICTOR_AUTH_TOKEN, serving one model."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    root = tmp_path_factory.mktemp("auth")
    store = Store(str(root / "store"))
    commit_checkpoint(store, "run-auth", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path)
    monkeypatch_module.setenv("TRAINWIRE_PREDICTOR_AUTH_TOKEN", TOKEN)
    settings = PredictorSettings(port=0, store=store.uri)
    assert settings.auth_token == TOKEN
    thread = PredictorThread(settings)
    thread.start()
    yield thread.server.address
    thread.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def channel(secured):
    with grpc.insecure_channel(secured) as ch:
        yield ch


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def code_of(call, *args, **kwargs) -> grpc.StatusCode:
    try:
        call(*args, **kwargs)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("method", ["ServerLive", "ServerReady", "ServerMetadata", "RepositoryIndex"])
def test_no_token_and_wrong_token_are_unauthenticated(channel, method):
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    request = getattr(pb, f"{method}Request")()
    call = getattr(stub, method)
    assert code_of(call, request, timeout=10) == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(call, request, timeout=10, metadata=bearer("wrong")) == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(call, request, timeout=10, metadata=(("authorization", TOKEN),)) == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(call, request, timeout=10, metadata=bearer(TOKEN)) == grpc.StatusCode.OK


def test_unauthenticated_message_says_what_is_missing(channel):
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
    assert "authorization: Bearer <token>" in info.value.details()


def test_stream_needs_the_token_too(channel, valid_x):
    from trainwire.predictor_client import encode_request

    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    request = encode_request(MODEL, valid_x.iloc[:3])
    with pytest.raises(grpc.RpcError) as info:
        list(stub.ModelStreamInfer(iter([request]), timeout=10))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    answers = list(stub.ModelStreamInfer(iter([request]), timeout=30, metadata=bearer(TOKEN)))
    assert len(answers) == 1 and not answers[0].error_message


def test_health_and_reflection_stay_open(channel):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "inference.GRPCInferenceService"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    assert "inference.GRPCInferenceService" in set(ProtoReflectionDescriptorDatabase(channel).get_services())


def test_predictor_client_sends_the_token(secured, local_booster, valid_x):
    from trainwire.predictor_client import PredictorClient

    with PredictorClient(secured, timeout_s=10) as anonymous:
        with pytest.raises(UnauthenticatedError):
            anonymous.is_server_live()
        with pytest.raises(UnauthenticatedError):
            anonymous.predict(MODEL, valid_x.iloc[:5])
    with PredictorClient(secured, timeout_s=10, token="wrong") as wrong:
        with pytest.raises(UnauthenticatedError):
            wrong.is_model_ready(MODEL)
    with PredictorClient(secured, timeout_s=30, token=TOKEN) as client:
        assert client.is_server_live() and client.is_model_ready(MODEL)
        out = client.predict(MODEL, valid_x.iloc[:5])
        expected = local_booster.inplace_predict(valid_x.iloc[:5].to_numpy())
        np.testing.assert_allclose(out["predictions"].to_numpy(), expected, rtol=1e-6)
        streamed = pd.concat(list(client.stream(MODEL, [valid_x.iloc[:2], valid_x.iloc[2:5]])), ignore_index=True)
        pd.testing.assert_frame_equal(streamed, out)


def test_no_token_set_means_open(tmp_path):
    from trainwire.predictor_client import PredictorClient
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=str(tmp_path / "store"), auth_token=""))
    address = thread.start()
    try:
        with PredictorClient(address, timeout_s=10) as client:
            assert client.is_server_live()
    finally:
        thread.stop()
