"""``setup_wandb`` in a training loop and the W&B callback's media options, as Ray's (offline W&B)."""

from __future__ import annotations

import pytest

from trainwire.air.integrations.wandb import WandbLoggerCallback, setup_wandb
from trainwire.train.session import TrainContext, set_session

pytest.importorskip("wandb")


class _Session:
    def __init__(self, rank: int) -> None:
        self.context = TrainContext("run-abc", "my-run", rank, 2, rank, 2, 0)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    set_session(None)


def test_rank_zero_starts_the_runs_wandb_run_and_other_ranks_get_a_disabled_one(offline):
    set_session(_Session(1))
    other = setup_wandb({"lr": 0.1})
    assert other.disabled
    other.finish()
    set_session(_Session(0))
    run = setup_wandb({"lr": 0.1}, project="trainwire-tests")
    try:
        assert not run.disabled and run.id == "run-abc" and run.name == "my-run"
        assert run.config["lr"] == 0.1 and run.group == "my-run"
    finally:
        run.finish()
    set_session(_Session(1))
    every_rank = setup_wandb(rank_zero_only=False, trial_id="run-abc-1")
    try:
        assert not every_rank.disabled and every_rank.id == "run-abc-1"
    finally:
        every_rank.finish()


def test_reported_arrays_log_as_images_with_image_kwargs():
    import wandb

    callback = WandbLoggerCallback(upload_timeout=5, image_kwargs={"caption": "img"})
    image = [[[0.0, 0.5, 1.0]] * 4] * 4  # H, W, C
    media = callback._media({"frame": image, "frames": [image, image], "loss": 1.0, "ragged": [[1], [1, 2]]})
    assert set(media) == {"frame", "frames"}
    assert isinstance(media["frame"], wandb.Image) and media["frame"]._caption == "img"
    assert len(media["frames"]) == 2 and all(isinstance(m, wandb.Image) for m in media["frames"])
    assert callback.upload_timeout == 5


def test_reported_5d_arrays_log_as_videos_with_video_kwargs():
    import wandb

    pytest.importorskip("moviepy")  # W&B encodes raw frames with it
    callback = WandbLoggerCallback(video_kwargs={"fps": 2, "format": "gif"})
    video = [[[[[0.0] * 4] * 4] * 3] * 2]  # N=1, T, C, W, H
    media = callback._media({"clip": video})
    assert isinstance(media["clip"], wandb.Video) and media["clip"]._fps == 2
