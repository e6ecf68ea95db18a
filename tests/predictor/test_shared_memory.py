"""Triton's system shared memory extension, driven by the real tritonclient (gRPC and HTTP) and its shm utilities."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import commit_checkpoint

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import Store
from trainwire_predictor.shared_memory import SharedMemoryRef, SharedMemoryRegistry, check_key

pytestmark = pytest.mark.timeout(120)
grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

MODEL = "shm-xgb"
ADMIN, USER = "adm-s3cret", "usr-s3cret"
ROWS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory, local_booster):
    """A predictor on gRPC and REST whose tokens are an admin and a predict-only user."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    root = tmp_path_factory.mktemp("shm")
    store = Store(str(root / "store"))
    commit_checkpoint(store, "run-shm", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path)
    tokens = {"ops": {"token": ADMIN, "scopes": ["admin"]}, "app": {"token": USER, "scopes": ["predict"]}}
    thread = PredictorThread(
        PredictorSettings(port=0, http_port=0, store=store.uri, tokens=json.dumps(tokens), compile_tree_models=False)
    )
    thread.start()
    yield thread.server
    thread.stop()


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def key():
    """A fresh POSIX shm key; the objects made under it are removed afterwards."""
    name = f"/tw-test-{uuid.uuid4().hex[:12]}"
    yield name
    for suffix in ("", "-out"):
        try:
            os.unlink(f"/dev/shm/{name[1:]}{suffix}")
        except FileNotFoundError:
            pass


@pytest.fixture(scope="module")
def columns(valid_x) -> dict[str, np.ndarray]:
    return {c: valid_x[c].to_numpy()[:ROWS] for c in valid_x.columns}


def status_of(client, protocol: str) -> list[dict]:
    """The registered regions as dicts, whichever protocol answered."""
    if protocol == "http":
        return client.get_system_shared_memory_status(headers=auth(USER))
    status = client.get_system_shared_memory_status(headers=auth(USER), as_json=True)
    return list(status.get("regions", {}).values())


def infer_plain(client, module, columns):
    inputs = []
    for name, arr in columns.items():
        tensor = module.InferInput(name, list(arr.shape), "FP64")
        tensor.set_data_from_numpy(arr)
        inputs.append(tensor)
    return client.infer(MODEL, inputs, headers=auth(USER)).as_numpy("predictions")


