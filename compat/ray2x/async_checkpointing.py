# Ray Train V2 (Ray 2.51+): the checkpoints guide's asynchronous upload (checkpoint_upload_mode=ASYNC from a fresh directory, get_all_reported_checkpoints at the end).
# Written for trainwire's V2 suite; it runs on Ray when every '# trainwire:' line names ray.train again.
# ruff: noqa: E501, I001
# fmt: off
import os
import tempfile

import torch
from torch import nn

import trainwire.train as train  # trainwire: import ray.train as train
from trainwire.train import Checkpoint, CheckpointConfig, CheckpointUploadMode, RunConfig, ScalingConfig  # trainwire: from ray.train import ...
from trainwire.train.torch import TorchTrainer, prepare_model  # trainwire: from ray.train.torch import ...


def train_func(config):
    model = prepare_model(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(256, 4)
    y = x.sum(dim=1, keepdim=True)
    for epoch in range(config["epochs"]):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # The directory must outlive report(): the upload reads it later (and deletes it after).
        checkpoint_dir = tempfile.mkdtemp()
        inner = model.module if hasattr(model, "module") else model
        torch.save(inner.state_dict(), os.path.join(checkpoint_dir, "model.pt"))
        train.report(
            {"loss": loss.item(), "epoch": epoch},
            checkpoint=Checkpoint.from_directory(checkpoint_dir),
            checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
        )
    reported = train.get_all_reported_checkpoints()
    if train.get_context().get_world_rank() == 0:
        print("reported checkpoints:", [r.metrics["epoch"] for r in reported])
    train.report({"loss": loss.item(), "epoch": config["epochs"], "kept": len(reported)})


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 5},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(),
            name="async-checkpointing",
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min"
            ),
        ),
    )
    result = trainer.fit()
    print(result.metrics)
    assert result.metrics["kept"] >= 2
    assert len(result.best_checkpoints) <= 3
