"""An attacker holding a team token: each request that once ran code or reached a host path is refused.

Real services on loopback: a coordinator with named tokens on the session's Ray, and a
predictor (gRPC and REST) on the same store. Every exploit is sent as it was found, with a
token that lacks ``submit-code``; each answer must carry the right status and name the bad
field, and the marker file each payload would write must never appear. Legitimate work with
the same tokens still trains and serves afterwards.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pandas as pd
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from trainwire_core.inference import grpc_service_pb2, grpc_service_pb2_grpc
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

TOKENS = {
    "mallory": {"token": "mallory-token", "scopes": ["submit", "read"]},
    "dev": {"token": "dev-token", "scopes": ["submit-code", "read"]},
    "web": {"token": "web-token", "scopes": ["predict"]},
}


def _as(name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[name]['token']}")]


def _field(err: grpc.RpcError) -> str:
    """The field a refusal names (google.rpc.BadRequest in the status details)."""
    status = rpc_status.from_call(err)
    for detail in status.details if status is not None else []:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    return ""


class _Marker:
    """A file each payload would create: its absence is what each test asserts."""

    def __init__(self, path: str) -> None:
        self.path = path

    def command(self) -> list[str]:
        return ["/bin/sh", "-c", f"id > {self.path}"]

    def written(self) -> bool:
        return os.path.exists(self.path)


class _RunsCommand:
    """A pickle whose load runs a shell command (what an attacker uploads)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    def __reduce__(self):  # noqa: ANN204 - pickle's protocol
        import subprocess

        return (subprocess.call, (self.argv,))


@pytest.fixture(scope="module")
def services(ray_cluster, tmp_path_factory):
    """A scoped coordinator and a predictor (gRPC + REST) on one store; yields their stubs and addresses."""
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    home = tmp_path_factory.mktemp("attacker")
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    coordinator = CoordinatorThread(
        CoordinatorSettings(
            port=0,
            store=str(home / "store"),
            state=str(home / "db"),
            tokens=str(tokens),
            capacity_wait_s=0,
            worker_pool_idle_s=0,
        )
    )
    address = coordinator.start()
    predictor = PredictorThread(
        PredictorSettings(port=0, http_port=0, store=str(home / "store"), tokens=str(tokens), index_refresh_s=0.2)
    )
    predictor.start()
    channel = grpc.insecure_channel(address)
    pchannel = grpc.insecure_channel(predictor.server.address)
    yield {
        "coordinator": coordinator_pb2_grpc.CoordinatorStub(channel),
        "predictor": grpc_service_pb2_grpc.GRPCInferenceServiceStub(pchannel),
        "rest": f"http://{predictor.server.http_address}",
        "address": address,
        "home": home,
    }
    channel.close()
    pchannel.close()
    predictor.stop()
    coordinator.stop()


@pytest.fixture
def marker(tmp_path) -> _Marker:
    return _Marker(str(tmp_path / "pwned"))


def _refused(call, request, token: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=_as(token), timeout=60)
    return info.value


