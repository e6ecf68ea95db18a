"""Horovod runs' checkpoints are served as torch models."""

from __future__ import annotations

from trainwire.torch.predictor import TorchPredictor


class HorovodPredictor(TorchPredictor):
    """``TorchPredictor`` for checkpoints of Horovod runs."""
