"""Torch support, mirroring ``ray.train.torch``."""

from trainwire.torch.checkpoint import TorchCheckpoint
from trainwire.torch.predictor import TorchPredictor
from trainwire.torch.train_loop_utils import (
    accelerate,
    backward,
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
)
from trainwire.torch.trainer import TorchConfig, TorchTrainer

__all__ = [
    "TorchPredictor",
    "TorchCheckpoint",
    "TorchConfig",
    "TorchTrainer",
    "accelerate",
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
]
