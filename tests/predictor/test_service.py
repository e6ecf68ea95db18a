"""The predictor service over gRPC: answers equal in-process answers; bad input gets clear statuses."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np
import pandas as pd
import pytest
from conftest import commit_checkpoint

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.inference.codec import to_raw

pytestmark = pytest.mark.timeout(300)

XGB = "pred-cancer-xgb"


@pytest.fixture(scope="module")
def stub(predictor_address):
    channel = grpc.insecure_channel(predictor_address, options=[("grpc.max_send_message_length", 64 << 20)])
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def xgb_local(xgb_result):
    from trainwire.xgboost.predictor import XGBoostPredictor

    return XGBoostPredictor.from_checkpoint(xgb_result.checkpoint)


def raw_request(frame: pd.DataFrame, model: str = XGB, **kwargs) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, **kwargs)
    for col in frame.columns:
        arr = frame[col].to_numpy()
        request.inputs.add(name=col, datatype="FP64", shape=arr.shape)
        request.raw_input_contents.append(to_raw(arr))
    return request


def assert_status(stub, request, code, *needles, method="ModelInfer"):
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, method)(request)
    assert info.value.code() == code, info.value.details()
    for needle in needles:
        assert needle in info.value.details()
    return info.value


def test_unary_and_stream_equal_in_process(predictor_client, xgb_result, xgb_local, valid_x):
    expected = xgb_local.predict(valid_x)
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, valid_x), expected)
    ckpt_id = xgb_result.checkpoint.uri.rstrip("/").rsplit("/", 1)[-1]
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, valid_x, version=ckpt_id), expected)
    pd.testing.assert_frame_equal(predictor_client.predict(xgb_result.run_id, valid_x.to_numpy()), expected)
    batches = [valid_x.iloc[i : i + 40] for i in range(0, len(valid_x), 40)]
    streamed = pd.concat(list(predictor_client.stream(XGB, batches)), ignore_index=True)
    pd.testing.assert_frame_equal(streamed, expected)
    meta = predictor_client.model_metadata(XGB)
    assert meta["platform"] == "xgboost" and ckpt_id in meta["versions"]
    assert [i["name"] for i in meta["inputs"]] == list(valid_x.columns)
    assert meta["outputs"] == [{"name": "predictions", "datatype": "FP32", "shape": ["-1"]}]


def test_torch_model_takes_one_2d_tensor(predictor_client, torch_result, valid_x):
    from trainwire.torch.predictor import TorchPredictor

    x = valid_x.to_numpy(np.float32)
    local = TorchPredictor.from_checkpoint(torch_result.checkpoint)
    local.prepare_for_batches()  # as the predictor prepares a model it batches
    expected = pd.DataFrame(local.predict(x))
    pd.testing.assert_frame_equal(predictor_client.predict("pred-cancer-torch", x), expected)
    meta = predictor_client.model_metadata("pred-cancer-torch")
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "-1"]}]


def test_typed_contents_answer_typed(stub, xgb_local, valid_x):
    request = pb.ModelInferRequest(model_name=XGB, id="r1")
    for col in valid_x.columns:
        request.inputs.add(name=col, datatype="FP64", shape=[len(valid_x)]).contents.fp64_contents.extend(
            valid_x[col].tolist()
        )
    response = stub.ModelInfer(request)
    assert response.id == "r1" and not response.raw_output_contents
    got = np.array(response.outputs[0].contents.fp32_contents, dtype=np.float32)
    np.testing.assert_array_equal(got, xgb_local.predict(valid_x)["predictions"].to_numpy())


def test_bad_input_gets_clear_statuses(stub, xgb_result, valid_x):
    rows = valid_x.head(4)
    code = grpc.StatusCode
    assert_status(stub, raw_request(rows, "no-such-model"), code.NOT_FOUND, "model 'no-such-model' not found")
    assert_status(stub, raw_request(rows, model_version="nope"), code.NOT_FOUND, "has no version 'nope'")
    # Wrong datatype.
    req = raw_request(rows)
    req.inputs[0].datatype = "BYTES"
    req.raw_input_contents[0] = to_raw(np.array([b"a", b"b", b"c", b"d"], dtype=object))
    assert_status(stub, req, code.INVALID_ARGUMENT, "input 'mean_radius' has datatype BYTES", "expects FP64")
    req = raw_request(rows)
    req.inputs[0].datatype = "FP99"
    assert_status(stub, req, code.INVALID_ARGUMENT, "tensor 'mean_radius' has unknown datatype 'FP99'")
    # Wrong shape.
    req = raw_request(rows)
    req.inputs[1].shape[:] = [2, 2]
    assert_status(stub, req, code.INVALID_ARGUMENT, "input 'mean_texture' has shape [2, 2]", "[N] or [N, 1]")
    req = raw_request(rows)
    req.inputs[1].shape[:] = [2]
    req.raw_input_contents[1] = req.raw_input_contents[1][:16]
    assert_status(stub, req, code.INVALID_ARGUMENT, "input 'mean_texture' has 2 rows, but other inputs have 4")
    # Missing and extra inputs.
    assert_status(stub, raw_request(rows.drop(columns=["worst_area"])), code.INVALID_ARGUMENT, "missing input(s)")
    assert_status(stub, raw_request(rows.assign(extra=1.0)), code.INVALID_ARGUMENT, "unexpected input(s) 'extra'")
    # Raw contents of the wrong byte length.
    req = raw_request(rows)
    req.raw_input_contents[2] = req.raw_input_contents[2][:-1]
    assert_status(stub, req, code.INVALID_ARGUMENT, "tensor 'mean_perimeter': raw contents hold 31 bytes", "needs 32")
    # Raw and typed contents mixed.
    req = raw_request(rows)
    req.inputs[3].contents.fp64_contents.extend([1.0] * 4)
    assert_status(stub, req, code.INVALID_ARGUMENT, "input 'mean_area' has typed contents", "raw_input_contents")
    # No inputs at all; an unknown output.
    assert_status(stub, pb.ModelInferRequest(model_name=XGB), code.INVALID_ARGUMENT, "no inputs")
    req = raw_request(rows)
    req.outputs.add(name="probabilities")
    assert_status(stub, req, code.INVALID_ARGUMENT, "unknown output 'probabilities'")


def test_rejected_fields_travel_as_bad_request(predictor_client, valid_x):
    from trainwire_core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="unexpected input") as err:
        predictor_client.predict(XGB, valid_x.assign(extra=1.0))
    assert err.value.field == "inputs"


def test_request_over_the_size_limit_is_resource_exhausted(stub, xgb_result):
    big = np.zeros((5 * 1024 * 1024) // 8, dtype=np.float64)  # 5 MiB; the predictor takes 4 MiB
    req = pb.ModelInferRequest(model_name=XGB)
    req.inputs.add(name="mean_radius", datatype="FP64", shape=big.shape)
    req.raw_input_contents.append(big.tobytes())
    err = assert_status(stub, req, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "larger than max" in err.details() or "exceeds" in err.details().lower() or err.details()
    assert stub.ServerLive(pb.ServerLiveRequest()).live


def test_stream_reports_errors_per_message_and_goes_on(stub, xgb_local, valid_x):
    rows = valid_x.head(5)
    bad = raw_request(rows.drop(columns=["mean_radius"]), id="bad")
    requests = [
        raw_request(rows, id="a"),
        bad,
        raw_request(rows, model="no-such-model", id="c"),
        raw_request(rows, id="d"),
    ]
    responses = list(stub.ModelStreamInfer(iter(requests)))
    assert [r.infer_response.id for r in responses] == ["a", "bad", "c", "d"]
    assert [bool(r.error_message) for r in responses] == [False, True, True, False]
    assert "missing input(s): 'mean_radius'" in responses[1].error_message
    assert responses[1].infer_response.parameters["error_code"].string_param == "INVALID_ARGUMENT"
    assert responses[2].infer_response.parameters["error_code"].string_param == "NOT_FOUND"
    expected = xgb_local.predict(rows)["predictions"].to_numpy()
    got = np.frombuffer(responses[3].infer_response.raw_output_contents[0], dtype="<f4")
    np.testing.assert_array_equal(got, expected)


def test_corrupt_checkpoint_names_the_model_and_others_keep_serving(stub, store, predictor_client, valid_x):
    bad = tempfile.mkdtemp()
    with open(os.path.join(bad, "model.ubj"), "wb") as f:
        f.write(b"garbage")
    commit_checkpoint(store, "pred-broken-run", "pred-broken", "c1", bad)
    assert_status(
        stub, raw_request(valid_x.head(2), "pred-broken"), grpc.StatusCode.FAILED_PRECONDITION, "'pred-broken'"
    )
    assert not stub.ModelReady(pb.ModelReadyRequest(name="pred-broken")).ready
    assert len(predictor_client.predict(XGB, valid_x.head(2))) == 2


def test_two_predictors_serve_a_checkpoint_committed_after_they_started(
    store, predictor, local_booster, valid_x, tmp_path
):
    """The session's predictor (in this process) and a second predictor process share only the store."""
    from trainwire.predictor_client import PredictorClient
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    log_path = tmp_path / "second.log"
    second = subprocess.Popen(
        [sys.executable, "-m", "trainwire_predictor", "--port", "0", "--store", store.uri, "--index-refresh-s", "0.2"],
        stdout=subprocess.PIPE,
        stderr=open(log_path, "w"),  # noqa: SIM115 - the process owns it
        text=True,
    )
    try:
        address = second.stdout.readline().rsplit(" ", 1)[-1].strip()
        clients = [PredictorClient(predictor.server.address), PredictorClient(address)]
        ckpt = XGBoostCheckpoint.from_model(local_booster)
        manager = commit_checkpoint(store, "pred-late-run", "pred-late", "c1", ckpt.path, 1)
        expected = XGBoostPredictor.from_checkpoint(ckpt).predict(valid_x)
        for c in clients:
            for _ in range(3):
                pd.testing.assert_frame_equal(c.predict("pred-late", valid_x), expected)
        # A newer checkpoint becomes the default within the refresh age.
        commit_checkpoint(store, "pred-late-run", "pred-late", "c2", ckpt.path, 2, manager=manager)
        deadline = time.monotonic() + 5
        for c in clients:
            while c.model_metadata("pred-late")["versions"] != ["c1", "c2"] and time.monotonic() < deadline:
                time.sleep(0.05)
            c.predict("pred-late", valid_x)
            c.predict("pred-late", valid_x)
        # Each predictor loaded each checkpoint exactly once, however often it was asked.
        assert predictor.models.loads[("pred-late-run", "c1")] == 1
        assert predictor.models.loads[("pred-late-run", "c2")] == 1
        for c in clients:
            c.close()
    finally:
        second.terminate()
        second.wait(30)
    log = log_path.read_text()
    assert log.count("loaded model pred-late (run pred-late-run) version c1 ") == 1, log
    assert log.count("loaded model pred-late (run pred-late-run) version c2 ") == 1, log


