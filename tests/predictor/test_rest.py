"""The Open Inference Protocol over REST: tritonclient.http, curl and Node's fetch get what gRPC gets.

One predictor process serves both protocols from one data plane (``rest_predictor``
in conftest.py): a tree model, a torch MLP and a Transformers text model (BYTES).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import REST_MAX_BODY, REST_TOKEN, commit_checkpoint
from tls_fixtures import PKI

from trainwire_core import errors
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.inference.codec import DTYPES, from_raw, to_raw
from trainwire_core.storage import Store
from trainwire_predictor.http import http_status
from trainwire_predictor.rest.endpoints import infer_path_params

pytestmark = pytest.mark.timeout(180)

FETCH = Path(__file__).with_name("rest_fetch.mjs")
TEXTS = ["a great film", "I hated it", "wooden acting", "truly superb"]


def model_inputs(name: str, valid_x) -> dict[str, np.ndarray]:
    rows = valid_x.to_numpy()[:5]
    if name == "rest-xgb":
        return {"input": rows.astype(np.float64)}
    if name == "rest-torch":
        return {"input": rows.astype(np.float32)}
    return {"text": np.array([t.encode() for t in TEXTS], dtype=object)}


def datatype(arr: np.ndarray) -> str:
    return "BYTES" if arr.dtype == object else {np.float64: "FP64", np.float32: "FP32"}[arr.dtype.type]


def as_bytes(arr: np.ndarray) -> np.ndarray:
    """BYTES answers come back as str from JSON and as bytes from binary data: compare them as bytes."""
    if arr.dtype.kind in "OU":
        return np.array([v.encode() if isinstance(v, str) else v for v in arr.ravel()], dtype=object).reshape(arr.shape)
    return arr


def grpc_infer(address: str, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The gRPC answer (raw contents), the reference every REST client must match."""
    request = pb.ModelInferRequest(model_name=model)
    for name, arr in inputs.items():
        request.inputs.add(name=name, datatype=datatype(arr), shape=arr.shape)
        request.raw_input_contents.append(to_raw(arr))
    with grpc.insecure_channel(address) as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
    return {
        out.name: from_raw(raw, out.datatype, out.shape)
        for out, raw in zip(response.outputs, response.raw_output_contents)
    }


