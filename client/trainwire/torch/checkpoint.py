"""``TorchCheckpoint``: a model or state dict saved with ``torch.save``."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import DICT_CHECKPOINT_NAME, Checkpoint
from trainwire.torch.framework import FRAMEWORK

MODEL_FILENAME = FRAMEWORK.model_file
# A dict checkpoint's model entry (``ray.air.constants.MODEL_KEY``).
MODEL_KEY = "model"


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
        """The saved model; with ``model`` given, a state dict is loaded into it.

        A dict checkpoint (``Checkpoint.from_dict``, Ray 2.4's way) gives its ``"model"`` entry, a
        module or a state dict; a state dict saved from a DDP-wrapped model loses its ``module.`` prefix.
        """
        import torch

        with self.as_directory() as d:
            path = os.path.join(d, MODEL_FILENAME)
            if os.path.exists(path) or not os.path.exists(os.path.join(d, DICT_CHECKPOINT_NAME)):
                saved = torch.load(path, map_location="cpu", weights_only=False)
            else:
                saved = Checkpoint.from_directory(d).to_dict().get(MODEL_KEY)
                if saved is None:
                    raise ValueError(f"this dict checkpoint has no {MODEL_KEY!r} entry to load the model from")
                if isinstance(saved, dict):
                    saved = dict(saved)
                    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(saved, "module.")
        if isinstance(saved, dict):
            if model is None:
                raise ValueError("this checkpoint holds a state dict: pass the model to load it into")
            model.load_state_dict(saved)
            return model
        return saved


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)
