"""RunConfig(callbacks=...): the SDK calls each hook from the run's event stream, in order."""

from __future__ import annotations

import pytest

from trainwire import RunConfig, ScalingConfig
from trainwire.callbacks import RunCallback
from trainwire.data_parallel import DataParallelTrainer
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(180)


class Recorder(RunCallback):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_run_start(self, run, config):
        self.calls.append(("start", run.name, dict(config)))

    def on_metrics(self, run, metrics):
        self.calls.append(("metrics", metrics["step"]))

    def on_checkpoint(self, run, checkpoint):
        self.calls.append(("checkpoint", checkpoint.uri != ""))

    def on_run_end(self, run, result):
        self.calls.append(("end", result.metrics["step"]))


class Broken(RunCallback):
    def on_metrics(self, run, metrics):
        raise RuntimeError("a tracker that fails")


def _loop(config):
    import tempfile

    from trainwire import train
    from trainwire.train import Checkpoint

    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            with open(f"{d}/w.txt", "w") as f:
                f.write(str(step))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d) if step == 1 else None)


def test_hooks_follow_the_run_and_a_failing_callback_loses_nothing(coordinator):
    recorder = Recorder()
    result = DataParallelTrainer(
        _loop,
        train_loop_config={"steps": 3},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="callbacks", verbose=0, callbacks=[Broken(), recorder]),
    ).fit()
    assert result.metrics["step"] == 2
    assert recorder.calls[0] == ("start", "callbacks", {"steps": 3, "num_workers": 1})
    assert [c for c in recorder.calls if c[0] == "metrics"] == [("metrics", 0), ("metrics", 1), ("metrics", 2)]
    assert ("checkpoint", True) in recorder.calls
    assert recorder.calls[-1] == ("end", 2)


def test_a_callback_must_be_a_run_callback():
    with pytest.raises(InvalidArgumentError) as info:
        DataParallelTrainer(_loop, run_config=RunConfig(callbacks=[object()]))._callbacks()
    assert info.value.field == "run_config.callbacks[0]"