def json_body(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    tensors = []
    for name, arr in inputs.items():
        data = [v.decode() for v in arr.ravel()] if arr.dtype == object else arr.tolist()  # nested rows
        tensors.append({"name": name, "datatype": datatype(arr), "shape": list(arr.shape), "data": data})
    return {"id": "json-1", "inputs": tensors}


def from_json_outputs(doc: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for tensor in doc["outputs"]:
        dtype = DTYPES[tensor["datatype"]]
        data = np.array(tensor["data"], dtype=object if tensor["datatype"] == "BYTES" else dtype)
        out[tensor["name"]] = as_bytes(data.reshape(tensor["shape"]))
    return out


def curl(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    args = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}"]
    for key, value in (headers or {}).items():
        args += ["-H", f"{key}: {value}"]
    if body is not None:
        args += ["--data-binary", "@-"]
    proc = subprocess.run([*args, url], input=body or b"", capture_output=True, timeout=60, check=True)
    text, _, status = proc.stdout.rpartition(b"\n")
    return int(status), text


def node_fetch(method: str, url: str, body: dict | None, tmp_path: Path) -> tuple[int, Any]:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    args = ["node", str(FETCH), method, url]
    if body is not None:
        (tmp_path / "body.json").write_text(json.dumps(body))
        args.append(str(tmp_path / "body.json"))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer["status"], answer["body"]


@pytest.fixture(scope="module")
def http(rest_predictor) -> str:
    return f"http://{rest_predictor.http_address}"


@pytest.mark.parametrize("model", ["rest-xgb", "rest-torch", "rest-text"])
def test_every_rest_client_gets_the_grpc_answer(rest_predictor, http, valid_x, model, tmp_path):
    import tritonclient.http as httpclient

    inputs = model_inputs(model, valid_x)
    expected = grpc_infer(rest_predictor.address, model, inputs)
    assert expected and all(len(v) == len(next(iter(inputs.values()))) for v in expected.values())

    client = httpclient.InferenceServerClient(rest_predictor.http_address)
    for binary in (True, False):
        tensors = []
        for name, arr in inputs.items():
            tensor = httpclient.InferInput(name, list(arr.shape), datatype(arr))
            tensor.set_data_from_numpy(arr, binary_data=binary)
            tensors.append(tensor)
        # Binary on: no outputs named, so every output comes back as binary data (tritonclient's default).
        outputs = None if binary else [httpclient.InferRequestedOutput(n, binary_data=False) for n in expected]
        result = client.infer(model, tensors, outputs=outputs, request_id=f"tc-{binary}")
        answer = result.get_response()
        assert answer["model_version"] == "c1" and answer["id"] == f"tc-{binary}"
        assert all(("parameters" in o) == binary for o in answer["outputs"]), answer
        for name, arr in expected.items():
            np.testing.assert_array_equal(as_bytes(result.as_numpy(name)), as_bytes(arr), err_msg=f"{binary} {name}")

    body = json_body(inputs)
    status, text = curl("POST", f"{http}/v2/models/{model}/infer", json.dumps(body).encode())
    assert status == 200, text
    got = from_json_outputs(json.loads(text))
    assert got.keys() == expected.keys()
    for name, arr in expected.items():
        np.testing.assert_array_equal(got[name], as_bytes(arr), err_msg=f"curl {name}")

    status, doc = node_fetch("POST", f"{http}/v2/models/{model}/versions/c1/infer", body, tmp_path)
    assert status == 200 and doc["id"] == "json-1" and doc["model_version"] == "c1"
    got = from_json_outputs(doc)
    for name, arr in expected.items():
        np.testing.assert_array_equal(got[name], as_bytes(arr), err_msg=f"node {name}")


def test_curl_sends_binary_tensor_data_with_the_header_length(rest_predictor, http, valid_x):
    inputs = model_inputs("rest-torch", valid_x)
    expected = grpc_infer(rest_predictor.address, "rest-torch", inputs)
    raw = to_raw(inputs["input"])
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "datatype": "FP32",
                    "shape": list(inputs["input"].shape),
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "predictions", "parameters": {"binary_data": True}}],
        }
    ).encode()
    status, body = curl(
        "POST",
        f"{http}/v2/models/rest-torch/infer",
        head + raw,
        {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"},
    )
    assert status == 200
    # The answer is laid out the same way: its JSON, then each binary output.
    doc, _, blob = body.partition(b"}]}")
    answer = json.loads(doc + b"}]}")
    (out,) = answer["outputs"]
    assert out["parameters"]["binary_data_size"] == len(blob)
    np.testing.assert_array_equal(from_raw(blob, out["datatype"], out["shape"]), expected["predictions"])


def test_metadata_readiness_and_repository_match_grpc(rest_predictor, http, tmp_path):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(rest_predictor.http_address)
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "trainwire-predictor" and "binary_tensor_data" in meta["extensions"]
    with grpc.insecure_channel(rest_predictor.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        reference = stub.ModelMetadata(pb.ModelMetadataRequest(name="rest-text"), timeout=60)
        index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=60)
    got = client.get_model_metadata("rest-text")
    assert got["platform"] == reference.platform == "huggingface"
    assert [(i["name"], i["datatype"], i["shape"]) for i in got["inputs"]] == [
        (i.name, i.datatype, list(i.shape)) for i in reference.inputs
    ]
    assert [o["name"] for o in got["outputs"]] == [o.name for o in reference.outputs]
    assert client.is_model_ready("rest-xgb") and client.is_model_ready("rest-xgb", "c1")
    assert not client.is_model_ready("no-such-model") and not client.is_model_ready("rest-xgb", "c9")
    rest_index = client.get_model_repository_index()
    assert sorted((m["name"], m["version"], m["state"]) for m in rest_index) == sorted(
        (m.name, m.version, m.state) for m in index.models
    )
    client.unload_model("rest-xgb")
    states = {m["name"]: m["state"] for m in client.get_model_repository_index()}
    assert states["rest-xgb"] == "UNAVAILABLE"
    client.load_model("rest-xgb")
    assert {m["name"]: m["state"] for m in client.get_model_repository_index()}["rest-xgb"] == "READY"
    # One version, as Triton's parameters name it; an unknown one is 404.
    unload = f"{http}/v2/repository/models/rest-xgb/unload"
    status, text = curl("POST", unload, json.dumps({"parameters": {"version": "c9"}}).encode())
    assert status == 404 and "no version 'c9'" in json.loads(text)["error"]
    assert curl("POST", unload, json.dumps({"parameters": {"version": "c1"}}).encode())[0] == 200
    assert {m["name"]: m["state"] for m in client.get_model_repository_index()}["rest-xgb"] == "UNAVAILABLE"
    client.load_model("rest-xgb")
    status, doc = node_fetch("GET", f"{http}/v2/models/rest-torch", None, tmp_path)
    assert status == 200 and doc["versions"] == ["c1"] and doc["platform"] == "pytorch"


def test_errors_are_json_with_the_matching_status(http, valid_x):
    good = json_body(model_inputs("rest-xgb", valid_x))
    cases = [
        ("POST", "/v2/models/no-such-model/infer", good, 404, "model 'no-such-model' not found"),
        ("POST", "/v2/models/rest-xgb/versions/c9/infer", good, 404, "no version 'c9'"),
        ("GET", "/v2/models/no-such-model", None, 404, "not found"),
        ("GET", "/v2/no/such/route", None, 404, "no route /v2/no/such/route"),
        ("DELETE", "/v2/models/rest-xgb", None, 405, "DELETE is not allowed"),
        ("POST", "/v2/models/rest-xgb/infer", {"inputs": "x"}, 400, "inputs list"),
    ]
    bad_shape = json_body(model_inputs("rest-xgb", valid_x))
    bad_shape["inputs"][0]["shape"] = [5, 29]
    cases.append(("POST", "/v2/models/rest-xgb/infer", bad_shape, 400, "needs 145"))
    bad_type = json_body(model_inputs("rest-xgb", valid_x))
    bad_type["inputs"][0]["data"][0][0] = "abc"
    cases.append(("POST", "/v2/models/rest-xgb/infer", bad_type, 400, "not FP64 elements"))
    unknown_output = dict(good, outputs=[{"name": "nope"}])
    cases.append(("POST", "/v2/models/rest-xgb/infer", unknown_output, 400, "unknown output 'nope'"))
    for method, path, body, status, says in cases:
        got, text = curl(method, f"{http}{path}", None if body is None else json.dumps(body).encode())
        assert got == status, (path, text)
        assert says in json.loads(text)["error"], (path, text)
    got, text = curl("POST", f"{http}/v2/models/rest-xgb/infer", b"x" * (REST_MAX_BODY + 1))
    assert got == 413 and "over the limit" in json.loads(text)["error"]


def test_every_error_code_has_one_http_status():
    expected = {
        errors.InvalidArgumentError: 400,
        errors.FailedPreconditionError: 400,
        errors.UnauthenticatedError: 401,
        errors.PermissionDeniedError: 403,
        errors.NotFoundError: 404,
        errors.AlreadyExistsError: 409,
        errors.ResourceExhaustedError: 429,
        errors.UnavailableError: 503,
        errors.DataLossError: 500,
        errors.TrainwireError: 500,
    }
    assert {cls: http_status(cls("x")) for cls in expected} == expected


def test_statistics_and_metrics_count_rest_requests(rest_predictor, http, valid_x):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(rest_predictor.http_address)
    (before,) = client.get_inference_statistics("rest-torch")["model_stats"]
    body = json.dumps(json_body(model_inputs("rest-torch", valid_x))).encode()
    for _ in range(3):
        assert curl("POST", f"{http}/v2/models/rest-torch/infer", body)[0] == 200
    bad = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}).encode()
    assert curl("POST", f"{http}/v2/models/rest-torch/infer", bad)[0] == 400
    (after,) = client.get_inference_statistics("rest-torch", "c1")["model_stats"]
    assert after["inference_count"] - before.get("inference_count", 0) == 15
    stats, was = after["inference_stats"], before["inference_stats"]
    assert stats["success"]["count"] - was["success"]["count"] == 3
    assert stats["fail"]["count"] - was["fail"]["count"] == 1
    assert stats["compute_output"]["ns"] > was["compute_output"]["ns"]
    # The gRPC statistics are the same figures.
    with grpc.insecure_channel(rest_predictor.address) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
            pb.ModelStatisticsRequest(name="rest-torch", version="c1"), timeout=30
        )
    assert reply.model_stats[0].inference_stats.success.count == stats["success"]["count"]
    url = f"http://{rest_predictor.metrics_address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        metrics = response.read().decode()
    line = 'nv_inference_request_failure_total{model="rest-torch",version="1"}'  # c1's number
    assert f"{line} {float(stats['fail']['count'])}" in metrics


