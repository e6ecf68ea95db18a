"""HorovodTrainer end to end: horovod.torch over gloo on two workers, no horovodrun."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, train
from trainwire.horovod import HorovodCheckpoint, HorovodConfig, HorovodPredictor, HorovodTrainer
from trainwire.torch import TorchCheckpoint, TorchPredictor
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(300)

FEATURES = ["a", "b", "c", "d"]
HOROVOD_VARS = [
    "HOROVOD_HOSTNAME",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_CONTROLLER",
    "HOROVOD_CPU_OPERATIONS",
    "HOROVOD_GLOO_IFACE",
]


@pytest.fixture(scope="module")
def linear_data() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    df = pd.DataFrame(x, columns=FEATURES)
    df["y"] = x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.1
    df["id"] = np.arange(64)
    return df


def horovod_loop(config: dict) -> None:
    """Linear regression with hvd.DistributedOptimizer; each rank writes what it saw to config["out_dir"]."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    env = {k: os.environ.get(k) for k in HOROVOD_VARS}
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()

    torch.manual_seed(hvd.rank())  # different init per rank: the broadcast must sync them
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start_epoch = 0
    if (checkpoint := train.get_checkpoint()) is not None and hvd.rank() == 0:
        with checkpoint.as_directory() as d:
            model.load_state_dict(torch.load(os.path.join(d, "model.pt")))
            start_epoch = json.load(open(os.path.join(d, "progress.json")))["epoch"] + 1
    start_epoch = int(hvd.broadcast_object(start_epoch, root_rank=0))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    start_params = [p.detach().flatten().tolist() for p in model.parameters()]
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    shard = train.get_dataset_shard("train")
    ids: list[int] = []
    for epoch in range(start_epoch, start_epoch + config["epochs"]):
        for batch in shard.iter_torch_batches(batch_size=8, dtypes=torch.float32):
            x = torch.stack([batch[c] for c in FEATURES], dim=1)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ids += batch["id"].long().tolist()
        if hvd.rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save(model.state_dict(), os.path.join(d, "model.pt"))
                json.dump({"epoch": epoch}, open(os.path.join(d, "progress.json"), "w"))
                train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report({"epoch": epoch, "loss": loss.item()})

    ctx = train.get_context()
    summary = {
        "size": hvd.size(),
        "rank": hvd.rank(),
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(),
        "cross_size": hvd.cross_size(),
        "world_rank": ctx.get_world_rank(),
        "allreduce_sum": total,
        "env": env,
        "ids": ids,
        "start_epoch": start_epoch,
        "start_params": start_params,
        "params": [p.detach().flatten().tolist() for p in model.parameters()],
    }
    path = os.path.join(config["out_dir"], f"rank_{hvd.rank()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f)
    os.replace(path + ".tmp", path)


def _fit(out_dir, data, epochs: int, **kwargs):
    return HorovodTrainer(
        horovod_loop,
        train_loop_config={"epochs": epochs, "out_dir": str(out_dir)},
        horovod_config=HorovodConfig(timeout_s=120),
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data},
        **kwargs,
    ).fit()


def _summaries(out_dir) -> list[dict]:
    return [json.load(open(os.path.join(out_dir, f"rank_{r}.json"))) for r in (0, 1)]


