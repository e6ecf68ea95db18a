"""HuggingFace Transformers: the torch process group, with transformers on every worker.

``HuggingFaceTrainer`` runs its loop (``trainwire.huggingface.train_loop``) here; the
backend differs from torch's only in the package it needs and the framework its
checkpoints name, which is what makes the predictor serve them as pipelines.
"""

from __future__ import annotations

from trainwire.huggingface.framework import FRAMEWORK
from trainwire_worker.backends.torch import TorchBackend


class HuggingFaceBackend(TorchBackend):
    name = FRAMEWORK.name
    module = "transformers"
    package = "transformers"
    install = "pip install transformers accelerate"
