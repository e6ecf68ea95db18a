"""CheckpointConfig retention, the committed index and the manifest."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from trainwire import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig, train
from trainwire.torch import TorchTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(180)

SCORES = [3.0, 1.0, 4.0, 0.5, 2.0]


def scored_loop(config: dict) -> None:
    for step, score in enumerate(config["scores"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write(f"step {step}")
            train.report({"score": score, "step": step}, checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def retained(coordinator):
    return TorchTrainer(
        scored_loop,
        train_loop_config={"scores": SCORES},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(
            name="retention",
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="score", checkpoint_score_order="min"
            ),
            verbose=0,
        ),
    ).fit()


def test_keeps_the_best_n_and_the_latest_best_first(retained):
    scores = [m["score"] for _, m in retained.best_checkpoints]
    # Best two by "min" (0.5, 1.0) plus the latest (2.0), which is never deleted.
    assert scores == [0.5, 1.0, 2.0]
    assert retained.checkpoint == retained.best_checkpoints[2][0]
    assert retained.metrics["score"] == 2.0


def test_dropped_checkpoints_are_gone_from_the_store(retained, store):
    base = store.path("runs", retained.run_id, "checkpoints")
    kept = sorted(store.list_dir(base))
    assert kept == sorted(os.path.basename(c.path) for c, _ in retained.best_checkpoints)
    assert len(kept) == 3


def test_index_and_manifest_describe_the_committed_checkpoints(retained, store):
    index = store.read_json(store.index_path(retained.run_id))
    assert [c["metrics"]["score"] for c in index["checkpoints"]] == [1.0, 0.5, 2.0]
    assert index["best"] == os.path.basename(retained.best_checkpoints[0][0].path)
    assert index["latest"] == os.path.basename(retained.checkpoint.path)
    assert store.read_json(store.name_path("retention"))["run_id"] == retained.run_id
    with retained.checkpoint.as_directory() as d:
        manifest = json.load(open(os.path.join(d, "manifest.json")))
        assert manifest["framework"] == "torch"
        (entry,) = manifest["files"]
        assert entry["path"] == "state.txt"
        assert entry["size_bytes"] == os.path.getsize(os.path.join(d, "state.txt"))
        import hashlib

        assert entry["sha256"] == hashlib.sha256(open(os.path.join(d, "state.txt"), "rb").read()).hexdigest()


def test_download_checkpoint_over_grpc(retained, client, tmp_path):
    ckpt_id = os.path.basename(retained.checkpoint.path)
    out = client.download_checkpoint(f"retention/{ckpt_id}", tmp_path / "dl")
    assert open(os.path.join(out, "state.txt")).read() == "step 4"


def _write_dir(root, files: dict[str, bytes]):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_upload_checkpoint_makes_a_run_with_that_checkpoint(client, tmp_path):
    src = _write_dir(tmp_path / "src", {"model.bin": b"\x00\x01" * 5000, "sub/config.json": b"{}", "empty": b""})
    info = client.upload_checkpoint(src, "registered", {"acc": 0.75})
    run = client.get_run("registered")
    assert run.state == common_pb2.SUCCEEDED and run.state_reason == "uploaded checkpoint"
    assert run.latest_checkpoint.checkpoint_id == info.checkpoint_id
    assert dict(run.latest_metrics) == {"acc": 0.75}
    out = client.download_checkpoint(f"registered/{info.checkpoint_id}", tmp_path / "back")
    for rel in ("model.bin", "sub/config.json", "empty"):
        assert (tmp_path / "back" / rel).read_bytes() == (src / rel).read_bytes()
    assert Checkpoint(info.uri).get_metadata() == {}
    assert out


def test_bad_checkpoint_uploads_store_nothing(client, coordinator_address, store, tmp_path):
    import grpc

    from trainwire_core.grpc_status import field_of
    from trainwire_core.v1 import coordinator_pb2, coordinator_pb2_grpc

    stub = coordinator_pb2_grpc.CoordinatorStub(grpc.insecure_channel(coordinator_address))
    runs_before = set(store.list_dir(store.path("runs")))

    def upload(path: str, declared: int, data: bytes):
        header = coordinator_pb2.UploadCheckpointHeader(run_name="bad-upload")
        header.files.add(path=path, size_bytes=declared, sha256="0" * 64)
        return stub.UploadCheckpoint(
            iter(
                [
                    coordinator_pb2.UploadCheckpointRequest(header=header),
                    coordinator_pb2.UploadCheckpointRequest(
                        chunk=coordinator_pb2.FileChunk(path=path, offset=0, data=data)
                    ),
                ]
            )
        )

    with pytest.raises(grpc.RpcError) as info:
        upload("../escape", 3, b"abc")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(info.value) == "header.files[0].path"
    with pytest.raises(grpc.RpcError) as info:
        upload("model.bin", 10, b"abc")  # truncated
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "got 3 of 10 bytes" in info.value.details()
    assert set(store.list_dir(store.path("runs"))) == runs_before
    from trainwire_core.errors import NotFoundError

    with pytest.raises(NotFoundError):
        client.get_run("bad-upload")


def test_a_runs_own_storage_path(coordinator, client, tmp_path):
    own = tmp_path / "team-store"
    result = TorchTrainer(
        scored_loop,
        train_loop_config={"scores": [1.0]},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="own-store", storage_path=str(own), verbose=0),
    ).fit()
    assert result.path == f"file://{own}/runs/{result.run_id}"
    assert result.checkpoint.path.startswith(f"{own}/runs/{result.run_id}/checkpoints/")
    assert (own / "runs" / result.run_id / "checkpoints.json").exists()
    out = client.download_checkpoint("own-store", tmp_path / "dl")
    assert open(os.path.join(out, "state.txt")).read() == "step 0"


def test_download_by_uri_only_inside_the_coordinators_store(client, tmp_path):
    from trainwire_core.errors import PermissionDeniedError

    (tmp_path / "secret").write_text("no")
    with pytest.raises(PermissionDeniedError) as info:
        client.download_checkpoint(f"file://{tmp_path}", tmp_path / "dl")
    assert info.value.field == "checkpoint"
    with pytest.raises(PermissionDeniedError):
        client.download_checkpoint("file:///etc", tmp_path / "dl2")
