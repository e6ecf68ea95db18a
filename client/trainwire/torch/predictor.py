"""``TorchPredictor``, as ``ray.train.torch.TorchPredictor``."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor, one_dtype
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
    native_batch_format = "numpy"

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
        """Loads ``model.pt``: a whole saved model, or a state dict loaded into ``model``.

        A checkpoint made with ``Checkpoint.from_dict({"model": ...})`` (Ray 2.4's way) loads its
        ``"model"`` entry the same way.
        """
        from trainwire.torch.checkpoint import TorchCheckpoint

        loaded = TorchCheckpoint(checkpoint.path, checkpoint.filesystem).get_model(model)
        return cls(loaded, **cls.checkpoint_defaults(checkpoint, kwargs))

    def prepare_for_batches(self) -> None:
        """Stores each CPU ``torch.nn.Linear`` weight transposed in memory: same values, same shape.

        A Linear computes ``x @ weight.T``, and torch's CPU GEMM is far slower for a handful of
        rows against a row-major ``weight`` than against one whose transpose is contiguous (the
        layout TorchScript's freezing makes too). Through a 512-2048-2048-1 MLP on this
        project's 2-core machine, 8 rows took 0.9 ms instead of 1.24-1.44 ms on torch's two
        threads (1.0-1.5 ms instead of 2.4-2.8 ms on one), 2-3 rows 0.8 ms instead of 0.5 ms, one
        row and large batches about the same: so only a model served with batching is changed.
        Answers differ in the last bits at most, as a model's answers already do across batch sizes.
        """
        import torch

        with torch.no_grad():
            for module in self.model.modules():
                weight = getattr(module, "weight", None)
                if type(module) is torch.nn.Linear and weight is not None and weight.device.type == "cpu":
                    weight.data = weight.data.t().contiguous().t()

    def _predict_numpy(self, data: np.ndarray, dtype: Any = None, **kwargs: Any) -> np.ndarray:
        """Scores a 2-D array as one tensor.

        Args:
            dtype: The tensor's ``torch.dtype`` (default float32), as Ray's ``predict(..., dtype=)``;
                a dict of them (Ray's per column) must name one dtype, the model taking one tensor.
            **kwargs: Passed to the model's ``forward``.
        """
        import torch

        dtype = one_dtype(dtype)
        arr = np.asarray(data)
        # Converted by numpy first where torch cannot take the array (object cells); no copy when float32.
        arr = np.ascontiguousarray(arr, dtype=np.float32 if dtype is None or arr.dtype == object else None)
        if not arr.flags.writeable:  # a view over request bytes; torch wants its own memory
            arr = arr.copy()
        tensor = torch.from_numpy(arr).to(self.device, dtype=torch.float32 if dtype is None else dtype)
        with torch.inference_mode():
            out = self.model(tensor, **kwargs)
        return out.detach().cpu().numpy()
