"""Triton's system shared memory extension, driven by the real tritonclient (gRPC and HTTP) and its shm utilities."""

from __future__ import annotations

import json
import os
import uuid

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


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_cuda_shared_memory_is_unimplemented(server, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(server.address if protocol == "grpc" else server.http_address)
    with pytest.raises(InferenceServerException) as info:
        client.get_cuda_shared_memory_status(headers=auth(USER))
    assert info.value.status() in ("StatusCode.UNIMPLEMENTED", "501")
    assert "CUDA shared memory is not supported" in info.value.message()
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
