"""TorchTrainer end to end: a real gloo process group across two workers."""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np
import pandas as pd
import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, TrainingFailedError, train
from trainwire.torch import TorchCheckpoint, TorchTrainer, prepare_model
from trainwire.trainer import BaseTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(240)

FEATURES = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def linear_data() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    df = pd.DataFrame(x, columns=FEATURES)
    df["y"] = x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.1
    df["id"] = np.arange(64)
    return df


def linear_loop(config: dict) -> None:
    """Trains y = xw + b with DDP; every rank writes what it saw into the checkpoint."""
    import torch

    ctx = train.get_context()
    torch.manual_seed(ctx.get_world_rank())  # different init per rank: DDP must sync them
    model = prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start_epoch = 0
    if (checkpoint := train.get_checkpoint()) is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
            model.module.load_state_dict(state) if hasattr(model, "module") else model.load_state_dict(state)
            start_epoch = json.load(open(os.path.join(d, "worker_0.json")))["epoch"] + 1
    shard = train.get_dataset_shard("train")
    for epoch in range(start_epoch, start_epoch + config["epochs"]):
        ids: list[int] = []
        for batch in shard.iter_torch_batches(batch_size=8, dtypes=torch.float32):
            x = torch.stack([batch[c] for c in FEATURES], dim=1)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ids += batch["id"].long().tolist()
        with tempfile.TemporaryDirectory() as d:
            params = [p.detach().flatten().tolist() for p in model.parameters()]
            summary = {
                "rank": ctx.get_world_rank(),
                "world_size": ctx.get_world_size(),
                "local_rank": ctx.get_local_rank(),
                "run_name": ctx.get_experiment_name(),
                "epoch": epoch,
                "ids": ids,
                "params": params,
                "resumed": checkpoint is not None,
            }
            json.dump(summary, open(os.path.join(d, f"worker_{ctx.get_world_rank()}.json"), "w"))
            if ctx.get_world_rank() == 0:
                torch.save(getattr(model, "module", model).state_dict(), os.path.join(d, "model.pt"))
            train.report(
                {"epoch": epoch, "loss": loss.item(), "world_size": ctx.get_world_size()},
                checkpoint=Checkpoint.from_directory(d),
            )
        time.sleep(config.get("sleep_s", 0))


@pytest.fixture(scope="module")
def torch_result(coordinator, linear_data):
    return TorchTrainer(
        linear_loop,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": linear_data},
        run_config=RunConfig(name="linear"),
    ).fit()


def _summaries(checkpoint: Checkpoint) -> list[dict]:
    with checkpoint.as_directory() as d:
        return [json.load(open(os.path.join(d, f"worker_{r}.json"))) for r in (0, 1)]


def test_two_ranks_see_world_size_two_and_different_shards(torch_result, linear_data):
    s0, s1 = _summaries(torch_result.checkpoint)
    assert (s0["rank"], s1["rank"]) == (0, 1)
    assert s0["world_size"] == s1["world_size"] == 2
    assert s0["run_name"] == "linear"
    assert set(s0["ids"]).isdisjoint(s1["ids"])
    assert sorted(s0["ids"] + s1["ids"]) == list(linear_data["id"])


def test_parameters_agree_after_training(torch_result):
    s0, s1 = _summaries(torch_result.checkpoint)
    np.testing.assert_allclose(np.concatenate(s0["params"]), np.concatenate(s1["params"]), rtol=1e-6)
    assert torch_result.metrics["world_size"] == 2
    assert torch_result.metrics_dataframe["loss"].iloc[-1] < torch_result.metrics_dataframe["loss"].iloc[0]


def test_torch_checkpoint_loads_the_model(torch_result):
    import torch

    ckpt = TorchCheckpoint(torch_result.checkpoint.uri)
    model = ckpt.get_model(torch.nn.Linear(4, 1))
    s0, _ = _summaries(torch_result.checkpoint)
    np.testing.assert_allclose(
        np.concatenate([p.detach().flatten().numpy() for p in model.parameters()]), np.concatenate(s0["params"])
    )


def test_resume_from_checkpoint_starts_from_the_first_runs_checkpoint(torch_result, linear_data):
    resumed = TorchTrainer(
        linear_loop,
        train_loop_config={"epochs": 1},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": linear_data},
        resume_from_checkpoint=torch_result.checkpoint,
        run_config=RunConfig(verbose=0),
    ).fit()
    s0, s1 = _summaries(resumed.checkpoint)
    assert s0["resumed"] and s1["resumed"]
    assert s0["epoch"] == 3  # the first run ended after epoch 2
    assert resumed.checkpoint.uri != torch_result.checkpoint.uri


def test_metrics_arrive_while_the_run_is_going(coordinator, client, linear_data):
    trainer = TorchTrainer(
        linear_loop,
        train_loop_config={"epochs": 3, "sleep_s": 1.0},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": linear_data},
        run_config=RunConfig(verbose=0),
    )
    run = client.fit(trainer.build_request(client))
    states_at_metrics = []
    for event in client.watch_run(run.run_id):
        if event.WhichOneof("kind") == "metrics":
            states_at_metrics.append(client.get_run(run.run_id).state)
    assert len(states_at_metrics) == 3
    assert states_at_metrics[0] == common_pb2.RUNNING
    assert client.get_run(run.run_id).state == common_pb2.SUCCEEDED


def failing_loop(config: dict) -> None:
    if train.get_context().get_world_rank() == 1:
        raise ValueError("boom on rank 1")
    time.sleep(30)  # rank 0 would wait for its peer; the group is torn down first


def test_a_failing_loop_ends_the_run_failed_with_rank_type_message_traceback(coordinator):
    with pytest.raises(TrainingFailedError) as info:
        TorchTrainer(failing_loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
    error = info.value.result.error
    assert error.world_rank == 1
    assert error.exc_type == "ValueError"
    assert error.message == "boom on rank 1"
    assert "failing_loop" in error.traceback and "ValueError: boom on rank 1" in error.traceback
    assert info.value.result.state == "FAILED"
    assert "rank 1" in str(info.value)


def unknown_shard_loop() -> None:
    train.get_dataset_shard("nope")


def test_unknown_dataset_name_in_get_dataset_shard_names_it(coordinator, linear_data):
    with pytest.raises(TrainingFailedError) as info:
        TorchTrainer(
            unknown_shard_loop,
            datasets={"train": linear_data},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0),
        ).fit()
    error = info.value.result.error
    assert error.exc_type == "InvalidArgumentError"
    assert "'nope'" in error.message and "train" in error.message


def data_loader_loop() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainwire.torch import prepare_data_loader

    loader = prepare_data_loader(DataLoader(TensorDataset(torch.arange(20)), batch_size=4, shuffle=True))
    seen = [int(i) for (batch,) in loader for i in batch]
    with tempfile.TemporaryDirectory() as d:
        json.dump(seen, open(os.path.join(d, f"seen_{train.get_context().get_world_rank()}.json"), "w"))
        train.report({"n": len(seen)}, checkpoint=Checkpoint.from_directory(d))


def test_prepare_data_loader_gives_each_rank_its_own_part(coordinator):
    result = TorchTrainer(
        data_loader_loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)
    ).fit()
    with result.checkpoint.as_directory() as d:
        seen = [json.load(open(os.path.join(d, f"seen_{r}.json"))) for r in (0, 1)]
    assert len(seen[0]) == len(seen[1]) == 10
    assert sorted(seen[0] + seen[1]) == list(range(20))


def test_base_trainer_is_abstract():
    with pytest.raises(NotImplementedError):
        BaseTrainer()._fill_spec(None)
