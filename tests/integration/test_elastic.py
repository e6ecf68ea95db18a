"""Elastic runs: ScalingConfig(num_workers=(min, max)) starts with what fits and grows at a checkpoint."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, train
from trainwire.torch import TorchTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(240)

STEPS = 10


def growing_loop() -> None:
    import torch
    import torch.distributed as dist

    step = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = int(open(os.path.join(d, "step")).read()) + 1
    while step < STEPS:
        time.sleep(0.5)
        ones = torch.ones(1)
        dist.all_reduce(ones)  # every rank of the group takes part
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            train.report(
                {"step": step, "world_size": train.get_context().get_world_size(), "sum": float(ones.item())},
                checkpoint=Checkpoint.from_directory(d),
            )
        step += 1


def test_elastic_run_starts_small_and_grows_when_cpus_free(coordinator, client, ray_cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    total = int(ray_cluster.cluster_resources()["CPU"])
    # Something else holds all but two CPUs when the run starts.
    blocker = placement_group([{"CPU": 1.0}] * (total - 2))
    ray_cluster.get(blocker.ready(), timeout=60)
    released = False
    try:
        trainer = TorchTrainer(
            growing_loop,
            scaling_config=ScalingConfig(num_workers=(1, total)),
            run_config=RunConfig(verbose=0),
        )
        run = client.fit(trainer.build_request(client))
        sizes: list[int] = []
        for event in client.watch_run(run.run_id):
            if event.HasField("metrics"):
                metrics = event.metrics.metrics
                size = int(metrics["world_size"])
                assert metrics["sum"] == size, "the allreduce spans the whole group"
                sizes.append(size)
                if not released:
                    remove_placement_group(blocker)
                    released = True
        run = client.get_run(run.run_id)
    finally:
        if not released:
            remove_placement_group(blocker)
    assert run.state == common_pb2.SUCCEEDED, run.state_reason
    assert run.num_failures == 0, "a resize is not a failure"
    assert sizes[0] <= 2 and sizes[-1] == total, sizes
    assert sizes == sorted(sizes), "the group only grows"
    reasons = [e.state_change.reason for e in client.watch_run(run.run_id) if e.HasField("state_change")]
    assert any(r.startswith(f"resizing from {sizes[0]} to ") for r in reasons), reasons
    assert any(r.startswith("1 of up to") or r.startswith("2 of up to") for r in reasons), reasons


def pid_loop(config: dict) -> None:
    step = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = int(open(os.path.join(d, "step")).read()) + 1
    context = train.get_context()
    with open(os.path.join(config["pids"], f"{context.get_world_rank()}-{os.getpid()}"), "w"):
        pass
    while step < STEPS:
        time.sleep(0.4)
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            train.report(
                {"step": step, "world_size": context.get_world_size()}, checkpoint=Checkpoint.from_directory(d)
            )
        step += 1


def test_elastic_run_carries_on_when_a_worker_dies(coordinator, client, tmp_path):
    import signal

    pids = tmp_path / "pids"
    pids.mkdir()
    trainer = TorchTrainer(
        pid_loop,
        train_loop_config={"pids": str(pids)},
        scaling_config=ScalingConfig(num_workers=(1, 2)),
        run_config=RunConfig(verbose=0),  # max_failures=0: a failure would end the run
    )
    run = client.fit(trainer.build_request(client))
    steps: list[int] = []
    killed = False
    for event in client.watch_run(run.run_id):
        if event.HasField("metrics"):
            steps.append(int(event.metrics.metrics["step"]))
            if not killed and steps[-1] >= 2:
                victim = next(p for p in pids.iterdir() if p.name.startswith("1-"))
                os.kill(int(victim.name.split("-")[1]), signal.SIGKILL)
                killed = True
    run = client.get_run(run.run_id)
    assert killed
    assert run.state == common_pb2.SUCCEEDED, run.state_reason
    assert run.num_failures == 0
    events = list(client.watch_run(run.run_id))
    assert any(e.HasField("worker_error") and e.worker_error.world_rank == 1 for e in events)
    reasons = [e.state_change.reason for e in events if e.HasField("state_change")]
    assert any(r.startswith("a worker was lost") for r in reasons), reasons
    assert sorted(set(steps)) == list(range(STEPS))
