# Ray Train V2 (Ray 2.51+): the fault-tolerance guide's shape (FailureConfig(max_failures), a worker that fails once, the restart resuming from get_checkpoint).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import os
import tempfile

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig  # trainwire: from ray.train import ...
from trainwire.train.torch import TorchTrainer  # trainwire: from ray.train.torch import TorchTrainer


def train_func(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            start = int(open(os.path.join(checkpoint_dir, "epoch.txt")).read()) + 1
    for epoch in range(start, config["epochs"]):
        with tempfile.TemporaryDirectory() as checkpoint_dir:
            with open(os.path.join(checkpoint_dir, "epoch.txt"), "w") as f:
                f.write(str(epoch))
            train.report(
                {"epoch": epoch, "resumed": checkpoint is not None},
                checkpoint=Checkpoint.from_directory(checkpoint_dir),
            )
        if epoch == 1 and checkpoint is None and train.get_context().get_world_rank() == 1:
            raise RuntimeError("simulated failure on rank 1")


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 4},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(), name="fault-tolerance", failure_config=FailureConfig(max_failures=1)
        ),
    )
    result = trainer.fit()
    print(result.metrics)
    assert result.metrics == {"epoch": 3, "resumed": True}