def _upload_dataset(stub, token: str) -> str:
    import hashlib

    import pyarrow as pa

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(64, 3)), columns=["a", "b", "c"])
    df["y"] = df.a * 2 + df.b
    sink = pa.BufferOutputStream()
    table = pa.Table.from_pandas(df, preserve_index=False)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    header = coordinator_pb2.UploadDatasetHeader(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    info = stub.UploadDataset(
        iter(
            [
                coordinator_pb2.UploadDatasetRequest(header=header),
                coordinator_pb2.UploadDatasetRequest(chunk=data),
            ]
        ),
        metadata=_as(token),
    )
    return info.ref.uri


def _sklearn_fit(estimator_class: str, params: dict, dataset: str = "datasets/" + "0" * 64):
    request = coordinator_pb2.FitRequest(framework="sklearn", run_config=common_pb2.RunConfig(name="sk"))
    request.sklearn.estimator_class = estimator_class
    request.sklearn.estimator_params.update(params)
    request.sklearn.label_column = "y"
    request.datasets["train"].uri = dataset
    return request


# --- 1. code named by a declarative trainer or an entry point ------------------------------------
def test_a_submit_token_cannot_name_popen_as_an_estimator(services, marker):
    stub = services["coordinator"]
    dataset = _upload_dataset(stub, "mallory")
    err = _refused(stub.Fit, _sklearn_fit("subprocess:Popen", {"args": marker.command()}, dataset), "mallory")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _field(err) == "sklearn.estimator_class" and "'submit-code'" in err.details()
    # A class under the allowed prefix that is no estimator is refused too.
    err = _refused(stub.Fit, _sklearn_fit("sklearn.utils:Bunch", {}, dataset), "mallory")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and _field(err) == "sklearn.estimator_class"
    # Estimator params that name host paths.
    err = _refused(stub.Fit, _sklearn_fit("sklearn.cluster:KMeans", {"memory": "/etc"}, dataset), "mallory")
    assert _field(err) == "sklearn.estimator_params.memory"
    time.sleep(1)
    assert not marker.written()


def test_a_submit_token_cannot_name_any_entry_point(services, marker):
    stub = services["coordinator"]
    request = coordinator_pb2.FitRequest(framework="torch", run_config=common_pb2.RunConfig(name="ep"))
    request.scaling_config.num_workers = 1
    request.data_parallel.train_loop.entry_point = "subprocess:Popen"
    request.data_parallel.train_loop_config.update({"args": marker.command()})
    err = _refused(stub.Fit, request, "mallory")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _field(err) == "data_parallel.train_loop.entry_point"
    assert "trainwire.train_loops" in err.details()
    assert not marker.written()


@pytest.mark.parametrize(
    ("section", "value", "field"),
    [
        ("env", "os:system", "rl.env"),
        ("env", "subprocess.Popen", "rl.env"),
        ("config", "my.mod.Callbacks", "rl.config.callbacks"),
    ],
)
def test_a_submit_token_cannot_name_code_rllib_would_import(services, section, value, field):
    request = coordinator_pb2.FitRequest(framework="rllib", run_config=common_pb2.RunConfig(name="rl"))
    request.rl.algorithm = "PPO"
    if section == "env":
        request.rl.env = value
    else:
        request.rl.env = "CartPole-v1"
        request.rl.config.update({"callbacks": value})
    err = _refused(services["coordinator"].Fit, request, "mallory")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and _field(err) == field


# --- 2. a pickle uploaded without submit-code ------------------------------------------------------
def _pickle_checkpoint(tmp_path, marker: _Marker) -> str:
    directory = tmp_path / "evil"
    directory.mkdir()
    (directory / "model.pkl").write_bytes(pickle.dumps(_RunsCommand(marker.command())))
    return str(directory)


def _rest_infer(base: str, model: str) -> tuple[int, dict]:
    body = json.dumps({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}]}).encode()
    request = urllib.request.Request(
        f"{base}/v2/models/{model}/infer",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS['web']['token']}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_uploaded_pickle_is_never_loaded_by_the_predictor(services, marker, tmp_path):
    from trainwire.client import CoordinatorClient

    client = CoordinatorClient(services["address"], token=TOKENS["mallory"]["token"])
    client.upload_checkpoint(_pickle_checkpoint(tmp_path, marker), "evil-model")
    client.close()
    status, body = _rest_infer(services["rest"], "evil-model")
    assert status == 400 and "evil-model" in body["error"] and "submit-code" in body["error"], body
    request = grpc_service_pb2.ModelInferRequest(model_name="evil-model")
    tensor = request.inputs.add(name="a", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    err = _refused(services["predictor"].ModelInfer, request, "web")
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "evil-model" in err.details() and _field(err) == "model_name"
    assert not marker.written()


def test_resuming_from_an_untrusted_upload_needs_submit_code(services, marker, tmp_path):
    from trainwire.client import CoordinatorClient

    client = CoordinatorClient(services["address"], token=TOKENS["mallory"]["token"])
    info = client.upload_checkpoint(_pickle_checkpoint(tmp_path, marker), "evil-resume")
    client.close()
    stub = services["coordinator"]
    request = _sklearn_fit("sklearn.linear_model:LinearRegression", {}, _upload_dataset(stub, "mallory"))
    request.resume_from_checkpoint = info.uri
    err = _refused(stub.Fit, request, "mallory")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and _field(err) == "resume_from_checkpoint"
    assert not marker.written()


# --- 3. paths beyond the store ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("resume_from_checkpoint", "resume_from_checkpoint"),
        ("storage_path", "run_config.storage_path"),
        ("dataset", "datasets[train].uri"),
    ],
)
def test_host_paths_are_refused_without_telling_whether_they_exist(services, where, field):
    stub = services["coordinator"]
    details = []
    for path in ("/etc/shadow", "/etc/no-such-file-here", f"{services['home']}/store/../../etc/passwd"):
        request = _sklearn_fit("sklearn.linear_model:LinearRegression", {}, _upload_dataset(stub, "dev"))
        if where == "resume_from_checkpoint":
            request.resume_from_checkpoint = path
        elif where == "storage_path":
            request.run_config.storage_path = path
        else:
            request.datasets["train"].uri = path
            request.datasets["train"].format = "csv"
        # Even a submit-code token: the coordinator's host files are not the caller's.
        err = _refused(stub.Fit, request, "dev")
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and _field(err) == field
        details.append(err.details())
    assert len(set(details)) == 1, details  # an existing file and a missing one read the same
    assert "root:" not in details[0] and "shadow" not in details[0]


