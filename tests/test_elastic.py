"""Elastic runs: ScalingConfig(num_workers=(min, max)) starts with what fits and grows at a checkpoint."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, train
from trainwire.torch import TorchTrainer
from trainwire.v1 import common_pb2

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