@pytest.fixture(scope="module")
def first_run(coordinator, linear_data, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("horovod-first")
    result = _fit(out_dir, linear_data, epochs=3, run_config=RunConfig(name="horovod-linear", verbose=0))
    return result, _summaries(out_dir)


def test_two_ranks_size_two_and_allreduce_sum(first_run):
    _, (s0, s1) = first_run
    assert (s0["rank"], s1["rank"]) == (0, 1)
    assert s0["size"] == s1["size"] == 2
    assert (s0["world_rank"], s1["world_rank"]) == (0, 1)  # Horovod's ranks are the run's
    assert s0["allreduce_sum"] == s1["allreduce_sum"] == 3.0  # 1 + 2
    # One node: both local, one cross rank each.
    assert (s0["local_rank"], s1["local_rank"], s0["local_size"]) == (0, 1, 2)
    assert (s0["cross_rank"], s1["cross_rank"], s0["cross_size"]) == (0, 0, 1)


def test_every_worker_gets_the_horovod_variables(first_run):
    _, (s0, s1) = first_run
    for rank, env in ((0, s0["env"]), (1, s1["env"])):
        assert all(env[k] for k in HOROVOD_VARS), env
        assert env["HOROVOD_RANK"] == str(rank)
        assert env["HOROVOD_LOCAL_RANK"] == str(rank)
        assert (env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_SIZE"]) == ("2", "2")
        assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == ("0", "1")
        assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert int(env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0
    assert s0["env"]["HOROVOD_HOSTNAME"] == s1["env"]["HOROVOD_HOSTNAME"]  # the one Ray node
    for key in ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT"):
        assert s0["env"][key] == s1["env"][key]
    assert s0["env"]["HOROVOD_GLOO_IFACE"] == "lo"  # all workers local: the loopback, as horovodrun picks


def test_distributed_optimizer_on_different_shards_ends_with_equal_parameters(first_run, linear_data):
    result, (s0, s1) = first_run
    assert set(s0["ids"]).isdisjoint(s1["ids"])
    assert sorted(set(s0["ids"]) | set(s1["ids"])) == list(linear_data["id"])
    np.testing.assert_allclose(np.concatenate(s0["start_params"]), np.concatenate(s1["start_params"]))
    np.testing.assert_allclose(np.concatenate(s0["params"]), np.concatenate(s1["params"]), rtol=1e-6)
    assert not np.allclose(np.concatenate(s0["params"]), np.concatenate(s0["start_params"]))
    losses = result.metrics_dataframe["loss"]
    assert losses.iloc[-1] < losses.iloc[0]


def test_rank_zero_checkpoint_resumes_a_second_run(first_run, linear_data, tmp_path):
    first, (f0, _) = first_run
    assert isinstance(first.checkpoint, HorovodCheckpoint)
    second = _fit(tmp_path, linear_data, epochs=1, resume_from_checkpoint=first.checkpoint)
    s0, s1 = _summaries(tmp_path)
    assert s0["start_epoch"] == s1["start_epoch"] == 3  # the first run ended after epoch 2
    # Both ranks start from the first run's final parameters.
    for s in (s0, s1):
        np.testing.assert_allclose(np.concatenate(s["start_params"]), np.concatenate(f0["params"]), rtol=1e-6)
    assert second.metrics["epoch"] == 3
    assert second.checkpoint.uri != first.checkpoint.uri


def test_horovod_checkpoint_is_a_torch_checkpoint_and_predicts(first_run):
    import torch

    result, (s0, _) = first_run
    assert isinstance(result.checkpoint, TorchCheckpoint)
    model = result.checkpoint.get_model(torch.nn.Linear(4, 1))
    np.testing.assert_allclose(
        np.concatenate([p.detach().flatten().numpy() for p in model.parameters()]),
        np.concatenate(s0["params"]),
        rtol=1e-6,
    )
    predictor = HorovodPredictor.from_checkpoint(result.checkpoint, model=torch.nn.Linear(4, 1))
    assert isinstance(predictor, TorchPredictor)
    x = np.eye(4, dtype="float32")
    expected = x @ np.array(s0["params"][0], dtype="float32") + s0["params"][1][0]
    np.testing.assert_allclose(predictor.predict(x)["predictions"], expected, rtol=1e-5)


def test_host_allocation_plan_across_nodes():
    from trainwire_coordinator.backends.horovod import host_allocation_plan, slot_env

    envs = [slot_env(s) for s in host_allocation_plan(["n1", "n1", "n2", "n2", "n2"])]
    assert [e["HOROVOD_RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert [e["HOROVOD_HOSTNAME"] for e in envs] == ["n1", "n1", "n2", "n2", "n2"]
    assert [e["HOROVOD_LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1", "2"]
    assert [e["HOROVOD_LOCAL_SIZE"] for e in envs] == ["2", "2", "3", "3", "3"]
    # Cross rank: the node's index among nodes with that local rank.
    assert [e["HOROVOD_CROSS_RANK"] for e in envs] == ["0", "0", "1", "1", "0"]
    assert [e["HOROVOD_CROSS_SIZE"] for e in envs] == ["2", "2", "2", "2", "1"]
    assert {e["HOROVOD_SIZE"] for e in envs} == {"5"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"timeout_s": 0}, "timeout_s"), ({"nics": "eth0"}, "nics"), ({"verbose": -1}, "verbose")],
)
def test_horovod_config_refuses_bad_values(kwargs, field):
    with pytest.raises(InvalidArgumentError) as info:
        HorovodConfig(**kwargs)
    assert info.value.field == field


def failing_loop(config: dict) -> None:
    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 gives up")
    hvd.allreduce(torch.ones(1))  # rank 0 waits here for a peer that is gone


def test_a_failing_rank_fails_the_run_promptly(coordinator):
    import time

    from trainwire import TrainingFailedError

    start = time.monotonic()
    with pytest.raises(TrainingFailedError) as info:
        HorovodTrainer(failing_loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0)).fit()
    error = info.value.result.error
    assert (error.world_rank, error.exc_type) == (1, "ValueError")
    assert "rank 1 gives up" in str(error)
    assert time.monotonic() - start < 60


def test_the_predictor_service_serves_horovod_checkpoints_as_torch(first_run, store):
    from trainwire_core.frameworks import get_framework
    from trainwire_predictor.model_repository import detect_framework

    result, _ = first_run
    checkpoint_id = result.checkpoint.uri.rstrip("/").rsplit("/", 1)[-1]
    assert detect_framework(store, store.checkpoint_dir(result.run_id, checkpoint_id)) == "horovod"
    assert issubclass(get_framework("horovod").predictor_class(), TorchPredictor)


def test_a_missing_horovod_names_the_build_script_not_pip(monkeypatch):
    import importlib.util

    from trainwire_core.errors import FrameworkNotInstalledError
    from trainwire_worker.actor import get_backend

    backend = get_backend("horovod")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FrameworkNotInstalledError) as info:
        backend.check_installed()
    assert "scripts/build_horovod.sh" in info.value.message and "pip install" not in info.value.message