# --- 4. runtime environments ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pip", "env", "field"),
    [
        (["--index-url=http://127.0.0.1:1 -r /etc/passwd"], {}, "run_config.runtime_env.pip[0]"),
        (["--find-links /tmp -e /tmp/x"], {}, "run_config.runtime_env.pip[0]"),
        (["--no-index -c /etc/passwd"], {}, "run_config.runtime_env.pip[0]"),
        ([], {"LD_PRELOAD": "/tmp/x.so"}, "run_config.runtime_env.env_vars[LD_PRELOAD]"),
        ([], {"PYTHONPATH": "/tmp"}, "run_config.runtime_env.env_vars[PYTHONPATH]"),
    ],
)
def test_runtime_environment_lines_that_read_files_or_change_the_loader_are_refused(services, pip, env, field):
    request = coordinator_pb2.FitRequest(framework="torch", run_config=common_pb2.RunConfig(name="env"))
    request.scaling_config.num_workers = 1
    request.data_parallel.train_loop.entry_point = "os:getcwd"
    request.run_config.runtime_env.pip.extend(pip)
    request.run_config.runtime_env.env_vars.update(env)
    err = _refused(services["coordinator"].Fit, request, "dev")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and _field(err) == field
    assert "root:" not in err.details()


# --- 5. what the same tokens may still do ----------------------------------------------------------
def test_legitimate_declarative_fits_and_inference_still_work(services):
    stub = services["coordinator"]
    run = stub.Fit(
        _sklearn_fit("sklearn.linear_model:LinearRegression", {}, _upload_dataset(stub, "mallory")),
        metadata=_as("mallory"),
        timeout=60,
    )
    assert run.submitted_by == "mallory"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        run = stub.GetRun(coordinator_pb2.GetRunRequest(run_id=run.run_id), metadata=_as("mallory"))
        if run.state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED):
            break
        time.sleep(0.5)
    assert run.state == common_pb2.SUCCEEDED, run.state_reason
    # Trainwire's own worker pickled the allowed estimator: the predictor serves it.
    body = json.dumps(
        {
            "inputs": [
                {"name": c, "shape": [2], "datatype": "FP64", "data": data}
                for c, data in (("a", [1.0, 0.0]), ("b", [0.0, 1.0]), ("c", [5.0, 5.0]))
            ]
        }
    ).encode()
    request = urllib.request.Request(
        f"{services['rest']}/v2/models/{run.run_id}/infer",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS['web']['token']}"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                out = json.loads(response.read())
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:  # the index refresh may lag a moment
                raise
            time.sleep(0.3)
    predictions = out["outputs"][0]["data"]
    assert predictions == pytest.approx([2.0, 1.0], abs=0.05)  # y = 2a + b


def test_an_upload_with_submit_code_is_served(services, tmp_path):
    import cloudpickle
    from sklearn.linear_model import LinearRegression

    from trainwire.client import CoordinatorClient

    estimator = LinearRegression().fit(pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0]}), [0.0, 2.0, 4.0, 6.0])
    directory = tmp_path / "trusted"
    directory.mkdir()
    (directory / "model.pkl").write_bytes(cloudpickle.dumps(estimator))
    client = CoordinatorClient(services["address"], token=TOKENS["dev"]["token"])
    client.upload_checkpoint(directory, "trusted-model")
    client.close()
    deadline = time.monotonic() + 30
    while True:
        status, body = _rest_infer(services["rest"], "trusted-model")
        if status != 404 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status == 200, body
    assert body["outputs"][0]["data"] == pytest.approx([2.0])


def test_a_model_that_cannot_be_loaded_answers_a_clear_status_naming_it(services, tmp_path):
    from trainwire.client import CoordinatorClient

    directory = tmp_path / "corrupt"
    directory.mkdir()
    (directory / "model.ubj").write_bytes(b"not an xgboost model")  # declares XGBoost by its file
    client = CoordinatorClient(services["address"], token=TOKENS["mallory"]["token"])
    client.upload_checkpoint(directory, "corrupt-model")
    client.close()
    status, body = _rest_infer(services["rest"], "corrupt-model")
    assert status == 400 and "'corrupt-model'" in body["error"] and "cannot be loaded" in body["error"], body
    request = grpc_service_pb2.ModelInferRequest(model_name="corrupt-model")
    request.inputs.add(name="a", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    err = _refused(services["predictor"].ModelInfer, request, "web")
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
    assert "'corrupt-model'" in err.details() and _field(err) == "model_name"
