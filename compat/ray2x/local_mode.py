# Ray Train V2 (Ray 2.51+): the local-mode guide's shape (ScalingConfig(num_workers=0) runs the training function in this process, for debugging).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import tempfile

import torch
from torch import nn

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import RunConfig, ScalingConfig  # trainwire: from ray.train import RunConfig, ScalingConfig
from trainwire.train.torch import TorchTrainer  # trainwire: from ray.train.torch import TorchTrainer


def train_func(config):
    assert train.get_context().get_world_size() == 1
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(64, 2)
    y = x @ torch.tensor([[1.0], [-1.0]])
    for epoch in range(config["epochs"]):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train.report({"loss": loss.item(), "epoch": epoch})


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(storage_path=tempfile.mkdtemp(), name="local-mode"),
    )
    result = trainer.fit()
    print(result.metrics)
    assert result.metrics["epoch"] == 2
