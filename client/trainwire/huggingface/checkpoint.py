"""``HuggingFaceCheckpoint``: a Transformers model and its tokenizer, as Ray's ``TransformersCheckpoint``.

Layout (what ``RayTrainReportCallback`` reports too)::

    <checkpoint>/
    └─ checkpoint/    save_pretrained output: config.json, model weights, tokenizer files,
                      and, when a Trainer saved it, its optimizer and trainer state
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.huggingface.framework import FRAMEWORK

MODEL_DIR = os.path.dirname(FRAMEWORK.model_file)
TRAINING_ARGS_NAME = "training_args.bin"
# Beside adapters saved alone: the served model they were trained on (the predictor serves them on it).
ADAPTER_BASE_FILE = "trainwire_adapter.json"


def model_dir(directory: str) -> str:
    """The ``save_pretrained`` folder inside a checkpoint's local directory."""
    inner = os.path.join(directory, MODEL_DIR)
    # Checkpoints written with save_pretrained straight into the root load too.
    return inner if os.path.isdir(inner) else directory


class HuggingFaceCheckpoint(Checkpoint):
    """A checkpoint holding a Transformers model, its tokenizer and (from training) its ``TrainingArguments``."""

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any = None,
        *,
        preprocessor: Any = None,
        merge_adapters: bool = True,
        base_model: str | None = None,
        **save_kwargs: Any,
    ) -> HuggingFaceCheckpoint:
        """Saves ``model`` (and ``tokenizer``) with ``save_pretrained`` into a new local checkpoint.

        Args:
            model: A Transformers model, maybe wrapped in DDP or in a ``peft`` model (LoRA).
            tokenizer: Saved beside the model when given.
            preprocessor: A fitted preprocessor to keep with the checkpoint.
            merge_adapters: A ``peft`` model is saved with its adapters merged into a copy of its
                base weights, a plain model that the predictor serves; False saves the adapters alone,
                which the predictor serves on their base model beside other adapters.
            base_model: With adapters saved alone, the served model they were trained on (a run name
                or id, ``name:version`` for one version), so a request naming this run needs no base.
            **save_kwargs: Passed to ``save_pretrained``.
        """

        def write(path: str) -> None:
            target = os.path.join(path, MODEL_DIR)
            unwrapped = getattr(model, "module", model)
            if merge_adapters and hasattr(unwrapped, "merge_and_unload"):
                # merge_and_unload changes the model in place: the training loop keeps its adapters.
                unwrapped = copy.deepcopy(unwrapped).merge_and_unload()
            unwrapped.save_pretrained(target, **save_kwargs)
            if base_model and not merge_adapters:
                with open(os.path.join(target, ADAPTER_BASE_FILE), "w") as f:
                    json.dump({"base_model": base_model}, f)
            if tokenizer is not None:
                tokenizer.save_pretrained(target)

        return cls.from_new_directory(FRAMEWORK.name, write, preprocessor)  # type: ignore[return-value]

    def get_model(self, model: Any = None, **pretrained_model_kwargs: Any) -> Any:
        """The model, loaded with ``model.from_pretrained`` (a Transformers model class; default ``AutoModel``)."""
        import transformers

        model_cls = model or transformers.AutoModel
        with self.as_directory() as d:
            return model_cls.from_pretrained(model_dir(d), **pretrained_model_kwargs)

    def get_tokenizer(self, tokenizer: Any = None, **kwargs: Any) -> Any:
        """The tokenizer saved with the model (``tokenizer`` class; default ``AutoTokenizer``)."""
        import transformers

        tokenizer_cls = tokenizer or transformers.AutoTokenizer
        with self.as_directory() as d:
            return tokenizer_cls.from_pretrained(model_dir(d), **kwargs)

    def get_training_arguments(self) -> Any:
        """The ``TrainingArguments`` the model was trained with, or None when it was saved outside a Trainer."""
        import torch

        with self.as_directory() as d:
            path = os.path.join(model_dir(d), TRAINING_ARGS_NAME)
            if not os.path.exists(path):
                return None
            # A pickle the Trainer wrote; checkpoints are verified against their manifest before they load.
            return torch.load(path, weights_only=False)
