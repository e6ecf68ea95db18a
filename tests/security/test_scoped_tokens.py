"""Named tokens with scopes: each call needs its scope, and runs record who started them."""

from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwire_core.auth import SCOPES, TokenTable, parse_tokens
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

TOKENS = {
    "alice": {"token": "alice-token", "scopes": ["submit-code", "read", "cancel"]},
    "ci": {"token": "ci-token", "scopes": ["submit", "read"]},
    "web": {"token": "web-token", "scopes": ["predict"]},
    "ops": {"token": "ops-token", "scopes": ["admin"]},
}


def test_scopes_imply_what_they_contain():
    table = parse_tokens(json.dumps(TOKENS))
    by_name = {caller.name: caller.scopes for caller in table.values()}
    assert "submit" in by_name["alice"] and "predict" not in by_name["alice"]
    assert by_name["ops"] == SCOPES
    assert by_name["web"] == {"predict"}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"a": {"token": "", "scopes": []}}),
        json.dumps({"a": {"token": "x", "scopes": ["root"]}}),
        json.dumps({"a": {"token": "x", "scopes": []}, "b": {"token": "x", "scopes": []}}),
    ],
)
def test_a_bad_tokens_table_is_refused_naming_the_setting(text):
    with pytest.raises(InvalidArgumentError) as info:
        parse_tokens(text)
    assert info.value.field == "tokens"


@given(st.text(max_size=200))
def test_any_tokens_text_is_parsed_or_refused_cleanly(text):
    try:
        parse_tokens(text)
    except InvalidArgumentError as err:
        assert err.field == "tokens"


@given(st.binary(max_size=80) | st.text(max_size=80))
def test_no_header_but_a_known_token_identifies_a_caller(value):
    table = TokenTable.from_settings("plain", json.dumps(TOKENS))
    expected = {b"Bearer plain", *(f"Bearer {t['token']}".encode() for t in TOKENS.values())}
    got = value if isinstance(value, bytes) else value.encode()
    assert (table.identify([("authorization", value)]) is not None) == (got in expected)


@pytest.fixture(scope="module")
def scoped_coordinator(ray_cluster, tmp_path_factory):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = tmp_path_factory.mktemp("scoped")
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    thread = CoordinatorThread(
        CoordinatorSettings(
            port=0, store=str(home / "store"), state=str(home / "db"), tokens=str(tokens), capacity_wait_s=0
        )
    )
    address = thread.start()
    channel = grpc.insecure_channel(address)
    yield coordinator_pb2_grpc.CoordinatorStub(channel)
    channel.close()
    thread.stop()


def _as(name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[name]['token']}")]


def _pickled_fit() -> coordinator_pb2.FitRequest:
    import cloudpickle

    def loop() -> None:
        pass

    request = coordinator_pb2.FitRequest(framework="torch", run_config=common_pb2.RunConfig(name="scoped"))
    request.scaling_config.num_workers = 1
    request.data_parallel.train_loop.pickled_function = cloudpickle.dumps(loop)
    return request


def test_a_predict_token_cannot_fit_or_list(scoped_coordinator):
    for call, request in [
        (scoped_coordinator.Fit, _pickled_fit()),
        (scoped_coordinator.ListRuns, coordinator_pb2.ListRunsRequest()),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            call(request, metadata=_as("web"))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'web'" in info.value.details() and "scope" in info.value.details()


def test_a_submit_token_cannot_send_code(scoped_coordinator):
    with pytest.raises(grpc.RpcError) as info:
        scoped_coordinator.Fit(_pickled_fit(), metadata=_as("ci"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'submit-code'" in info.value.details()


def test_a_submit_token_cannot_send_a_runtime_environment(scoped_coordinator):
    upload = coordinator_pb2.UploadPackageRequest(
        header=coordinator_pb2.UploadPackageHeader(sha256="0" * 64, size_bytes=1)
    )
    with pytest.raises(grpc.RpcError) as info:
        scoped_coordinator.UploadPackage(iter([upload]), metadata=_as("ci"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'submit-code'" in info.value.details()
    request = coordinator_pb2.FitRequest(framework="xgboost", run_config=common_pb2.RunConfig(name="env"))
    request.run_config.runtime_env.env_vars["MODE"] = "fast"
    with pytest.raises(grpc.RpcError) as info:
        scoped_coordinator.Fit(request, metadata=_as("ci"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'submit-code'" in info.value.details()


def test_an_unknown_token_is_unauthenticated(scoped_coordinator):
    with pytest.raises(grpc.RpcError) as info:
        scoped_coordinator.ListRuns(coordinator_pb2.ListRunsRequest(), metadata=[("authorization", "Bearer nope")])
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_runs_record_who_started_them_and_list_by_it(scoped_coordinator):
    run = scoped_coordinator.Fit(_pickled_fit(), metadata=_as("alice"))
    assert run.submitted_by == "alice"
    try:
        mine = scoped_coordinator.ListRuns(coordinator_pb2.ListRunsRequest(submitted_by="alice"), metadata=_as("ci"))
        assert [r.run_id for r in mine.runs] == [run.run_id]
        theirs = scoped_coordinator.ListRuns(coordinator_pb2.ListRunsRequest(submitted_by="ops"), metadata=_as("ci"))
        assert not theirs.runs
        with pytest.raises(grpc.RpcError) as info:
            scoped_coordinator.CancelRun(coordinator_pb2.CancelRunRequest(run_id=run.run_id), metadata=_as("ci"))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'cancel'" in info.value.details()
    finally:
        scoped_coordinator.CancelRun(coordinator_pb2.CancelRunRequest(run_id=run.run_id), metadata=_as("alice"))


def test_a_read_token_cannot_predict(tmp_path):
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=str(tmp_path / "store"), tokens=json.dumps(TOKENS)))
    address = thread.start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.ServerMetadata(pb.ServerMetadataRequest(), metadata=_as("ci"))
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'predict'" in info.value.details()
            assert stub.ServerLive(pb.ServerLiveRequest(), metadata=_as("web")).live
            with pytest.raises(grpc.RpcError) as info:
                stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="m"), metadata=_as("web"))
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "'admin'" in info.value.details()
    finally:
        thread.stop()


def test_any_known_token_may_ask_who_it_is_and_what_it_may_do(scoped_coordinator):
    web = scoped_coordinator.GetCaller(coordinator_pb2.GetCallerRequest(), metadata=_as("web"))
    assert (web.name, list(web.scopes)) == ("web", ["predict"])
    alice = scoped_coordinator.GetCaller(coordinator_pb2.GetCallerRequest(), metadata=_as("alice"))
    assert alice.name == "alice" and {"submit-code", "submit"} <= set(alice.scopes)  # implied ones included
    ops = scoped_coordinator.GetCaller(coordinator_pb2.GetCallerRequest(), metadata=_as("ops"))
    assert set(ops.scopes) == SCOPES
    with pytest.raises(grpc.RpcError) as info:
        scoped_coordinator.GetCaller(coordinator_pb2.GetCallerRequest(), metadata=[("authorization", "Bearer nope")])
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
