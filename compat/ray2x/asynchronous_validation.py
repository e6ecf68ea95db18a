# Ray Train V2 (Ray 2.51+): the asynchronous-validation guide's shape (ValidationConfig on the trainer, report(validation=...), best_checkpoints by the validated metric).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import os
import tempfile

import torch
from torch import nn

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig, ValidationConfig, ValidationTaskConfig  # trainwire: from ray.train import ...
from trainwire.train.torch import TorchTrainer  # trainwire: from ray.train.torch import TorchTrainer


def make_data(seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(256, 4, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def validate_fn(checkpoint, seed=0):
    model = nn.Linear(4, 1)
    with checkpoint.as_directory() as checkpoint_dir:
        model.load_state_dict(torch.load(os.path.join(checkpoint_dir, "model.pt")))
    model.eval()
    x, y = make_data(seed)
    with torch.no_grad():
        return {"validation_loss": nn.functional.mse_loss(model(x), y).item()}


def train_func(config):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = make_data(1)
    for epoch in range(config["epochs"]):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with tempfile.TemporaryDirectory() as checkpoint_dir:
            torch.save(model.state_dict(), os.path.join(checkpoint_dir, "model.pt"))
            train.report(
                {"loss": loss.item(), "epoch": epoch},
                checkpoint=Checkpoint.from_directory(checkpoint_dir),
                validation=ValidationTaskConfig(fn_kwargs={"seed": 7}),
            )


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 4},
        validation_config=ValidationConfig(fn=validate_fn),
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(),
            name="async-validation",
            checkpoint_config=CheckpointConfig(
                checkpoint_score_attribute="validation_loss", checkpoint_score_order="min"
            ),
        ),
    )
    result = trainer.fit()
    best_checkpoint, best_metrics = min(result.best_checkpoints, key=lambda pair: pair[1]["validation_loss"])
    print("best:", best_metrics)
    assert all("validation_loss" in metrics for _, metrics in result.best_checkpoints)
    assert len(result.best_checkpoints) == 4
