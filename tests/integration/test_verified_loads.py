"""Checkpoint files are checked against their manifest (size, sha256) before anything loads them."""

from __future__ import annotations

import json
import os
import tempfile

import grpc
import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pytest

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig
from trainwire_core.errors import DataLossError, error_for_code
from trainwire_core.storage import MANIFEST_NAME, Store

pytestmark = pytest.mark.timeout(120)

COLUMNS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(rng.normal(size=(64, len(COLUMNS))), columns=COLUMNS)


@pytest.fixture(scope="module")
def booster(frame):
    import xgboost

    label = (frame["a"] + frame["b"] > 0).astype(int)
    params = {"objective": "binary:logistic", "max_depth": 2, "nthread": 1}
    return xgboost.train(params, xgboost.DMatrix(frame, label=label), 4)


def commit(store: Store, run_id: str, booster) -> str:
    """Commits an XGBoost checkpoint the way the coordinator does; returns its directory."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager

    local = XGBoostCheckpoint.from_model(booster)
    local.set_metadata({"feature_columns": COLUMNS})
    directory = store.checkpoint_dir(run_id, "c1")
    files = store.upload_dir(local.path, directory)
    CheckpointManager(store, run_id, run_id, CheckpointConfig()).commit("c1", 1, {"index": 1}, files)
    return directory


def flip_byte(path: str, offset: int = 10) -> None:
    """Changes one byte in place: same size, different sha256."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(str(tmp_path / "store"))


def test_manifest_lists_every_file(store, booster):
    directory = commit(store, "run-a", booster)
    manifest = json.loads(store.read_bytes(f"{directory}/{MANIFEST_NAME}"))
    assert {f["path"] for f in manifest["files"]} >= {"model.ubj", ".metadata.json"}


def test_intact_checkpoint_loads(store, booster, frame, tmp_path):
    from trainwire.xgboost.predictor import XGBoostPredictor

    ckpt = Checkpoint(store.uri_of(commit(store, "run-a", booster)))
    out = ckpt.to_directory(tmp_path / "copy")
    assert os.path.exists(os.path.join(out, "model.ubj"))
    with ckpt.as_directory() as d:
        assert os.path.exists(os.path.join(d, "model.ubj"))
    got = XGBoostPredictor.from_checkpoint(ckpt).predict(frame)
    np.testing.assert_allclose(got["predictions"].to_numpy(), booster.inplace_predict(frame), rtol=1e-6)


def test_flipped_byte_refused_naming_the_file(store, booster, tmp_path, monkeypatch):
    directory = commit(store, "run-a", booster)
    model = os.path.join(directory, "model.ubj")
    size = os.path.getsize(model)
    flip_byte(model)
    assert os.path.getsize(model) == size
    ckpt = Checkpoint(store.uri_of(directory))
    with pytest.raises(DataLossError, match="'model.ubj'") as info:
        ckpt.to_directory(tmp_path / "copy")
    assert info.value.code == grpc.StatusCode.DATA_LOSS
    assert "sha256" in info.value.message
    with pytest.raises(DataLossError, match="'model.ubj'"), ckpt.as_directory():
        pass
    # A checkpoint on a non-local filesystem is downloaded, then checked; the copy is removed.
    remote = Checkpoint("runs/run-a/checkpoints/c1", pafs.SubTreeFileSystem(store.root, pafs.LocalFileSystem()))
    assert not remote.is_local
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(DataLossError, match="'model.ubj'"), remote.as_directory():
        pass
    assert list(scratch.iterdir()) == []


def test_changed_size_and_missing_file_refused(store, booster, tmp_path):
    directory = commit(store, "run-a", booster)
    with open(os.path.join(directory, ".metadata.json"), "ab") as f:
        f.write(b" ")
    with pytest.raises(DataLossError, match=r"'\.metadata\.json' has \d+ bytes"):
        Checkpoint(store.uri_of(directory)).to_directory(tmp_path / "copy")
    os.remove(os.path.join(directory, ".metadata.json"))
    with pytest.raises(DataLossError, match=r"'\.metadata\.json' is listed in its manifest but missing"):
        Checkpoint(store.uri_of(directory)).to_directory(tmp_path / "copy2")


def test_checkpoint_without_manifest_is_not_checked(booster, tmp_path):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    ckpt = XGBoostCheckpoint.from_model(booster)
    assert os.path.exists(os.path.join(ckpt.to_directory(tmp_path / "copy"), "model.ubj"))


