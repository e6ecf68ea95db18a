"""KServe's own Python clients (``kserve.InferenceRESTClient``, ``InferenceGRPCClient``) against a real predictor.

kserve pins its own protobuf, grpcio and pydantic, so it runs in a peer virtualenv
(``scripts/peer_venvs.sh kserve``, found through ``KSERVE_PYTHON``): a probe script there calls the
predictor this test starts and prints what it got; the answers are checked here against the same
model run in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from serving_fixtures import commit_checkpoint

from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(240)

MODEL = "kserve-xgb"
TOKEN = "kserve-predict"

# Runs in the kserve virtualenv: argv = gRPC address, REST base URL, model, token, rows (JSON).
PROBE = textwrap.dedent(
    """
    import asyncio, json, sys

    import grpc
    import numpy as np
    from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
    from kserve.protocol.rest.v2_datamodels import ModelMetadataResponse

    address, base, model, token, rows = sys.argv[1:6]
    x = np.asarray(json.loads(rows), dtype=np.float64)
    auth = {"authorization": f"Bearer {token}"}


    def request(binary):
        tensor = InferInput("input", list(x.shape), "FP64")
        tensor.set_data_from_numpy(x, binary_data=binary)
        return InferRequest(model_name=model, infer_inputs=[tensor], request_id="probe")


    async def main():
        out = {}
        rest = InferenceRESTClient(RESTConfig(protocol="v2", retries=1, timeout=60))
        out["rest_live"] = await rest.is_server_live(base, headers=auth)
        out["rest_ready"] = await rest.is_server_ready(base, headers=auth)
        out["rest_model_ready"] = await rest.is_model_ready(base, model, headers=auth)
        out["rest_missing_ready"] = await rest.is_model_ready(base, "no-such-model", headers=auth)
        for binary in (False, True):
            answer = await rest.infer(base, request(binary), model_name=model, headers=dict(auth))
            out[f"rest_{'binary' if binary else 'json'}"] = {
                "id": answer.id,
                "model_name": answer.model_name,
                "outputs": {o.name: o.as_numpy().tolist() for o in answer.outputs},
            }
        # The REST client has no metadata call: the route it would call, read into kserve's own model.
        meta = await rest._client.get(f"{base}/v2/models/{model}", headers=auth)
        out["rest_metadata"] = ModelMetadataResponse.model_validate_json(meta.content).model_dump()
        await rest.close()

        grpc_client = InferenceGRPCClient(address, timeout=60, retries=2)
        headers = tuple(auth.items())
        out["grpc_live"] = await grpc_client.is_server_live(headers=headers)
        out["grpc_ready"] = await grpc_client.is_server_ready(headers=headers)
        out["grpc_model_ready"] = await grpc_client.is_model_ready(model, headers=headers)
        answer = await grpc_client.infer(request(False), headers=headers)
        out["grpc"] = {
            "id": answer.id,
            "model_name": answer.model_name,
            "outputs": {o.name: o.as_numpy().tolist() for o in answer.outputs},
        }
        try:
            await grpc_client.infer(request(False))  # no token
            out["grpc_unauthenticated"] = "answered"
        except grpc.RpcError as exc:
            out["grpc_unauthenticated"] = exc.code().name
        # Nor a metadata call on the gRPC client: its own stub, with kserve's generated messages.
        meta = await grpc_client._client_stub.ModelMetadata(pb.ModelMetadataRequest(name=model), metadata=headers)
        out["grpc_metadata"] = {
            "name": meta.name,
            "platform": meta.platform,
            "versions": list(meta.versions),
            "inputs": [[t.name, t.datatype, list(t.shape)] for t in meta.inputs],
        }
        await grpc_client.close()
        print(json.dumps(out))


    asyncio.run(main())
    """
)


@pytest.fixture(scope="module")
def kserve_python() -> str:
    python = os.environ.get("KSERVE_PYTHON", "")
    if not python or not os.path.exists(python):
        pytest.skip("the kserve peer virtualenv is absent: scripts/peer_venvs.sh kserve, then set KSERVE_PYTHON")
    return python


@pytest.fixture(scope="module")
def server(tmp_path_factory, local_booster) -> Iterator[Any]:
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path_factory.mktemp("kserve") / "store"))
    commit_checkpoint(store, "run-kserve", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path)
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            compile_tree_models=False,
            tokens=json.dumps({"client": {"token": TOKEN, "scopes": ["predict"]}}),
        )
    )
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


def test_kserve_clients_infer_read_metadata_and_readiness(kserve_python, server, local_booster, valid_x) -> None:
    import xgboost

    rows = valid_x.to_numpy(np.float64)[:5]
    expected = local_booster.predict(xgboost.DMatrix(rows, feature_names=list(valid_x.columns)))
    args = [server.address, f"http://{server.http_address}", MODEL, TOKEN, json.dumps(rows.tolist())]
    proc = subprocess.run(
        [kserve_python, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["rest_live"] and got["rest_ready"] and got["rest_model_ready"]
    assert got["rest_missing_ready"] is False
    assert got["grpc_live"] and got["grpc_ready"] and got["grpc_model_ready"]
    for key in ("rest_json", "rest_binary", "grpc"):
        answer = got[key]
        assert (answer["id"], answer["model_name"]) == ("probe", MODEL), key
        np.testing.assert_allclose(np.asarray(answer["outputs"]["predictions"]).reshape(-1), expected, rtol=1e-6)
    assert got["grpc_unauthenticated"] == "UNAUTHENTICATED"
    for meta in (got["rest_metadata"], got["grpc_metadata"]):
        assert (meta["name"], meta["platform"]) == (MODEL, "xgboost")
    assert got["rest_metadata"]["versions"] == got["grpc_metadata"]["versions"] != []
    names = [t["name"] for t in got["rest_metadata"]["inputs"]]
    assert names == [t[0] for t in got["grpc_metadata"]["inputs"]] == list(valid_x.columns)
