"""``HuggingFaceTrainer`` (alias ``TransformersTrainer``), with Ray 2.x's signature.

``trainer_init_per_worker(train_dataset, eval_dataset, **trainer_init_config)``
runs on every worker and returns a ``transformers.Trainer``. The datasets it
gets are this worker's shards of ``datasets["train"]`` and
``datasets["evaluation"]`` as torch datasets of row dicts (each worker trains
on its own shard: the Trainer does not split them again). trainwire adds
``RayTrainReportCallback``, so every evaluation reports its metrics and every
save reports them with the checkpoint, and resumes from
``resume_from_checkpoint`` or, after a failure, from the latest checkpoint.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
from trainwire.huggingface.framework import FRAMEWORK
from trainwire.runtime_env import pickle_by_value
from trainwire.torch.trainer import TorchConfig, TorchTrainer
from trainwire_core.errors import InvalidArgumentError

TRAIN_DATASET = "train"
EVAL_DATASET = "evaluation"
# Installed with trainwire on every worker, so only the user's init function travels pickled.
TRAIN_LOOP = "trainwire.huggingface.train_loop:huggingface_train_loop"


class HuggingFaceTrainer(TorchTrainer):
    """Fine-tunes with a ``transformers.Trainer`` on every worker, in one torch DDP group.

    Args:
        trainer_init_per_worker: ``(train_dataset, eval_dataset, **config) -> transformers.Trainer``.
            Build ``TrainingArguments`` inside it (with ``use_cpu=True`` on CPU workers) and pass
            the tokenizer as ``processing_class`` so checkpoints can be served.
        trainer_init_config: Keyword arguments for ``trainer_init_per_worker``.
        torch_config: Process-group options.
        **kwargs: ``scaling_config``, ``run_config``, ``datasets`` ("train" and optionally
            "evaluation"), ``preprocessor``, ``resume_from_checkpoint``, ``metadata``.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = HuggingFaceCheckpoint

    def __init__(
        self,
        trainer_init_per_worker: Callable[..., Any],
        *,
        trainer_init_config: dict[str, Any] | None = None,
        torch_config: TorchConfig | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(trainer_init_per_worker):
            raise InvalidArgumentError(
                "trainer_init_per_worker must be a function (train_dataset, eval_dataset, **config)",
                field="trainer_init_per_worker",
            )
        _check_takes_two_datasets(trainer_init_per_worker)
        if trainer_init_config is not None and not isinstance(trainer_init_config, dict):
            raise InvalidArgumentError("trainer_init_config must be a dict", field="trainer_init_config")
        unknown = set(kwargs.get("datasets") or {}) - {TRAIN_DATASET, EVAL_DATASET}
        if unknown:
            raise InvalidArgumentError(
                f"HuggingFaceTrainer takes datasets {TRAIN_DATASET!r} and {EVAL_DATASET!r}, "
                f"not {', '.join(map(repr, sorted(unknown)))}",
                field="datasets",
            )
        self.trainer_init_per_worker = trainer_init_per_worker
        self.trainer_init_config = trainer_init_config or {}
        super().__init__(
            TRAIN_LOOP,
            train_loop_config={
                "trainer_init_per_worker": pickle_by_value(trainer_init_per_worker),
                "trainer_init_config": self.trainer_init_config,
            },
            torch_config=torch_config,
            **kwargs,
        )

    def _code_objects(self) -> list:
        return [self.trainer_init_per_worker, self.trainer_init_config, *super()._code_objects()]


TransformersTrainer = HuggingFaceTrainer


def _check_takes_two_datasets(fn: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    positional = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values()):
        raise InvalidArgumentError(
            "trainer_init_per_worker must take (train_dataset, eval_dataset, **config)",
            field="trainer_init_per_worker",
        )
