"""A model repository directory (``--model-repository``) laid out as Triton's and MLServer's, served as it is.

The test writes each framework's file with the framework itself (XGBoost, LightGBM, scikit-learn,
TorchScript, an ONNX graph built with ``onnx.helper``), serves the folder with a real predictor
(REST and gRPC), and checks every answer against the library's own in-process prediction.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc

ROWS, FEATURES = 32, 4

TS_CONFIG = """
name: "ts"
platform: "pytorch_libtorch"
max_batch_size: 32
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }
"""

FIL_CONFIG = """
backend: "fil"
max_batch_size: 64
version_policy: { all: {} }
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters [ { key: "model_type" value: { string_value: "lightgbm" } } ]
"""

COLUMNS_CONFIG = """
backend: "fil"
max_batch_size: 32
input [
  { name: "a" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "b" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "c" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "d" data_type: TYPE_FP32 dims: [ 1 ] }
]
parameters [ { key: "model_type" value: { string_value: "lightgbm" } } ]
"""

# Triton's scheduling: requests joined up to 16 rows (at once at 4 or 8), three calls at a time.
DYNAMIC_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 16
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 300 }
instance_group [ { count: 3 kind: KIND_CPU } ]
"""

GPU_CONFIG = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\ninstance_group [ { count: 1 kind: KIND_GPU } ]\n'

BROKEN_CONFIG = 'platform: "onnxruntime_onnx"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 '


def post(url: str, doc: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url, json.dumps(doc).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def infer(base: str, model: str, x: np.ndarray, name: str = "input", version: str = "") -> tuple[int, Any]:
    path = f"{base}/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    tensor = {"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.reshape(-1).tolist()}
    return post(path, {"inputs": [tensor]})


def output(doc: dict[str, Any], name: str) -> np.ndarray:
    found = next(o for o in doc["outputs"] if o["name"] == name)
    return np.asarray(found["data"], dtype=np.float64).reshape(found["shape"])


