"""tritonclient and trainwire in one Python process, in either import order (issue 8).

Both register an ``inference.*`` Open Inference Protocol in protobuf: tritonclient
in the default pool, trainwire in a private one (``trainwire/inference/_pool.py``).
Each order runs in a fresh interpreter, since an import order can only be tried
once per process. In it, a predictor serves a model, and tritonclient, the
trainwire SDK and trainwire's raw stubs all call it and agree.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from serving_fixtures import commit_checkpoint

from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(300)

MODEL = "coexist"

IMPORTS = {
    "tritonclient_first": "import tritonclient.grpc as grpcclient\nfrom trainwire import PredictorClient\n"
    "from trainwire_core.inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc\n",
    "trainwire_first": "from trainwire import PredictorClient\n"
    "from trainwire_core.inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc\n"
    "import tritonclient.grpc as grpcclient\n",
}

# Runs after one of IMPORTS; argv: store URI, input .npy; prints one JSON report.
PROBE = """
import json, sys
import grpc
import numpy as np
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from tritonclient.grpc import service_pb2 as triton_pb
from trainwire_predictor.server import PredictorThread
from trainwire_predictor.settings import PredictorSettings

store, src = sys.argv[1:3]
x = np.load(src)
columns = [f"f{i}" for i in range(x.shape[1])]
thread = PredictorThread(PredictorSettings(port=0, store=store))
address = thread.start()
report = {"order": sys.modules[__name__].__doc__}

triton = grpcclient.InferenceServerClient(address)
report["triton_live"] = triton.is_server_live()
meta = triton.get_model_metadata("%(model)s", as_json=True)
report["triton_inputs"] = [i["name"] for i in meta["inputs"]]
inputs = []
for i, name in enumerate(meta["inputs"]):
    tensor = grpcclient.InferInput(name["name"], [len(x)], "FP64")
    tensor.set_data_from_numpy(np.ascontiguousarray(x[:, i]))
    inputs.append(tensor)
triton_out = triton.infer("%(model)s", inputs).as_numpy("predictions")
triton.close()

with PredictorClient(address) as client:
    report["sdk_live"] = client.is_server_live()
    sdk_out = client.predict("%(model)s", {c: x[:, i] for i, c in enumerate(columns)})["predictions"].to_numpy()
    report["sdk_metadata_inputs"] = [i["name"] for i in client.model_metadata("%(model)s")["inputs"]]

with grpc.insecure_channel(address) as channel:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    report["raw_ready"] = stub.ModelReady(pb.ModelReadyRequest(name="%(model)s")).ready
    # A message built by one side's classes parses with the other's.
    request = triton_pb.ModelInferRequest(model_name="%(model)s")
    for i, c in enumerate(columns):
        request.inputs.add(name=c, datatype="FP64", shape=[len(x)])
        request.raw_input_contents.append(np.ascontiguousarray(x[:, i]).tobytes())
    answer = stub.ModelInfer(pb.ModelInferRequest.FromString(request.SerializeToString()))
    raw_out = np.frombuffer(answer.raw_output_contents[0], dtype=np.float32)
    # Reflection (what grpcurl sees) describes trainwire's service, not tritonclient's copy.
    db = ProtoReflectionDescriptorDatabase(channel)
    services = sorted(db.get_services())
    pool = descriptor_pool.DescriptorPool(db)
    report["services"] = services
    report["reflected_methods"] = sorted(
        m.name for m in pool.FindServiceByName("inference.GRPCInferenceService").methods
    )
thread.stop()

report["ours_in_private_pool"] = pb.DESCRIPTOR.pool is not descriptor_pool.Default()
report["triton_in_default_pool"] = triton_pb.DESCRIPTOR.pool is descriptor_pool.Default()
report["classes_distinct"] = pb.ModelInferRequest is not triton_pb.ModelInferRequest
np.save(src + ".out.npy", np.stack([triton_out.reshape(-1), sdk_out.reshape(-1), raw_out.reshape(-1)]))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory, valid_x):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    if importlib.util.find_spec("tritonclient") is None:
        pytest.skip("tritonclient is not installed (pip install tritonclient)")
    root = tmp_path_factory.mktemp("coexist")
    store = Store(str(root / "store"))
    frame = valid_x.iloc[:20].copy()
    frame.columns = [f"f{i}" for i in range(frame.shape[1])]
    import xgboost

    booster = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
        xgboost.DMatrix(frame, label=np.arange(len(frame)) % 2),
        4,
    )
    commit_checkpoint(store, "run-coexist", MODEL, "c1", XGBoostCheckpoint.from_model(booster).path)
    src = root / "x.npy"
    np.save(src, frame.to_numpy(np.float64))
    return store.uri, src, booster.inplace_predict(frame.to_numpy(np.float64))


@pytest.mark.parametrize("order", sorted(IMPORTS))
def test_tritonclient_and_trainwire_in_one_process(served, order):
    store_uri, src, expected = served
    script = f'"""{order}"""\n' + IMPORTS[order] + PROBE % {"model": MODEL}
    proc = subprocess.run(
        [sys.executable, "-c", script, store_uri, str(src)], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["order"] == order
    assert report["triton_live"] and report["sdk_live"] and report["raw_ready"]
    columns = [f"f{i}" for i in range(len(report["triton_inputs"]))]
    assert report["triton_inputs"] == report["sdk_metadata_inputs"] == columns
    assert report["ours_in_private_pool"] and report["triton_in_default_pool"] and report["classes_distinct"]
    triton_out, sdk_out, raw_out = np.load(str(src) + ".out.npy")
    np.testing.assert_allclose(triton_out, expected, rtol=1e-6)
    np.testing.assert_array_equal(sdk_out, triton_out)
    np.testing.assert_array_equal(raw_out, triton_out)
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health"} <= set(report["services"])
    assert {"ModelInfer", "ModelStreamInfer", "RepositoryIndex"} <= set(report["reflected_methods"])
    # trainwire's service, not tritonclient's (which also declares tracing and log settings).
    assert "TraceSetting" not in report["reflected_methods"]
    assert "SystemSharedMemoryRegister" in report["reflected_methods"]


def test_stubs_stay_out_of_the_default_pool():
    from google.protobuf import descriptor_pool

    from trainwire_core.inference import grpc_service_pb2 as pb

    assert pb.DESCRIPTOR.pool is not descriptor_pool.Default()
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindFileByName(pb.DESCRIPTOR.name)
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x").shape.extend([2, 3])
    assert pb.ModelInferRequest.FromString(request.SerializeToString()) == request
    assert type(request.inputs[0]) is pb.ModelInferRequest.InferInputTensor
    assert pb.ModelInferRequest.InferInputTensor.__qualname__ == "ModelInferRequest.InferInputTensor"
    assert pb.ModelInferRequest.__module__ == "trainwire_core.inference.grpc_service_pb2"