def test_data_loss_maps_both_ways():
    from trainwire_core.grpc_status import to_status

    assert to_status(DataLossError("file 'x' is corrupt")).code == grpc.StatusCode.DATA_LOSS
    assert isinstance(error_for_code(grpc.StatusCode.DATA_LOSS, "m"), DataLossError)


def test_predictor_refuses_a_corrupt_checkpoint_once_checked_and_others_keep_serving(store, booster, frame):
    from trainwire.predictor_client import PredictorClient, encode_request
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    commit(store, "vl-good", booster)
    bad_dir = commit(store, "vl-bad", booster)
    flip_byte(os.path.join(bad_dir, "model.ubj"))

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2))
    thread.start()
    channel = grpc.insecure_channel(thread.server.address)
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with PredictorClient(thread.server.address) as client:
            expected = client.predict("vl-good", frame)
            for _ in range(3):
                with pytest.raises(grpc.RpcError) as info:
                    stub.ModelInfer(encode_request("vl-bad", frame.head(2)))
                assert info.value.code() == grpc.StatusCode.DATA_LOSS, info.value.details()
                assert "'model.ubj'" in info.value.details()
                assert "'vl-bad'" in info.value.details()
                # The other model keeps serving, with the same answers.
                pd.testing.assert_frame_equal(client.predict("vl-good", frame), expected)
        np.testing.assert_allclose(expected["predictions"].to_numpy(), booster.inplace_predict(frame), rtol=1e-6)
        # Checked once per checkpoint, however often it is asked for.
        models = thread.models
        assert models.verifications[("vl-good", "c1")] == 1
        assert models.verifications[("vl-bad", "c1")] == 1
        assert models.loads[("vl-good", "c1")] == 1
    finally:
        channel.close()
        thread.stop()


def test_the_predictors_compiled_cache_is_not_part_of_the_checkpoint(coordinator, client, store, tmp_path):
    """``.compiled/`` beside a model is the predictor's cache: not copied out, not uploadable."""
    from trainwire_core.manifest import COMPILED_DIR
    from trainwire_core.v1 import coordinator_pb2

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.txt").write_text("weights")
    info = client.upload_checkpoint(src, run_name="with-compiled-cache")
    ckpt = Checkpoint(info.uri)
    store.write_bytes(f"{ckpt.path}/{COMPILED_DIR}/model.so", b"\x7fELF...")
    assert sorted(os.listdir(ckpt.to_directory(tmp_path / "local"))) == [MANIFEST_NAME, "model.txt"]
    downloaded = client.download_checkpoint(info.uri, tmp_path / "downloaded")
    assert COMPILED_DIR not in os.listdir(downloaded)
    # The SDK leaves trainwire's own files out of an upload (a local copy of a run's checkpoint has them) ...
    (src / COMPILED_DIR).mkdir()
    (src / COMPILED_DIR / "model.so").write_bytes(b"\x7fELF")
    (src / MANIFEST_NAME).write_text('{"files": []}')
    reuploaded = Checkpoint(client.upload_checkpoint(src, run_name="local-copy").uri)
    assert sorted(os.listdir(reuploaded.to_directory(tmp_path / "reuploaded"))) == [MANIFEST_NAME, "model.txt"]
    # ... and the coordinator refuses a request that lists them.
    for smuggled in (f"{COMPILED_DIR}/model.so", MANIFEST_NAME):
        header = coordinator_pb2.UploadCheckpointHeader(run_name="smuggled-library")
        header.files.add(path=smuggled, size_bytes=4, sha256="0" * 64)
        with pytest.raises(grpc.RpcError) as err:
            client.stub.UploadCheckpoint(
                iter([coordinator_pb2.UploadCheckpointRequest(header=header)]), metadata=client._metadata
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "written by trainwire itself" in err.value.details()


def test_the_client_refuses_a_download_path_outside_the_target(tmp_path, monkeypatch):
    from trainwire.client import CoordinatorClient
    from trainwire_core.v1 import coordinator_pb2

    client = CoordinatorClient("127.0.0.1:1")
    monkeypatch.setattr(
        client.stub, "DownloadCheckpoint", lambda *a, **k: iter([coordinator_pb2.FileChunk(path="../evil", data=b"x")])
    )
    with pytest.raises(DataLossError, match="outside the checkpoint"):
        client.download_checkpoint("run/ckpt", tmp_path / "target")
    assert not (tmp_path / "evil").exists()
    client.close()