def _onnx_model(path: pathlib.Path, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Y = softmax(X @ W + B), X float [N, 4]: built node by node."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = rng.normal(size=(FEATURES, 3)).astype(np.float32)
    b = rng.normal(size=(3,)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"]),
            helper.make_node("Add", ["XW", "B"], ["Z"]),
            helper.make_node("Softmax", ["Z"], ["Y"], axis=1),
        ],
        "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return w, b


class _Evil:
    """A pickle that creates a file when unpickled: what an untrusted repository must never run."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> dict[str, Any]:
    """A repository of one model per framework, written by each library, and the expected answers."""
    import joblib
    import lightgbm
    import onnxruntime
    import torch
    import xgboost
    from sklearn.linear_model import LogisticRegression

    root = tmp_path_factory.mktemp("model-repository")
    repo = root / "models"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    train_x = rng.normal(size=(200, FEATURES)).astype(np.float32)
    train_y = (train_x[:, 0] + 0.5 * train_x[:, 1] - train_x[:, 2] > 0).astype(int)
    expected: dict[str, np.ndarray] = {}

    def folder(*parts: str) -> pathlib.Path:
        path = repo.joinpath(*parts)
        path.mkdir(parents=True)
        return path

    booster = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "nthread": 1}, xgboost.DMatrix(train_x, train_y), 10
    )
    booster.save_model(str(folder("xgb", "1") / "model.json"))
    expected["xgb"] = booster.predict(xgboost.DMatrix(x))
    # MLServer's own layout: model-settings.json beside the file, no version folders.
    booster.save_model(str(folder("mls") / "model.ubj"))
    (repo / "mls" / "model-settings.json").write_text(
        json.dumps(
            {"name": "mls", "implementation": "mlserver_xgboost.XGBoostModel", "parameters": {"uri": "./model.ubj"}}
        )
    )

    for version, rounds in (("1", 3), ("2", 8)):
        lgb = lightgbm.train(
            {"objective": "binary", "verbose": -1, "num_threads": 1}, lightgbm.Dataset(train_x, train_y), rounds
        )
        lgb.save_model(str(folder("lgb", version) / "model.txt"))
        (folder("lgb_all", version) / "model.txt").write_text((repo / "lgb" / version / "model.txt").read_text())
        expected[f"lgb/{version}"] = lgb.predict(x)
    (repo / "lgb_all" / "config.pbtxt").write_text(FIL_CONFIG)
    (folder("lgb_cols", "1") / "model.txt").write_text((repo / "lgb" / "2" / "model.txt").read_text())
    (repo / "lgb_cols" / "config.pbtxt").write_text(COLUMNS_CONFIG)

    estimator = LogisticRegression().fit(train_x, train_y)
    joblib.dump(estimator, folder("sk", "1") / "model.joblib")
    expected["sk"] = estimator.predict(x)
    marker = root / "unpickled"
    (folder("evil", "1") / "model.pkl").write_bytes(pickle.dumps(_Evil(marker)))

    torch.manual_seed(0)
    module = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(FEATURES, 2), torch.nn.Softmax(dim=1)))
    module.save(str(folder("ts", "1") / "model.pt"))
    (repo / "ts" / "config.pbtxt").write_text(TS_CONFIG)
    with torch.no_grad():
        expected["ts"] = module(torch.from_numpy(x)).numpy()

    _onnx_model(folder("onnx", "1") / "model.onnx", rng)
    session = onnxruntime.InferenceSession(str(repo / "onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    expected["onnx"] = session.run(None, {"X": x})[0]

    for name, text in (("onnx_dynamic", DYNAMIC_CONFIG), ("onnx_gpu", GPU_CONFIG)):
        (folder(name, "1") / "model.onnx").write_bytes((repo / "onnx" / "1" / "model.onnx").read_bytes())
        (repo / name / "config.pbtxt").write_text(text)
    (folder("broken", "1") / "model.onnx").write_bytes((repo / "onnx" / "1" / "model.onnx").read_bytes())
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    return {"root": root, "repo": repo, "x": x, "expected": expected, "marker": marker}


def _serve(repository: dict[str, Any], name: str, trust: bool):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=str(repository["root"] / f"store-{name}"),
            index_refresh_s=0.2,
            model_repository=str(repository["repo"]),
            model_repository_trust_pickles=trust,
        )
    )
    thread.start()
    return thread


@pytest.fixture(scope="module")
def served(repository):
    """The repository served without trusting its pickles: (REST base URL, gRPC address)."""
    thread = _serve(repository, "untrusted", trust=False)
    try:
        yield f"http://{thread.server.http_address}", thread.server.address
    finally:
        thread.stop()


def test_each_framework_answers_as_its_library(served, repository) -> None:
    base, _ = served
    x, expected = repository["x"], repository["expected"]
    for model, name, out, atol in (
        ("xgb", "input", "predictions", 1e-6),
        ("mls", "input", "predictions", 1e-6),
        ("lgb", "input", "predictions", 1e-6),
        ("ts", "INPUT__0", "OUTPUT__0", 1e-6),
        ("onnx", "X", "Y", 1e-6),
    ):
        status, doc = infer(base, model, x, name)
        assert status == 200, (model, doc)
        want = expected.get(model, expected["xgb"] if model == "mls" else expected.get("lgb/2"))
        np.testing.assert_allclose(output(doc, out), want, atol=atol, err_msg=model)
        # Triton's versions are integers: the folder's.
        assert doc["model_version"] == ("2" if model == "lgb" else "1")


def test_version_policy_latest_by_default_and_all_from_the_config(served, repository) -> None:
    base, _ = served
    x, expected = repository["x"], repository["expected"]
    status, doc = infer(base, "lgb", x, version="1")
    assert status == 404 and "no version" in doc["error"], doc
    for version in ("1", "2"):
        status, doc = infer(base, "lgb_all", x, "input__0", version=version)
        assert status == 200, doc
        np.testing.assert_allclose(output(doc, "output__0"), expected[f"lgb/{version}"], atol=1e-6)
    meta = get(f"{base}/v2/models/lgb_all")
    assert meta["inputs"] == [{"name": "input__0", "datatype": "FP32", "shape": [-1, 4]}]
    assert [o["name"] for o in meta["outputs"]] == ["output__0"]


def test_declared_columns_name_a_bare_matrix_models_features(served, repository) -> None:
    """A LightGBM model trained on a matrix (Column_0...) takes the configuration's one-value-per-row inputs."""
    base, _ = served
    x = repository["x"]
    tensors = [
        {"name": name, "shape": [len(x), 1], "datatype": "FP32", "data": x[:, i].tolist()}
        for i, name in enumerate("abcd")
    ]
    status, doc = post(f"{base}/v2/models/lgb_cols/infer", {"inputs": tensors})
    assert status == 200, doc
    np.testing.assert_allclose(output(doc, "predictions"), repository["expected"]["lgb/2"], atol=1e-6)
    assert [i["name"] for i in get(f"{base}/v2/models/lgb_cols")["inputs"]] == ["a", "b", "c", "d"]


def test_metadata_and_config_from_the_graph_and_config_pbtxt(served) -> None:
    base, _ = served
    meta = get(f"{base}/v2/models/onnx")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "Y", "datatype": "FP32", "shape": [-1, 3]}]
    config = get(f"{base}/v2/models/ts/config")
    assert config["platform"] == "pytorch_libtorch"
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("INPUT__0", "TYPE_FP32", [4])]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [("OUTPUT__0", [2])]
    assert config["max_batch_size"] > 0


