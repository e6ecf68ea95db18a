"""Horovod checkpoints: torch checkpoints."""

from __future__ import annotations

from trainwire.torch.checkpoint import TorchCheckpoint


class HorovodCheckpoint(TorchCheckpoint):
    """A torch checkpoint (``model.pt``) written by a Horovod run."""
