"""HuggingFace support, mirroring ``ray.train.huggingface``.

``HuggingFaceTrainer`` (alias ``TransformersTrainer``) takes Ray 2.x's
``trainer_init_per_worker``; ``HuggingFaceCheckpoint`` and ``HuggingFacePredictor``
(aliases ``Transformers*``) hold and serve its models. Inside a ``TorchTrainer``
loop, ``trainwire.huggingface.transformers`` has ``prepare_trainer`` and
``RayTrainReportCallback``. The names below load ``transformers`` (and torch)
only when first used, so importing this package alone stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire.huggingface.predictor import HuggingFacePredictor
    from trainwire.huggingface.trainer import HuggingFaceTrainer
    from trainwire.huggingface.transformers import RayTrainReportCallback, TrainReportCallback, prepare_trainer

_HOMES = {
    "HuggingFaceCheckpoint": "trainwire.huggingface.checkpoint",
    "HuggingFacePredictor": "trainwire.huggingface.predictor",
    "HuggingFaceTrainer": "trainwire.huggingface.trainer",
    "RayTrainReportCallback": "trainwire.huggingface.transformers",
    "TrainReportCallback": "trainwire.huggingface.transformers",
    "prepare_trainer": "trainwire.huggingface.transformers",
}
# Ray 2.x names them both ways.
_ALIASES = {
    "TransformersCheckpoint": "HuggingFaceCheckpoint",
    "TransformersPredictor": "HuggingFacePredictor",
    "TransformersTrainer": "HuggingFaceTrainer",
}
__all__ = [
    "HuggingFaceCheckpoint",
    "HuggingFacePredictor",
    "HuggingFaceTrainer",
    "RayTrainReportCallback",
    "TrainReportCallback",
    "TransformersCheckpoint",
    "TransformersPredictor",
    "TransformersTrainer",
    "prepare_trainer",
]


def __getattr__(name: str) -> Any:
    target = _ALIASES.get(name, name)
    if target in _HOMES:
        return getattr(importlib.import_module(_HOMES[target]), target)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