def test_grpc_infer_and_model_config(served, repository) -> None:
    _, address = served
    x = repository["x"]
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="onnx")
        request.inputs.add(name="X", datatype="FP32", shape=list(x.shape))
        request.raw_input_contents.append(x.tobytes())
        response = stub.ModelInfer(request, timeout=60)
        y = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(response.outputs[0].shape)
        np.testing.assert_allclose(y, repository["expected"]["onnx"], atol=1e-6)
        config = stub.ModelConfig(pb.ModelConfigRequest(name="onnx"), timeout=60).config
        assert config.platform == "onnxruntime_onnx" and config.input[0].name == "X"


def test_config_answers_the_scheduling_config_pbtxt_applies(served, repository) -> None:
    base, address = served
    config = get(f"{base}/v2/models/onnx_dynamic/config")
    assert config["max_batch_size"] == 16
    assert config["dynamic_batching"] == {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 300}
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(3, "KIND_CPU")]
    # Without dynamic_batching each request is its own call: none is answered.
    config = get(f"{base}/v2/models/ts/config")
    assert config["max_batch_size"] == 32 and "dynamic_batching" not in config
    assert config["instance_group"][0]["count"] == 2
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        answer = stub.ModelConfig(pb.ModelConfigRequest(name="onnx_dynamic"), timeout=60).config
    assert answer.max_batch_size == 16 and list(answer.dynamic_batching.preferred_batch_size) == [4, 8]
    assert answer.dynamic_batching.max_queue_delay_microseconds == 300 and answer.instance_group[0].count == 3
    # Rows beyond max_batch_size are refused as Triton refuses them; within it the model answers.
    x = np.concatenate([repository["x"]] * 2)[:17]
    status, doc = infer(base, "onnx_dynamic", x, "X")
    assert status == 400 and "batch-size must be <= 16" in doc["error"], doc
    status, doc = infer(base, "onnx_dynamic", x[:16], "X")
    assert status == 200, doc
    np.testing.assert_allclose(output(doc, "Y"), repository["expected"]["onnx"][:16], atol=1e-6)


def test_a_gpu_instance_group_is_refused_naming_the_field(served, repository) -> None:
    base, _ = served
    status, doc = infer(base, "onnx_gpu", repository["x"][:4], "X")
    assert status == 400 and "instance_group[0].kind is KIND_GPU" in doc["error"], doc
    assert "onnx_gpu/config.pbtxt" in doc["error"], doc
    status, index = post(f"{base}/v2/repository/index", {})
    entry = next(e for e in index if e["name"] == "onnx_gpu")
    assert entry["state"] == "UNAVAILABLE" and "KIND_GPU" in entry["reason"], entry


