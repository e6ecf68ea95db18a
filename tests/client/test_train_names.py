"""Ray 2.60's Train names that trainwire adds: errors, configs, Ray's module paths, torch helpers, collectives.

The collectives and ``get_devices`` run in real 2-worker runs: ``broadcast_from_rank_zero``
gives every rank rank 0's value, ``barrier`` holds rank 0 until rank 1 arrives, and calls
that differ between ranks fail the run with a ``WorkerGroupError`` naming them.
"""

from __future__ import annotations

import os
import pickle
import time

import pytest

from trainwire import train
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(180)


# --- names without a cluster --------------------------------------------------------------------


def test_errors_are_ray_kinds_of_training_failed_error():
    from trainwire.train import (
        ControllerError,
        PreemptionError,
        PreemptionInfo,
        TrainingFailedError,
        WorkerGroupError,
    )

    boom = ValueError("boom")
    error = WorkerGroupError("rank 1 raised", {1: boom})
    assert isinstance(error, TrainingFailedError) and error.worker_failures == {1: boom}
    assert str(error) == "Training failed due to worker errors:\nrank 1 raised"
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is WorkerGroupError and str(again) == str(error) and 1 in again.worker_failures

    controller = ControllerError(RuntimeError("lost"))
    assert controller.controller_failure.args == ("lost",) and "lost" in str(controller)
    assert isinstance(pickle.loads(pickle.dumps(controller)), ControllerError)

    info = PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"b": [3, 1], "a": [2]})
    assert (info.preempted_node_ids, info.preempted_ranks) == (["a", "b"], [1, 2, 3])
    preempted = PreemptionError(info, drain_timed_out=True)
    assert "preempted_ranks=[1, 2, 3]" in str(preempted) and preempted.drain_timed_out


def test_configs_and_constants_as_rays():
    from trainwire.data_config import DataConfig
    from trainwire.result import Result

    assert train.DataConfig is DataConfig and train.Result is Result
    assert train.TRAIN_DATASET_KEY == "train"
    assert train.LoggingConfig("debug").log_level == "DEBUG"
    with pytest.raises(InvalidArgumentError, match="log_level"):
        train.LoggingConfig("loud")
    assert [s.name for s in train.ReportedCheckpointStatus][:3] == ["COMMITTED", "PENDING_VALIDATION", "VALIDATED"]
    reported = train.ReportedCheckpoint(train.Checkpoint("/tmp/x"), {"a": 1})
    assert reported.status is train.ReportedCheckpointStatus.COMMITTED
    assert train.BackendConfig().to_dict() == {} and train.BackendConfig().framework is None


def test_rays_module_paths_import():
    import trainwire
    import trainwire.jax
    from trainwire.train.v2 import CheckpointUploadMode, jax
    from trainwire.train.v2.api.data_parallel_trainer import DataParallelTrainer

    assert DataParallelTrainer is trainwire.DataParallelTrainer
    assert jax is trainwire.jax and CheckpointUploadMode is train.CheckpointUploadMode
    assert train.collective.barrier is not None and train.v2.api.data_parallel_trainer is not None


def test_torch_helpers_as_rays():
    import torch

    from trainwire.train import torch as train_torch

    for deprecated, arg in ((train_torch.accelerate, False), (train_torch.prepare_optimizer, None)):
        with pytest.raises(DeprecationWarning, match="deprecated"):
            deprecated(arg)
    with pytest.raises(DeprecationWarning):
        train_torch.backward(torch.zeros(1))
    try:
        train_torch.enable_reproducibility(7)
        first = torch.rand(3)
        train_torch.enable_reproducibility(7)
        assert torch.equal(first, torch.rand(3)) and torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_collectives_outside_a_loop_say_so():
    from trainwire.train.collective import barrier

    with pytest.raises(RuntimeError, match="training loop"):
        barrier()


# --- real runs ------------------------------------------------------------------------------


def collectives_loop(config):
    from trainwire.train.collective import barrier, broadcast_from_rank_zero
    from trainwire.train.torch import get_devices

    rank = train.get_context().get_world_rank()
    out = config["dir"]
    value = broadcast_from_rank_zero({"from": rank, "token": f"rank-{rank}"})
    if rank == 1:
        time.sleep(1.5)
        open(os.path.join(out, "rank1_arrived"), "w").close()
    barrier()
    # Past the barrier, rank 1's marker must exist on rank 0 too.
    passed = os.path.exists(os.path.join(out, "rank1_arrived"))
    preemption = train.get_preemption_info()
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(repr((value, passed, [str(d) for d in get_devices()], preemption)))
    train.report({"rank": rank})


def test_broadcast_barrier_and_devices_in_a_two_worker_run(coordinator, tmp_path):
    from trainwire.train.torch import TorchTrainer

    TorchTrainer(
        collectives_loop,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=train.ScalingConfig(num_workers=2),
        run_config=train.RunConfig(name="collectives", verbose=0),
    ).fit()
    for rank in (0, 1):
        value, passed, devices, preemption = eval((tmp_path / f"rank{rank}.txt").read_text())  # noqa: S307
        assert value == {"from": 0, "token": "rank-0"}, rank
        assert passed and devices == ["cpu"] and preemption is None, rank
    # The attempt's meeting point ends once both ranks have left.
    import ray

    deadline = time.monotonic() + 20
    while any(a["name"].startswith("trainwire-sync:") for a in ray.util.list_named_actors(all_namespaces=True)):
        assert time.monotonic() < deadline, ray.util.list_named_actors(all_namespaces=True)
        time.sleep(0.2)


def mismatched_loop(config):
    from trainwire.train.collective import barrier, broadcast_from_rank_zero

    if train.get_context().get_world_rank() == 0:
        barrier()
    else:
        broadcast_from_rank_zero(1)


def test_collectives_that_differ_between_ranks_fail_the_run_with_worker_group_error(coordinator):
    from trainwire.data_parallel import DataParallelTrainer

    with pytest.raises(train.WorkerGroupError) as info:
        DataParallelTrainer(
            mismatched_loop,
            scaling_config=train.ScalingConfig(num_workers=2),
            run_config=train.RunConfig(name="collectives-mismatch", verbose=0),
        ).fit()
    (rank, failure), *_ = info.value.worker_failures.items()
    assert rank in (0, 1) and failure.exc_type == "RuntimeError"
    assert "differs between workers" in str(info.value) and info.value.result.error is not None
