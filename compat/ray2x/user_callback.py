# Ray Train V2 (Ray 2.51+): the callbacks API's shape (a UserCallback with after_report and after_exception in RunConfig(callbacks=[...])).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import os
import tempfile

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig, UserCallback  # trainwire: from ray.train import ...
from trainwire.train.torch import TorchTrainer  # trainwire: from ray.train.torch import TorchTrainer


class PrintingCallback(UserCallback):
    def __init__(self):
        self.reports = []
        self.failures = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics[0]["epoch"], checkpoint is not None))
        print("after_report:", metrics[0], checkpoint)

    def after_exception(self, run_context, worker_exceptions):
        self.failures.append(sorted(worker_exceptions))
        print("after_exception:", worker_exceptions)


def train_func(config):
    checkpoint = train.get_checkpoint()
    for epoch in range(2):
        with tempfile.TemporaryDirectory() as checkpoint_dir:
            open(os.path.join(checkpoint_dir, "epoch.txt"), "w").write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(checkpoint_dir) if epoch == 1 else None)
    if checkpoint is None:
        raise ValueError("the first attempt fails after its reports")


if __name__ == "__main__":
    callback = PrintingCallback()
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(),
            name="user-callback",
            callbacks=[callback],
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    trainer.fit()
    assert callback.reports == [(0, False), (1, True), (0, False), (1, True)], callback.reports
    assert callback.failures == [[0]], callback.failures