def test_wrong_shape_is_invalid_argument(served, repository) -> None:
    base, _ = served
    status, doc = infer(base, "onnx", repository["x"][:, :3], "X")
    assert status == 400 and "shape" in doc["error"], doc


def test_untrusted_pickle_is_refused_and_never_unpickled(served, repository) -> None:
    base, _ = served
    for model in ("sk", "evil"):
        status, doc = infer(base, model, repository["x"])
        assert status == 400, doc
        assert "pickle" in doc["error"] and "TRUST_PICKLES" in doc["error"], doc
    assert not repository["marker"].exists()
    status, index = post(f"{base}/v2/repository/index", {})
    entry = next(e for e in index if e["name"] == "sk")
    assert entry["state"] == "UNAVAILABLE" and "pickle" in entry["reason"], entry


def test_bad_config_pbtxt_names_the_file(served, repository) -> None:
    base, _ = served
    status, doc = infer(base, "broken", repository["x"], "x")
    assert status == 400, doc
    assert "broken/config.pbtxt: line 2, column" in doc["error"], doc
    status, index = post(f"{base}/v2/repository/index", {})
    entry = next(e for e in index if e["name"] == "broken")
    assert entry["state"] == "UNAVAILABLE" and "broken/config.pbtxt" in entry["reason"], entry


def test_repository_index_load_and_unload(served, repository) -> None:
    base, _ = served
    assert infer(base, "xgb", repository["x"])[0] == 200

    def state(name: str) -> dict[str, str]:
        return {e["version"]: e["state"] for e in post(f"{base}/v2/repository/index", {})[1] if e["name"] == name}

    assert state("xgb") == {"1": "READY"}
    assert state("lgb_all").keys() == {"1", "2"}
    assert post(f"{base}/v2/repository/models/xgb/unload", {})[0] == 200
    assert state("xgb") == {"1": "UNAVAILABLE"}
    assert post(f"{base}/v2/repository/models/xgb/load", {})[0] == 200
    assert state("xgb") == {"1": "READY"}


def test_trusted_repository_serves_scikit_learn(repository) -> None:
    thread = _serve(repository, "trusted", trust=True)
    try:
        status, doc = infer(f"http://{thread.server.http_address}", "sk", repository["x"])
        assert status == 200, doc
        np.testing.assert_array_equal(output(doc, "predictions"), repository["expected"]["sk"])
    finally:
        thread.stop()


@pytest.fixture
def s3_repository(repository, tmp_path) -> Iterator[str]:
    """The repository's ONNX and LightGBM folders copied to a bucket of a real S3 server (moto's, on loopback)."""
    import pyarrow.fs as pafs

    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert proc.poll() is None and time.monotonic() < deadline, "moto's S3 server did not start"
                time.sleep(0.1)
        options = {"endpoint_override": f"127.0.0.1:{port}", "scheme": "http", "region": "us-east-1"}
        fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", allow_bucket_creation=True, **options)
        fs.create_dir("models")
        for model in ("onnx", "lgb_all"):
            for path in sorted((repository["repo"] / model).rglob("*")):
                if path.is_file():
                    with fs.open_output_stream(f"models/repo/{path.relative_to(repository['repo']).as_posix()}") as f:
                        f.write(path.read_bytes())
        query = "&".join(f"{k}={v}" for k, v in options.items())
        yield f"s3://testing:testing@models/repo?{query}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_repository_on_s3(repository, s3_repository) -> None:
    repository = {**repository, "repo": s3_repository}
    thread = _serve(repository, "s3", trust=False)
    try:
        base = f"http://{thread.server.http_address}"
        status, doc = infer(base, "onnx", repository["x"], "X")
        assert status == 200, doc
        np.testing.assert_allclose(output(doc, "Y"), repository["expected"]["onnx"], atol=1e-6)
        status, doc = infer(base, "lgb_all", repository["x"], version="1")
        assert status == 200, doc
        np.testing.assert_allclose(output(doc, "output__0"), repository["expected"]["lgb/1"], atol=1e-6)
        names = {e["name"] for e in post(f"{base}/v2/repository/index", {})[1]}
        assert {"onnx", "lgb_all"} <= names and "xgb" not in names
        # Messages name the bucket's path, never the credentials in the URI.
        status, doc = infer(base, "onnx", repository["x"], "X", version="7")
        assert status == 404 and "testing:testing" not in doc["error"], doc
    finally:
        thread.stop()


