"""The real tritonclient (gRPC) against a running predictor, on models from real Fits."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trainwire_core.inference import grpc_service_pb2

pytestmark = pytest.mark.timeout(240)

PROBE = os.path.join(os.path.dirname(__file__), "triton_probe.py")


def run_probe(address: str, model: str, inputs: dict[str, np.ndarray], tmp_path) -> tuple[dict, dict]:
    # A fresh interpreter per probe: tritonclient starts with nothing of this session's state
    # (test_tritonclient_coexistence.py runs it beside trainwire's stubs, in one process).
    if importlib.util.find_spec("tritonclient") is None:
        pytest.skip("tritonclient is not installed (pip install tritonclient)")
    src, dst = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(src, **inputs)
    proc = subprocess.run(
        [sys.executable, PROBE, address, model, str(src), str(dst)], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return report, dict(np.load(dst))


def same_floats(actual: np.ndarray, desired: np.ndarray) -> None:
    """float32 network outputs agree to float32 rounding: the predictor's process may use other BLAS
    threads or batch sizes than the test's, which reorders the sums."""
    np.testing.assert_allclose(actual, desired, rtol=1e-4, atol=1e-5)


def check_stream(report: dict, outputs: dict, predict, n: int, same=np.testing.assert_array_equal) -> None:
    """The stream's answers equal in-process answers on the same batches; the bad one errs alone."""
    half = n // 2
    assert [s["id"] for s in report["stream"]] == ["s0", "s1", "", "s3"]
    assert "model 'no-such-model' not found" in report["stream"][2]["error"]
    same(outputs["stream_s0"].reshape(-1), predict(slice(0, half)))
    same(outputs["stream_s1"].reshape(-1), predict(slice(half, None)))
    same(outputs["stream_s3"].reshape(-1), predict(slice(0, 3)))


def test_tritonclient_on_xgboost(predictor_address, xgb_result, valid_x, tmp_path):
    from trainwire.xgboost.predictor import XGBoostPredictor

    local = XGBoostPredictor.from_checkpoint(xgb_result.checkpoint)
    expected = local.predict(valid_x)["predictions"].to_numpy()
    report, outputs = run_probe(
        predictor_address, "pred-cancer-xgb", {c: valid_x[c].to_numpy() for c in valid_x.columns}, tmp_path
    )
    assert report["live"] and report["ready"] and report["model_ready"]
    assert report["metadata"]["platform"] == "xgboost"
    assert [i["name"] for i in report["metadata"]["inputs"]] == list(valid_x.columns)
    assert report["unary_id"] == "unary"
    np.testing.assert_array_equal(outputs["unary"], expected)
    check_stream(report, outputs, lambda rows: local.predict(valid_x[rows])["predictions"].to_numpy(), len(valid_x))


def test_tritonclient_on_torch(predictor_address, torch_result, valid_x, tmp_path):
    from trainwire.torch.predictor import TorchPredictor

    x = valid_x.to_numpy(np.float32)
    local = TorchPredictor.from_checkpoint(torch_result.checkpoint)
    expected = local.predict(x)["predictions"]
    report, outputs = run_probe(predictor_address, "pred-cancer-torch", {"input": x}, tmp_path)
    assert report["metadata"]["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "-1"]}]
    same_floats(outputs["unary"].reshape(-1), expected)
    check_stream(report, outputs, lambda rows: local.predict(x[rows])["predictions"], len(x), same_floats)


def test_wire_compatible_with_tritons_protos(predictor_address, xgb_result, valid_x, tmp_path):
    """Every message and RPC trainwire defines has Triton's field names, numbers and types.

    The model configuration's messages are a subset of Triton's ``model_config.proto``: each
    field trainwire defines is Triton's, and the fields it leaves out are never sent.
    """
    report, _ = run_probe(
        predictor_address, "pred-cancer-xgb", {c: valid_x[c].to_numpy()[:4] for c in valid_x.columns}, tmp_path
    )
    triton = report["wire"]
    ours = {}

    def walk(desc):
        ours[desc.full_name] = sorted([f.name, f.number, f.type, f.is_repeated] for f in desc.fields)
        for nested in desc.nested_types:
            walk(nested)

    for desc in grpc_service_pb2.DESCRIPTOR.message_types_by_name.values():
        walk(desc)
    config = grpc_service_pb2.DESCRIPTOR.message_types_by_name["ModelConfig"]
    subsets = {"inference.ModelConfig", "inference.ModelConfig.ParametersEntry"}
    subsets |= {f.message_type.full_name for f in config.fields if f.message_type is not None}
    subsets |= {"inference.ModelTensorReshape", "inference.ModelVersionPolicy.Latest"}
    for name, fields in ours.items():
        theirs = triton["messages"].get(name)
        assert theirs is not None, name
        if name in subsets:
            assert {tuple(f) for f in fields} <= {tuple(f) for f in theirs}, name
        else:
            assert theirs == fields, name
    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for method in service.methods:
        assert triton["methods"][method.name] == [method.input_type.full_name, method.output_type.full_name]