def test_health_reflection_and_repository(predictor_address, stub, xgb_result):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    channel = grpc.insecure_channel(predictor_address)
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    (answer,) = refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    assert "inference.GRPCInferenceService" in {s.name for s in answer.list_services_response.service}
    channel.close()
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert stub.ServerMetadata(pb.ServerMetadataRequest()).name == "trainwire-predictor"
    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=XGB))
    index = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models
    assert any(m.name == XGB and m.state == "READY" for m in index)
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=XGB))
    index = stub.RepositoryIndex(pb.RepositoryIndexRequest()).models
    assert all(m.state == "UNAVAILABLE" for m in index if m.name == XGB)


def test_predict_cli(predictor_address, xgb_local, valid_x, tmp_path):
    from trainwire.predictor_client import predict_main

    src, out = tmp_path / "in.parquet", tmp_path / "out.csv"
    valid_x.to_parquet(src)
    assert (
        predict_main(["--address", predictor_address, "--model", XGB, "--input", str(src), "--output", str(out)]) == 0
    )
    got = pd.read_csv(out)
    np.testing.assert_allclose(got["predictions"], xgb_local.predict(valid_x)["predictions"], rtol=1e-6)
    assert predict_main(["--address", predictor_address, "--model", "no-such", "--input", str(src)]) == 1


