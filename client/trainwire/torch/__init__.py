"""Torch support, mirroring ``ray.train.torch``."""

from trainwire.torch.checkpoint import TorchCheckpoint
from trainwire.torch.predictor import TorchPredictor
from trainwire.torch.train_loop_utils import get_device, prepare_data_loader, prepare_model
from trainwire.torch.trainer import TorchConfig, TorchTrainer

__all__ = [
    "TorchPredictor",
    "TorchCheckpoint",
    "TorchConfig",
    "TorchTrainer",
    "get_device",
    "prepare_data_loader",
    "prepare_model",
]
