"""Torch: the user's loop, in the process group the coordinator's half set up."""

from __future__ import annotations

from trainwire.torch.framework import FRAMEWORK
from trainwire_worker.backends.data_parallel import DataParallelBackend


class TorchBackend(DataParallelBackend):
    name = FRAMEWORK.name
    module = "torch"
    package = "torch"