def test_python_m_trainwire_predictor_prints_its_address(store):
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwire_predictor", "--port", "0", "--store", store.uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("trainwire predictor listening on 127.0.0.1:")
        from trainwire.predictor_client import PredictorClient

        with PredictorClient(line.rsplit(" ", 1)[1].strip()) as c:
            assert c.is_server_live()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("config", ["unary.json", "stream.json"])
def test_ghz_configs_hold_valid_requests(stub, config, xgb_local, valid_x):
    """The bench/ghz data parse as ModelInferRequests the predictor answers (model renamed)."""
    import json
    from pathlib import Path

    from google.protobuf import json_format

    path = Path(__file__).resolve().parents[2] / "bench" / "ghz" / config
    spec = json.loads(path.read_text())
    messages = spec["data"] if isinstance(spec["data"], list) else [spec["data"]]
    assert spec["call"].startswith("inference.GRPCInferenceService.")
    for message in messages:
        request = json_format.ParseDict(message, pb.ModelInferRequest())
        assert request.model_name == "cancer"
        request.model_name = XGB
        response = stub.ModelInfer(request)
        rows = np.array(request.inputs[0].contents.fp64_contents).reshape(list(request.inputs[0].shape))
        expected = xgb_local.predict(rows)
        np.testing.assert_array_equal(np.array(response.outputs[0].contents.fp32_contents, dtype=np.float32), expected)


def test_concurrent_requests_batched_answer_each_its_own(stub, xgb_local, valid_x):
    """Concurrent requests scored together get exactly their own rows back; a bad one errs alone."""
    batches = [valid_x.iloc[i : i + 7 + i % 5] for i in range(0, 120, 10)]
    calls = [stub.ModelInfer.future(raw_request(b, id=str(i))) for i, b in enumerate(batches)]
    bad = stub.ModelInfer.future(raw_request(valid_x.head(3).drop(columns=["mean_area"])))
    for i, (call, batch) in enumerate(zip(calls, batches)):
        response = call.result(timeout=30)
        assert response.id == str(i)
        got = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
        np.testing.assert_array_equal(got, xgb_local.predict(batch)["predictions"].to_numpy())
    with pytest.raises(grpc.RpcError) as err:
        bad.result(timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_an_uploaded_checkpoint_is_served_under_its_run_name(client, predictor_client, local_booster, valid_x):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    ckpt = XGBoostCheckpoint.from_model(local_booster)
    client.upload_checkpoint(ckpt.path, "pred-uploaded")
    expected = XGBoostPredictor.from_checkpoint(ckpt).predict(valid_x)
    pd.testing.assert_frame_equal(predictor_client.predict("pred-uploaded", valid_x), expected)


@pytest.mark.parametrize("name", ["\x00", "../pred-cancer", "a/b", "..", "x" * 300])
def test_model_names_that_are_no_run_are_not_found(stub, name):
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(pb.ModelInferRequest(model_name=name))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "not found" in info.value.details()
