"""``HuggingFacePredictor``: a Transformers pipeline over a text column, as Ray's ``TransformersPredictor``."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.huggingface.checkpoint import model_dir
from trainwire.huggingface.framework import FRAMEWORK
from trainwire.predictor import DataBatch, Predictor

TEXT_COLUMN = "text"
# Model class suffix -> the pipeline task it serves, for checkpoints that name no task.
_TASKS = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",
    "ForCausalLM": "text-generation",
    "LMHeadModel": "text-generation",  # GPT-2's own name for its causal LM
    "ForConditionalGeneration": "text2text-generation",
}


class HuggingFacePredictor(Predictor):
    """Scores text with a ``transformers`` pipeline, such as text-classification.

    ``predict`` takes a DataFrame (or a dict of 1-D arrays) whose one feature
    column holds the texts and returns the pipeline's answers as columns, e.g.
    ``label`` and ``score`` for text-classification. In the predictor service
    the input is a BYTES tensor named as that column ("text" by default).

    As in Ray 2.4, ``predict(data, feature_columns=["review"])`` names the text column for one
    call; without it an input of one column not named "text" is taken as the texts.

    Args:
        pipeline: A ``transformers.Pipeline``.
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: The text column (several: each row is passed as a dict of them); None: the input's.
    """

    framework = FRAMEWORK.name
    input_datatype = "BYTES"
    takes_frame = True

    def __init__(self, pipeline: Any, preprocessor: Any = None, feature_columns: list[str] | None = None) -> None:
        super().__init__(preprocessor, feature_columns)
        self.pipeline = pipeline

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Checkpoint,
        *,
        pipeline_cls: Any = None,
        use_gpu: bool = False,
        preprocessor: Any = None,
        feature_columns: list[str] | None = None,
        **pipeline_kwargs: Any,
    ) -> HuggingFacePredictor:
        """Builds the pipeline from the checkpoint's model and tokenizer.

        Args:
            pipeline_cls: A pipeline factory (default ``transformers.pipeline``).
            use_gpu: Run the pipeline on the first GPU.
            **pipeline_kwargs: Passed to the factory, e.g. ``task="text-classification"``
                (default: the task the model's architecture is for) or ``tokenizer=`` (a tokenizer
                or a model name; default: the checkpoint's own).
        """
        import transformers

        given = {"preprocessor": preprocessor, "feature_columns": feature_columns}
        kwargs = cls.checkpoint_defaults(checkpoint, {k: v for k, v in given.items() if v is not None})
        kwargs["feature_columns"] = kwargs["feature_columns"] or [TEXT_COLUMN]
        factory = pipeline_cls or transformers.pipeline
        with checkpoint.as_directory() as d:
            path = model_dir(d)
            task = pipeline_kwargs.pop("task", None) or _task_of(path)
            pipeline_kwargs.setdefault("tokenizer", path)
            pipe = factory(task, model=path, device=0 if use_gpu else -1, **pipeline_kwargs)
        return cls(pipe, **kwargs)

    def predict_columns(
        self, data: DataBatch, feature_columns: list[Any] | None = None, **predict_kwargs: Any
    ) -> dict[str, np.ndarray]:
        """Scores the text column(s); see ``Predictor.predict``."""
        if feature_columns is None and self.preprocessor is None and self.feature_columns == [TEXT_COLUMN]:
            names = (
                list(data.columns) if isinstance(data, pd.DataFrame) else list(data) if isinstance(data, dict) else []
            )
            if len(names) == 1 and names[0] != TEXT_COLUMN:
                # The default column name was never the caller's: Ray takes the one column given.
                feature_columns = names
        return super().predict_columns(data, feature_columns, **predict_kwargs)

    def _predict_pandas(self, data: pd.DataFrame, **pipeline_call_kwargs: Any) -> pd.DataFrame:
        if data.shape[1] == 1:
            inputs: list[Any] = [_text(v) for v in data.iloc[:, 0]]
        else:
            inputs = [{k: _text(v) for k, v in row.items()} for row in data.to_dict("records")]
        out = self.pipeline(inputs, **pipeline_call_kwargs)
        if out and all(isinstance(item, dict) for item in out):
            return pd.DataFrame(out)
        return pd.DataFrame({"predictions": out})


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _task_of(path: str) -> str:
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    for architecture in config.get("architectures") or []:
        for suffix, task in _TASKS.items():
            if architecture.endswith(suffix):
                return task
    raise ValueError(
        f"cannot tell which pipeline task the model of architectures {config.get('architectures')} serves; "
        "pass task=... to from_checkpoint"
    )
