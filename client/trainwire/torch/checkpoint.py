"""``TorchCheckpoint``: a model or state dict saved with ``torch.save``."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.torch.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file


class TorchCheckpoint(Checkpoint):
    """A checkpoint holding ``model.pt`` (a whole model or a state dict)."""

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Any], *, preprocessor: Any = None) -> TorchCheckpoint:
        import torch

        return cls.from_new_directory(  # type: ignore[return-value]
            "torch", lambda path: torch.save(state_dict, os.path.join(path, MODEL_FILENAME)), preprocessor
        )

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TorchCheckpoint:
        import torch

        return cls.from_new_directory(  # type: ignore[return-value]
            "torch", lambda path: torch.save(_unwrap(model), os.path.join(path, MODEL_FILENAME)), preprocessor
        )

    def get_model(self, model: Any = None) -> Any:
        """The saved model; with ``model`` given, a state dict is loaded into it."""
        import torch

        with self.as_directory() as d:
            saved = torch.load(os.path.join(d, MODEL_FILENAME), map_location="cpu", weights_only=False)
        if isinstance(saved, dict):
            if model is None:
                raise ValueError("this checkpoint holds a state dict: pass the model to load it into")
            model.load_state_dict(saved)
            return model
        return saved


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)
