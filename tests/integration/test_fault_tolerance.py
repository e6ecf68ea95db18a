"""FailureConfig: a failed group restarts from the latest committed checkpoint."""

from __future__ import annotations

import os
import tempfile

import pytest

from trainwire import Checkpoint, FailureConfig, RunConfig, ScalingConfig, TrainingFailedError, train
from trainwire.torch import TorchTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(180)


def flaky_loop() -> None:
    """Fails once after its first checkpoint; the restart resumes from that checkpoint."""
    checkpoint = train.get_checkpoint()
    step = 0
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = int(open(os.path.join(d, "step")).read()) + 1
    while step < 3:
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            train.report({"step": step, "resumed": checkpoint is not None}, checkpoint=Checkpoint.from_directory(d))
        if step == 0 and checkpoint is None:
            raise RuntimeError("first attempt dies")
        step += 1


def test_restart_resumes_from_latest_checkpoint(coordinator, client):
    result = TorchTrainer(
        flaky_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(failure_config=FailureConfig(max_failures=1), verbose=0),
    ).fit()
    assert result.metrics == {"step": 2.0, "resumed": True}
    assert [m["step"] for m in result.metrics_dataframe.to_dict("records")] == [0, 1, 2]
    run = client.get_run(result.run_id)
    assert run.num_failures == 1
    states = [e.state_change.state for e in client.watch_run(result.run_id) if e.HasField("state_change")]
    assert common_pb2.RESTARTING in states and states[-1] == common_pb2.SUCCEEDED


def test_without_retries_the_first_failure_ends_the_run(coordinator):
    with pytest.raises(TrainingFailedError) as info:
        TorchTrainer(flaky_loop, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(verbose=0)).fit()
    assert info.value.result.error.message == "first attempt dies"
