# Ray Train V2 (Ray 2.51+): the quick start's shape (a TorchTrainer, prepare_model/prepare_data_loader, report with a checkpoint, resume with get_checkpoint).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import Checkpoint, RunConfig, ScalingConfig  # trainwire: from ray.train import ...
from trainwire.train.torch import TorchTrainer, prepare_data_loader, prepare_model  # trainwire: from ray.train.torch import ...


def train_func(config):
    model = prepare_model(nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    data = TensorDataset(torch.rand(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    loader = prepare_data_loader(DataLoader(data, batch_size=64, shuffle=True))
    start_epoch = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
            model.module.load_state_dict(state["model"]) if hasattr(model, "module") else model.load_state_dict(
                state["model"]
            )
            start_epoch = state["epoch"] + 1
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, config["epochs"]):
        if train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        for images, labels in loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        metrics = {"loss": loss.item(), "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            checkpoint = None
            if train.get_context().get_world_rank() == 0:
                inner = model.module if hasattr(model, "module") else model
                torch.save(
                    {"model": inner.state_dict(), "epoch": epoch}, os.path.join(temp_checkpoint_dir, "checkpoint.pt")
                )
                checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)
            train.report(metrics, checkpoint=checkpoint)


if __name__ == "__main__":
    storage = tempfile.mkdtemp()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.05, "epochs": 2},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=storage, name="quick-start"),
    )
    result = trainer.fit()
    print(f"Training result: {result.metrics}")
    assert result.metrics["epoch"] == 1 and result.checkpoint is not None
    with result.checkpoint.as_directory() as checkpoint_dir:
        assert torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))["epoch"] == 1
