"""``TorchPredictor``, as ``ray.train.torch.TorchPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.torch.framework import FRAMEWORK


class TorchPredictor(Predictor):
    """Scores with a torch module on a float32 2-D tensor (one row per example).

    Args:
        model: The ``torch.nn.Module`` (put in eval mode).
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Input columns in the order the model reads them (None: all columns as given).
        use_gpu: Score on the first GPU.
    """

    framework = FRAMEWORK.name
    input_datatype = "FP32"

    def __init__(
        self,
        model: Any,
        preprocessor: Any = None,
        feature_columns: list[str] | None = None,
        use_gpu: bool = False,
    ) -> None:
        import torch

        super().__init__(preprocessor, feature_columns)
        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model = model.to(self.device).eval()

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, model: Any = None, **kwargs: Any) -> TorchPredictor:
        """Loads ``model.pt``: a whole saved model, or a state dict loaded into ``model``."""
        from trainwire.torch.checkpoint import TorchCheckpoint

        loaded = TorchCheckpoint(checkpoint.path, checkpoint.filesystem).get_model(model)
        return cls(loaded, **cls.checkpoint_defaults(checkpoint, kwargs))

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        import torch

        arr = np.ascontiguousarray(data, dtype=np.float32)
        if not arr.flags.writeable:  # a view over request bytes; torch wants its own memory
            arr = arr.copy()
        tensor = torch.from_numpy(arr).to(self.device)
        with torch.inference_mode():
            out = self.model(tensor, **kwargs)
        return out.detach().cpu().numpy()