@pytest.fixture(scope="module")
def secured(tmp_path_factory, local_booster):
    """A predictor with named tokens (one may only predict) and TLS on both protocols."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    root = tmp_path_factory.mktemp("rest-secured")
    pki = PKI(root)
    store = Store(str(root / "store"))
    commit_checkpoint(store, "run-sec", "sec-xgb", "c1", XGBoostCheckpoint.from_model(local_booster).path)
    tokens = {"caller": {"token": "predict-only", "scopes": ["predict"]}}
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            auth_token=REST_TOKEN,
            tokens=json.dumps(tokens),
            tls_cert=pki.server[0],
            tls_key=pki.server[1],
        )
    )
    thread.start()
    yield thread.server, pki
    thread.stop()


def test_tokens_scopes_and_tls_are_the_grpc_ones(secured):
    server, pki = secured
    https = f"https://{server.http_address}"

    def call(method: str, path: str, token: str | None) -> tuple[int, str]:
        args = ["--cacert", pki.ca]
        if token is not None:
            args += ["-H", f"authorization: Bearer {token}"]
        proc = subprocess.run(
            ["curl", "-sS", "-X", method, *args, "-w", "\n%{http_code}", f"{https}{path}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        text, _, status = proc.stdout.rpartition("\n")
        return int(status), text

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    # Health stays open, as gRPC health checking does; everything else needs a token.
    assert call("GET", "/v2/health/ready", None)[0] == 200
    status, text = call("GET", "/v2/models/sec-xgb", None)
    assert status == 401 and "Bearer" in json.loads(text)["error"]
    assert call("GET", "/v2/models/sec-xgb", "wrong")[0] == 401
    assert call("GET", "/v2/models/sec-xgb", "predict-only")[0] == 200
    assert call("GET", "/v2/models/sec-xgb", REST_TOKEN)[0] == 200
    # Loading is an admin's call, on both protocols.
    status, text = call("POST", "/v2/repository/models/sec-xgb/load", "predict-only")
    assert status == 403 and "lacks the 'admin' scope" in json.loads(text)["error"]
    assert call("POST", "/v2/repository/models/sec-xgb/load", REST_TOKEN)[0] == 200
    # Plain HTTP to the TLS port is refused.
    plain = subprocess.run(
        ["curl", "-sS", f"http://{server.http_address}/v2/health/live"], capture_output=True, timeout=30
    )
    assert plain.returncode != 0 or b"live" not in plain.stdout


def test_inference_paths_are_matched_as_starlettes_router_matches_them():
    from starlette.routing import Match, Route

    routes = [
        Route(p, lambda r: None, methods=["POST"])
        for p in ("/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer")
    ]
    paths = [
        "/v2/models/m/infer",
        "/v2/models/m/versions/c1/infer",
        "/v2/models/stats/infer",
        "/v2/models/infer",
        "/v2/models//infer",
        "/v2/models/m/versions//infer",
        "/v2/models/m/x/c1/infer",
        "/v2/models/m/infer/",
        "/v2/models/m/ready",
        "/v2/models/a b/infer",
    ]
    for path in paths:
        scope = {"type": "http", "path": path, "method": "POST", "root_path": ""}
        matched = None
        for route in routes:
            match, child = route.matches(scope)
            if match == Match.FULL:
                matched = child["path_params"]
                break
        assert infer_path_params(path) == matched, path