# --- configurations and folders, without a server --------------------------------------------


def test_config_pbtxt_version_policies_fil_and_file_name() -> None:
    from trainwire_predictor.model_repository_dir import VersionPolicy, parse_triton

    found = [1, 2, 3, 5]
    assert VersionPolicy().select(found) == [5]
    latest = parse_triton("version_policy: { latest: { num_versions: 2 } }", "m/config.pbtxt").policy
    assert latest.select(found) == [3, 5]
    specific = parse_triton("version_policy: { specific: { versions: [1, 3, 4] } }", "m/config.pbtxt").policy
    assert specific.select(found) == [1, 3]
    settings = parse_triton(
        'backend: "fil"\ndefault_model_filename: "xgboost.ubj"\nmax_batch_size: 0\n'
        'parameters [ { key: "model_type" value: { string_value: "xgboost_ubj" } } ]\n'
        'input [ { name: "x" data_type: TYPE_FP64 dims: [ -1, 3 ] } ]',
        "m/config.pbtxt",
    )
    assert (settings.framework, settings.filename) == ("xgboost", "xgboost.ubj")
    assert [(s.name, s.datatype, s.shape) for s in settings.inputs] == [("x", "FP64", (-1, 3))]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('platform: "tensorrt_plan"', "'tensorrt_plan' is not served"),
        ('platform: "onnxruntime_onnx"\ninput [ { name: "x" dims: [ 4 ] } ]', "input 'x' has no data_type"),
        ('backend: "fil"\nparameters [ { key: "model_type" value: { string_value: "treelite_checkpoint" } } ]', "FIL"),
        ('default_model_filename: "../../etc/passwd"', "not a plain file name"),
        ("version_policy: { specific: { } }", "names no versions"),
        ("max_batch_size: many", "line 1, column 17"),
    ],
)
def test_bad_config_pbtxt_says_what_and_where(text: str, says: str) -> None:
    from trainwire_core.errors import FailedPreconditionError
    from trainwire_predictor.model_repository_dir import parse_triton

    with pytest.raises(FailedPreconditionError) as caught:
        parse_triton(text, "/repo/m/config.pbtxt")
    assert "/repo/m/config.pbtxt" in caught.value.message and says in caught.value.message, caught.value.message


def test_model_settings_json() -> None:
    from trainwire_core.errors import FailedPreconditionError
    from trainwire_predictor.model_repository_dir import parse_mlserver

    settings = parse_mlserver(
        json.dumps(
            {
                "implementation": "mlserver_sklearn.SKLearnModel",
                "parameters": {"uri": "./model.joblib"},
                "inputs": [{"name": "a", "datatype": "FP64", "shape": [-1]}],
            }
        ),
        "m/model-settings.json",
    )
    assert (settings.framework, settings.filename, settings.inputs[0].shape) == ("sklearn", "model.joblib", (-1,))
    for text, says in (
        ("{", "not JSON"),
        ('{"implementation": "mlserver_huggingface.HuggingFaceRuntime"}', "is not served"),
        ('{"parameters": {"uri": "/etc/model.joblib"}}', "must name a file in the model's folder"),
        ('{"inputs": [{"name": "a"}]}', "inputs[0] needs name, datatype and shape"),
        ('{"implementation": "mlserver_mlflow.MLflowRuntime", "parameters": {"uri": "/srv/m"}}', "MLflow model URI"),
        ('{"implementation": "mlserver_mlflow.MLflowRuntime"}', "MLflow model URI"),
    ):
        with pytest.raises(FailedPreconditionError, match="m/model-settings.json") as caught:
            parse_mlserver(text, "m/model-settings.json")
        assert says in caught.value.message, caught.value.message
    # MLServer's MLflow runtime: the folder stands for an MLflow model (what mlflow deployments writes).
    for uri in ("models:/churn@champion", "models:/churn/3", "runs:/0a1b/model"):
        doc = {"implementation": "mlserver_mlflow.MLflowRuntime", "parameters": {"uri": uri}}
        assert parse_mlserver(json.dumps(doc), "m/model-settings.json").mlflow_uri == uri