def infer_shm(client, module, columns, out_bytes: int, in_region="in", out_region="out", bad_offset=None):
    """An inference with every input at its offset in ``in_region`` and the predictions into ``out_region``."""
    inputs, offset = [], 0
    for i, (name, arr) in enumerate(columns.items()):
        tensor = module.InferInput(name, list(arr.shape), "FP64")
        tensor.set_shared_memory(in_region, arr.nbytes, offset if bad_offset is None or i else bad_offset)
        inputs.append(tensor)
        offset += arr.nbytes
    output = module.InferRequestedOutput("predictions")
    output.set_shared_memory(out_region, out_bytes)
    return client.infer(MODEL, inputs, outputs=[output], headers=auth(USER))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_inputs_and_outputs_in_shared_memory_answer_as_without(server, columns, key, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    url = server.address if protocol == "grpc" else server.http_address
    client = module.InferenceServerClient(url)
    expected = infer_plain(client, module, columns)
    blob = [arr for arr in columns.values()]
    in_size = sum(a.nbytes for a in blob)
    out_size = expected.nbytes
    region_in = shm.create_shared_memory_region("in", key, in_size)
    region_out = shm.create_shared_memory_region("out", key + "-out", out_size + 64)
    try:
        shm.set_shared_memory_region(region_in, blob)
        client.register_system_shared_memory("in", key, in_size, headers=auth(ADMIN))
        client.register_system_shared_memory("out", key + "-out", out_size + 64, headers=auth(ADMIN))
        regions = {r["name"]: r for r in status_of(client, protocol)}
        assert set(regions) == {"in", "out"}
        assert (regions["in"]["key"], int(regions["in"]["byte_size"])) == (key, in_size)

        result = infer_shm(client, module, columns, out_size + 64)
        assert result.get_output("predictions") is not None  # metadata only: the data lies in the region
        got = shm.get_contents_as_numpy(region_out, expected.dtype, expected.shape)
        np.testing.assert_array_equal(got, expected)

        # Bounds: an input past its region, and an output given too little room, name their parameter.
        with pytest.raises(InferenceServerException) as info:
            infer_shm(client, module, columns, out_size + 64, bad_offset=in_size)
        assert "shared_memory_byte_size" in info.value.message()
        assert info.value.status() in ("StatusCode.INVALID_ARGUMENT", "400")
        with pytest.raises(InferenceServerException) as info:
            infer_shm(client, module, columns, out_size - 1)
        assert "shared_memory_byte_size" in info.value.message()
        assert info.value.status() in ("StatusCode.INVALID_ARGUMENT", "400")
        with pytest.raises(InferenceServerException) as info:
            infer_shm(client, module, columns, out_size, in_region="nope")
        assert "'nope'" in info.value.message()

        # A region larger than the object, a traversing key and a taken name are refused at registration.
        for bad_key, size in ((key, in_size + 1), ("/../etc/passwd", 8), ("tw-no-slash", 8), ("/.", 8)):
            with pytest.raises(InferenceServerException) as info:
                client.register_system_shared_memory("bad", bad_key, size, headers=auth(ADMIN))
            assert info.value.status() in ("StatusCode.INVALID_ARGUMENT", "400"), (bad_key, info.value)
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("in", key, 8, headers=auth(ADMIN))
        assert info.value.status() in ("StatusCode.ALREADY_EXISTS", "409")

        # Only an admin token may register or unregister; predict may read the status.
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("user", key, 8, headers=auth(USER))
        assert info.value.status() in ("StatusCode.PERMISSION_DENIED", "403")
        with pytest.raises(InferenceServerException) as info:
            client.unregister_system_shared_memory("in", headers=auth(USER))
        assert info.value.status() in ("StatusCode.PERMISSION_DENIED", "403")

        client.unregister_system_shared_memory("in", headers=auth(ADMIN))
        assert [r["name"] for r in status_of(client, protocol)] == ["out"]
        client.unregister_system_shared_memory(headers=auth(ADMIN))
        assert status_of(client, protocol) == []
        with pytest.raises(InferenceServerException) as info:
            infer_shm(client, module, columns, out_size + 64)
        assert "no shared memory region 'in'" in info.value.message()
    finally:
        shm.destroy_shared_memory_region(region_in)
        shm.destroy_shared_memory_region(region_out)
        client.close()


@contextlib.contextmanager
def _registered_regions(client: Any, module: Any, columns: dict, key: str) -> Iterator[tuple[Any, np.ndarray]]:
    """Input (the columns, back to back) and output regions registered on the server.

    Yields the output region and the answer to the same rows sent plainly.
    """
    blob = list(columns.values())
    in_size = sum(a.nbytes for a in blob)
    region_in = shm.create_shared_memory_region("in", key, in_size)
    region_out = shm.create_shared_memory_region("out", key + "-out", 8 * ROWS)
    try:
        expected = infer_plain(client, module, columns)
        shm.set_shared_memory_region(region_in, blob)
        client.register_system_shared_memory("in", key, in_size, headers=auth(ADMIN))
        client.register_system_shared_memory("out", key + "-out", 8 * ROWS, headers=auth(ADMIN))
        yield region_out, expected
    finally:
        client.unregister_system_shared_memory(headers=auth(ADMIN))
        shm.destroy_shared_memory_region(region_in)
        shm.destroy_shared_memory_region(region_out)


@pytest.mark.parametrize("output_in_shm", [True, False])
def test_a_grpc_request_with_tensors_in_shared_memory_is_answered_raw_one_entry_per_output(
    server, columns, key, output_in_shm
):
    """Triton's C++ client (perf_analyzer's) reads raw_output_contents[i] for each output i, never checking the
    index: a request with no raw inputs (all in shared memory) must still be answered raw, an empty entry
    standing for an output in shared memory. Answered in typed contents, perf_analyzer crashed (SIGSEGV)."""
    import grpc

    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc

    client = grpcclient.InferenceServerClient(server.address)
    with client, _registered_regions(client, grpcclient, columns, key) as (region_out, expected):
        # The smallest such request, as perf_analyzer sends it: no raw_input_contents at all.
        request = pb.ModelInferRequest(model_name=MODEL)
        offset = 0
        for name, arr in columns.items():
            tensor = request.inputs.add(name=name, datatype="FP64", shape=list(arr.shape))
            tensor.parameters["shared_memory_region"].string_param = "in"
            tensor.parameters["shared_memory_byte_size"].int64_param = arr.nbytes
            tensor.parameters["shared_memory_offset"].int64_param = offset
            offset += arr.nbytes
        out = request.outputs.add(name="predictions")
        if output_in_shm:
            out.parameters["shared_memory_region"].string_param = "out"
            out.parameters["shared_memory_byte_size"].int64_param = 8 * ROWS
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            response = stub.ModelInfer(request, metadata=[("authorization", f"Bearer {USER}")], timeout=60)
        assert [o.name for o in response.outputs] == ["predictions"]
        assert list(response.outputs[0].shape) == [ROWS] and response.outputs[0].datatype == "FP32"
        assert not response.outputs[0].HasField("contents")
        assert len(response.raw_output_contents) == len(response.outputs)
        if output_in_shm:
            assert response.raw_output_contents[0] == b""
            assert response.outputs[0].parameters["shared_memory_region"].string_param == "out"
            got = shm.get_contents_as_numpy(region_out, expected.dtype, expected.shape)
        else:
            got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
        np.testing.assert_array_equal(got, expected)


def test_a_rest_output_in_shared_memory_is_named_with_no_parameters_or_data(server, columns, key):
    """As Triton's HTTP answer: Triton's C++ client reads an output's ``parameters`` as ``binary_data_size``."""
    import urllib.request

    client = httpclient.InferenceServerClient(server.http_address)
    with client, _registered_regions(client, httpclient, columns, key) as (region_out, expected):
        inputs, offset = [], 0
        for name, arr in columns.items():
            params = {
                "shared_memory_region": "in",
                "shared_memory_byte_size": arr.nbytes,
                "shared_memory_offset": offset,
            }
            inputs.append({"name": name, "datatype": "FP64", "shape": [ROWS], "parameters": params})
            offset += arr.nbytes
        out = {
            "name": "predictions",
            "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 8 * ROWS},
        }
        body = json.dumps({"inputs": inputs, "outputs": [out]}).encode()
        request = urllib.request.Request(
            f"http://{server.http_address}/v2/models/{MODEL}/infer",
            body,
            {"content-type": "application/json", **auth(USER)},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            doc = json.loads(answer.read())
        assert doc["outputs"] == [{"name": "predictions", "datatype": "FP32", "shape": [ROWS]}]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(region_out, expected.dtype, expected.shape), expected)


def _perf_analyzer_ready() -> bool:
    """Whether scripts/perf_analyzer.sh has its binary and libraries already (a test never downloads them)."""
    import pathlib

    home = pathlib.Path(os.environ.get("TRAINWIRE_PERF_ANALYZER_HOME", "~/.cache/trainwire/perf_analyzer")).expanduser()
    binary = any(p.is_file() for p in (home / "wheel").rglob("perf_analyzer")) if (home / "wheel").is_dir() else False
    loader = any((home / "root" / d / "ld-linux-x86-64.so.2").exists() for d in ("usr/lib/x86_64-linux-gnu", "lib"))
    return binary and loader


@pytest.mark.skipif(not _perf_analyzer_ready(), reason="perf_analyzer is not set up (scripts/perf_analyzer.sh)")
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_runs_with_system_shared_memory(tmp_path, protocol):
    """Triton's perf_analyzer, --shared-memory system, over each protocol (on gRPC it crashed before the fix).

    The booster is trained on a bare matrix, so its one input is [-1, 6]: perf_analyzer cannot feed
    per-column inputs whose rows are scalars.
    """
    import csv
    import pathlib
    import subprocess

    import xgboost
    from conftest import commit_checkpoint

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6))
    booster = xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(x, label=x[:, 0] > 0), 4)
    store = Store(str(tmp_path / "store"))
    commit_checkpoint(store, "run-pa", MODEL, "c1", XGBoostCheckpoint.from_model(booster).path)
    thread = PredictorThread(PredictorSettings(port=0, http_port=0, store=store.uri, compile_tree_models=False))
    thread.start()
    try:
        url = thread.server.address if protocol == "grpc" else thread.server.http_address
        out = tmp_path / "pa.csv"
        script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "perf_analyzer.sh"
        proc = subprocess.run(
            ["bash", str(script), "-m", MODEL, "-u", url, "-i", protocol, "-b", "4", "--shape", "input:6"]
            + ["--concurrency-range", "1"]
            + ["--measurement-mode", "count_windows", "--measurement-request-count", "20", "--max-trials", "3"]
            + ["--stability-percentage", "1000", "--shared-memory", "system", "-f", str(out)],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
        with out.open() as f:
            assert float(next(csv.DictReader(f))["Inferences/Second"]) > 0
    finally:
        thread.stop()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_cuda_shared_memory_is_unimplemented(server, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(server.address if protocol == "grpc" else server.http_address)
    with pytest.raises(InferenceServerException) as info:
        client.get_cuda_shared_memory_status(headers=auth(USER))
    assert info.value.status() in ("StatusCode.UNIMPLEMENTED", "501")
    assert "CUDA shared memory is not supported" in info.value.message()
    # Nothing to drop: unregistering every region (perf_analyzer's last call) succeeds.
    client.unregister_cuda_shared_memory(headers=auth(ADMIN))
    client.close()


def test_server_metadata_lists_the_extension(server):
    client = grpcclient.InferenceServerClient(server.address)
    assert "system_shared_memory" in client.get_server_metadata(headers=auth(USER)).extensions
    client.close()


def test_keys_are_plain_posix_names():
    assert check_key("/input_0 a.b") == "input_0 a.b"
    for bad in ("", "/", "noslash", "/a/b", "/..", "/.", "//x", "/a\\b", "/a\nb", "/" + "x" * 256):
        with pytest.raises(InvalidArgumentError) as info:
            check_key(bad)
        assert info.value.field == "key"


def test_links_and_short_objects_are_refused(tmp_path):
    registry = SharedMemoryRegistry(str(tmp_path))
    (tmp_path / "obj").write_bytes(b"\0" * 64)
    (tmp_path / "link").symlink_to(tmp_path / "obj")
    with pytest.raises(InvalidArgumentError, match="cannot open"):
        registry.register("r", "/link", 0, 8)
    with pytest.raises(InvalidArgumentError) as info:
        registry.register("r", "/obj", 60, 8)
    assert info.value.field == "byte_size"
    registry.register("r", "/obj", 16, 32)
    registry.write(SharedMemoryRef("r", 8, 24), b"abcdefgh")
    assert (tmp_path / "obj").read_bytes()[40:48] == b"abcdefgh"
    assert registry.read(SharedMemoryRef("r", 8, 24)) == b"abcdefgh"
    with pytest.raises(InvalidArgumentError) as info:
        registry.read(SharedMemoryRef("r", 8, 25, "inputs[3].parameters"))
    assert info.value.field == "inputs[3].parameters.shared_memory_byte_size"
    with pytest.raises(InvalidArgumentError) as info:
        registry.read(SharedMemoryRef("r", 0, 33, "inputs[3].parameters"))
    assert info.value.field == "inputs[3].parameters.shared_memory_offset"
    registry.close()
    assert registry.status() == []
