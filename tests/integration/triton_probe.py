"""Drives a predictor with the real ``tritonclient.grpc`` (run as a subprocess).

It imports only tritonclient, so what it sees is what a Triton user's process
sees; trainwire's stubs coexist with it (tests/integration/test_tritonclient_coexistence.py).

Usage: python triton_probe.py ADDRESS MODEL INPUT.npz OUTPUT.npz
INPUT.npz holds either one array per input column or one 2-D array "input".
"""

from __future__ import annotations

import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import json_format


def infer_inputs(meta: dict, data: dict[str, np.ndarray], rows: slice) -> list:
    inputs = []
    for spec in meta["inputs"]:
        arr = np.ascontiguousarray(data[spec["name"]][rows])
        tensor = grpcclient.InferInput(spec["name"], list(arr.shape), spec["datatype"])
        tensor.set_data_from_numpy(arr.astype(np.float32 if spec["datatype"] == "FP32" else np.float64))
        inputs.append(tensor)
    return inputs


def wire_fields() -> dict:
    """Field (name, number, type, label) of every message tritonclient knows, for the wire test."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    out = {}

    def walk(desc):
        out[desc.full_name] = sorted([f.name, f.number, f.type, f.is_repeated] for f in desc.fields)
        for nested in desc.nested_types:
            walk(nested)

    for module in (service_pb2, model_config_pb2):
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            walk(desc)
    methods = {
        m.name: [m.input_type.full_name, m.output_type.full_name]
        for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    }
    return {"messages": out, "methods": methods}


def main() -> None:
    address, model, src, dst = sys.argv[1:5]
    data = dict(np.load(src))
    client = grpcclient.InferenceServerClient(address)
    report: dict = {"live": client.is_server_live(), "ready": client.is_server_ready()}
    report["model_ready"] = client.is_model_ready(model)
    meta = json_format.MessageToDict(client.get_model_metadata(model), preserving_proto_field_name=True)
    report["metadata"] = meta
    n = len(next(iter(data.values())))
    outputs = {}
    result = client.infer(model, infer_inputs(meta, data, slice(None)), request_id="unary")
    outputs["unary"] = result.as_numpy("predictions")
    report["unary_id"] = result.get_response().id

    # The stream: two good batches, a bad one (unknown model), then a good one.
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    half = n // 2
    client.async_stream_infer(model, infer_inputs(meta, data, slice(0, half)), request_id="s0")
    client.async_stream_infer(model, infer_inputs(meta, data, slice(half, None)), request_id="s1")
    client.async_stream_infer("no-such-model", infer_inputs(meta, data, slice(0, 2)), request_id="s2")
    client.async_stream_infer(model, infer_inputs(meta, data, slice(0, 3)), request_id="s3")
    stream = []
    for _ in range(4):
        result, error = answers.get(timeout=60)
        stream.append({"error": str(error) if error else "", "id": result.get_response().id if result else ""})
        if result is not None:
            outputs[f"stream_{result.get_response().id}"] = result.as_numpy("predictions")
    client.stop_stream()
    report["stream"] = stream
    report["wire"] = wire_fields()
    client.close()
    np.savez(dst, **outputs)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
