"""HuggingFace support, mirroring ``ray.train.huggingface``.

``from trainwire.huggingface.transformers import prepare_trainer, RayTrainReportCallback``
inside a ``TorchTrainer`` loop. The names below load ``transformers`` (and torch)
only when first used, so importing this package alone stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwire.huggingface.transformers import RayTrainReportCallback, TrainReportCallback, prepare_trainer

__all__ = ["RayTrainReportCallback", "TrainReportCallback", "prepare_trainer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        module = importlib.import_module("trainwire.huggingface.transformers")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
