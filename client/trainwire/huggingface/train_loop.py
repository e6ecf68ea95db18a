"""The loop ``HuggingFaceTrainer`` runs on every worker (imported there, never on the driver)."""

from __future__ import annotations

import contextlib
from typing import Any

import cloudpickle
import transformers

from trainwire import train
from trainwire.huggingface.checkpoint import model_dir
from trainwire.huggingface.trainer import EVAL_DATASET, TRAIN_DATASET
from trainwire.huggingface.transformers import RayTrainReportCallback, ShardRows, prepare_trainer
from trainwire_core.errors import InvalidArgumentError


def huggingface_train_loop(config: dict[str, Any]) -> None:
    """Builds the user's Trainer on this worker's shards and trains it, resuming from the run's checkpoint."""
    init = cloudpickle.loads(config["trainer_init_per_worker"])
    train_rows = ShardRows.read(train.get_dataset_shard(TRAIN_DATASET))
    eval_shard = _shard_or_none(EVAL_DATASET)
    eval_rows = ShardRows.read(eval_shard) if eval_shard is not None else None
    trainer = init(train_rows, eval_rows, **config.get("trainer_init_config", {}))
    if not isinstance(trainer, transformers.Trainer):
        raise TypeError(f"trainer_init_per_worker must return a transformers.Trainer, got {type(trainer).__name__}")
    trainer.add_callback(RayTrainReportCallback(report_evaluations=True))
    trainer = prepare_trainer(trainer)
    checkpoint = train.get_checkpoint()
    with checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext() as directory:
        trainer.train(resume_from_checkpoint=model_dir(directory) if directory else None)


def _shard_or_none(name: str) -> Any:
    try:
        return train.get_dataset_shard(name)
    except InvalidArgumentError:  # not passed to the trainer: no evaluation set
        return None
