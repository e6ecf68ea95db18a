"""SyncConfig: each worker's artifact directory is copied into the run's directory in the store."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, SyncConfig, train
from trainwire.torch import TorchTrainer
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(180)


def artifact_loop() -> None:
    import pyarrow.fs as pafs

    context = train.get_context()
    rank = context.get_world_rank()
    log = os.path.join(context.get_trial_dir(), "log.txt")
    with open(log, "w") as f:
        f.write(f"rank {rank} started\n")
    # The periodic sync copies it before any report or checkpoint.
    fs, root = pafs.FileSystem.from_uri(context.get_storage())
    synced_early = False
    deadline = time.monotonic() + 20
    while not synced_early and time.monotonic() < deadline:
        time.sleep(0.1)
        synced_early = fs.get_file_info(f"{root}/artifacts/rank_{rank}/log.txt").type == pafs.FileType.File
    for step in range(3):
        with open(log, "a") as f:
            f.write(f"step {step}\n")
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            train.report({"step": step, "synced_early": synced_early}, checkpoint=Checkpoint.from_directory(d))
    with open(os.path.join(context.get_trial_dir(), "final.txt"), "w") as f:
        f.write("done\n")


def _fit(sync: SyncConfig):
    return TorchTrainer(
        artifact_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(sync_config=sync, verbose=0),
    ).fit()


def test_artifacts_of_every_rank_reach_the_store(coordinator, store):
    result = _fit(SyncConfig(sync_artifacts=True, sync_period_s=0.2))
    assert result.metrics["synced_early"] is True, "the periodic sync ran before the first report"
    for rank in (0, 1):
        base = store.path("runs", result.run_id, "artifacts", f"rank_{rank}")
        log = store.read_bytes(f"{base}/log.txt").decode()
        assert log == f"rank {rank} started\nstep 0\nstep 1\nstep 2\n"
        assert store.read_bytes(f"{base}/final.txt") == b"done\n", "the last sync runs at the end"


def test_without_sync_artifacts_nothing_is_copied(coordinator, store):
    result = TorchTrainer(
        _quick_loop,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert store.list_dir(store.path("runs", result.run_id, "artifacts")) == []


def _quick_loop() -> None:
    with open(os.path.join(train.get_context().get_trial_dir(), "log.txt"), "w") as f:
        f.write("not synced\n")
    train.report({"step": 0})


def test_a_declarative_trainer_cannot_sync_artifacts(coordinator, cancer_data):
    from trainwire.xgboost import XGBoostTrainer

    with pytest.raises(InvalidArgumentError) as info:
        XGBoostTrainer(
            params={"objective": "binary:logistic"},
            label_column="target",
            datasets={"train": cancer_data[0]},
            run_config=RunConfig(sync_config=SyncConfig(sync_artifacts=True), verbose=0),
        ).fit()
    assert info.value.field == "run_config.sync_config.sync_artifacts"


def test_syncing_needs_a_timeout():
    with pytest.raises(InvalidArgumentError) as info:
        SyncConfig(sync_artifacts=True, sync_timeout_s=0)
    assert info.value.field == "run_config.sync_config.sync_timeout_s"