def test_folders_without_a_model_file_or_version_say_so(tmp_path) -> None:
    from trainwire_core.errors import FailedPreconditionError
    from trainwire_predictor.model_repository_dir import ModelDirectory

    with pytest.raises(ValueError, match="not a directory"):
        ModelDirectory(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "two" / "1").mkdir(parents=True)
    (tmp_path / "two" / "1" / "a.onnx").write_bytes(b"")
    (tmp_path / "two" / "1" / "b.onnx").write_bytes(b"")
    (tmp_path / "bad name!").mkdir()
    directory = ModelDirectory(str(tmp_path))
    assert directory.refresh() == {"empty", "two"}
    with pytest.raises(FailedPreconditionError, match="no version to serve: version folders none"):
        directory.read("empty")
    index, _ = directory.read("two")
    assert index is not None and index.ordered_ids == ("1",)
    with pytest.raises(FailedPreconditionError, match=r"several model files \(a.onnx, b.onnx\)"):
        directory.load("two", "1")
    listed = {entry.name: entry for entry in directory.listing()}
    assert listed["two"].versions == (1,) and "no version" in listed["empty"].error


def test_a_model_folder_wins_over_a_run_of_its_name_and_the_run_keeps_its_id(tmp_path) -> None:
    """Precedence: MLflow served names, then model folders, then run names, then run ids."""
    import asyncio

    from trainwire_core.storage import Store
    from trainwire_core.store_documents import CheckpointIndex, IndexedCheckpoint
    from trainwire_predictor.model_repository import ModelRepository
    from trainwire_predictor.model_repository_dir import ModelDirectory

    store = Store(str(tmp_path / "store"))
    CheckpointIndex(
        run_id="run-1",
        run_name="churn",
        checkpoints=(IndexedCheckpoint("checkpoint_000001", 0),),
        latest="checkpoint_000001",
    ).write(store)
    store.write_json(store.name_path("churn"), {"run_id": "run-1"})
    (tmp_path / "repo" / "churn" / "3").mkdir(parents=True)
    repo = ModelRepository(store, directory=ModelDirectory(str(tmp_path / "repo")))
    without = ModelRepository(store)

    async def resolve(models: ModelRepository, name: str) -> tuple[str, str]:
        ref = await models.resolve(name)
        return ref.run_id, ref.checkpoint_id

    assert asyncio.run(resolve(without, "churn")) == ("run-1", "checkpoint_000001")
    assert asyncio.run(resolve(repo, "churn")) == ("churn", "3")
    assert asyncio.run(resolve(repo, "run-1")) == ("run-1", "checkpoint_000001")


def test_tritonclient_asks_for_outputs_by_their_configured_names(served, repository) -> None:
    """Triton's own client: TorchScript's INPUT__0/OUTPUT__0 and a FIL configuration's output__0, over gRPC."""
    tritonclient = pytest.importorskip("tritonclient.grpc")

    x, expected = repository["x"], repository["expected"]
    client = tritonclient.InferenceServerClient(served[1])
    try:
        for model, name, out, want in (
            ("ts", "INPUT__0", "OUTPUT__0", expected["ts"]),
            ("lgb_all", "input__0", "output__0", expected["lgb/2"]),
        ):
            tensor = tritonclient.InferInput(name, list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            answer = client.infer(model, [tensor], outputs=[tritonclient.InferRequestedOutput(out)])
            np.testing.assert_allclose(answer.as_numpy(out), want, atol=1e-6, err_msg=model)
        config = client.get_model_config("ts", as_json=True)["config"]
        assert config["platform"] == "pytorch_libtorch" and config["input"][0]["name"] == "INPUT__0"
    finally:
        client.close()
