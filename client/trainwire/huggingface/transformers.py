"""HuggingFace Transformers in a ``TorchTrainer`` loop, mirroring ``ray.train.huggingface.transformers``.

Inside ``train_loop_per_worker``::

    trainer = transformers.Trainer(model=model, args=TrainingArguments(..., use_cpu=True), ...)
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    trainer.train()

The torch backend has already initialised the process group and set ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, which is what
``accelerate`` (and so ``transformers.Trainer``) reads, exactly as under
``torchrun``: the Trainer joins that group and wraps the model in DDP. Build the
``TrainingArguments`` inside the loop (not on the driver), with ``use_cpu=True`` on
CPU workers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

try:
    import torch
    import transformers
    import transformers.trainer
    from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trainwire.huggingface.transformers needs `transformers` and `accelerate` (pip install transformers accelerate)"
    ) from e

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.huggingface.checkpoint import MODEL_DIR

__all__ = ["RayTrainReportCallback", "ShardRows", "TrainReportCallback", "prepare_trainer"]


class RayTrainReportCallback(transformers.TrainerCallback):
    """Reports the Trainer's latest logs and checkpoint after every save, as Ray's callback does.

    With ``report_evaluations`` (what ``HuggingFaceTrainer`` uses), an evaluation
    that no save follows at the same step is reported too, without a checkpoint.

    On each ``on_save`` (called on every rank, so every rank reports equally often)
    the entries of ``state.log_history`` are merged into one metrics dict and the
    newest ``checkpoint-*`` folder under ``args.output_dir`` is reported as::

        <trainwire checkpoint>/
        └─ checkpoint/    the HuggingFace checkpoint (from_pretrained loads it)

    Configure logging, evaluation and saving so that the metric you monitor is
    up to date when a checkpoint is saved (e.g. ``save_steps`` a multiple of
    ``logging_steps``).
    """

    CHECKPOINT_NAME = MODEL_DIR

    def __init__(self, report_evaluations: bool = False) -> None:
        self.report_evaluations = report_evaluations

    def on_evaluate(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Reports the merged logs, unless a save at this step will report them with its checkpoint."""
        if self.report_evaluations and not control.should_save:
            train.report(_merged(state.log_history))

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Reports merged ``log_history`` with the checkpoint just saved."""
        metrics = _merged(state.log_history)
        # Rank 0 writes the weights; without this a rank sharing its output_dir could copy half-written files.
        _barrier()
        source = transformers.trainer.get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
        if source is None:
            train.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="trainwire-hf-") as tmp:
            shutil.copytree(source, os.path.join(tmp, self.CHECKPOINT_NAME), copy_function=_link_or_copy)
            train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


TrainReportCallback = RayTrainReportCallback


def _merged(log_history: list[dict[str, Any]]) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for log in log_history:
        metrics.update(log)
    return metrics


class ShardRows(Dataset):
    """This worker's shard of a dataset as a torch dataset of row dicts (what ``HuggingFaceTrainer`` passes).

    The rows are read into memory once, so the Trainer knows the epoch length
    and shuffles each epoch; ``prepare_trainer`` keeps the Trainer from splitting
    the shard again across ranks.
    """

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    @classmethod
    def read(cls, shard: Any) -> ShardRows:
        """Reads a Ray Data shard (a ``DataIterator``) into rows."""
        rows: list[dict[str, Any]] = []
        for batch in shard.iter_batches(batch_format="numpy"):
            names = list(batch)
            columns = [batch[n].tolist() for n in names]
            rows.extend(dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True))
        return cls(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]


class _IterableDataset(IterableDataset):
    """A Ray Data batch iterable as a torch ``IterableDataset`` (each item is a whole batch)."""

    def __init__(self, batches: Any) -> None:
        super().__init__()
        self.batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)


def prepare_trainer(trainer: transformers.Trainer) -> transformers.Trainer:
    """Readies a ``transformers.Trainer`` built inside a training loop for this run.

    Checks that the Trainer joined this run's process group (world size and rank
    match the worker's), and lets it train on a Ray Data batch iterable such as
    ``train.get_dataset_shard("train").iter_torch_batches(...)``: such datasets
    are already this worker's shard and already batched, so they are fed as is.

    Args:
        trainer: The Trainer to prepare; its class is swapped in place.

    Returns:
        The same Trainer.

    Raises:
        ValueError: The Trainer sees another world size or rank than this worker.
    """
    _check_distributed(trainer.args)
    base = type(trainer)

    class TrainwireTransformersTrainer(base):
        """``base`` feeding Ray Data batch iterables straight to the training loop."""

        def get_train_dataloader(self) -> DataLoader:
            if _is_batch_iterable(self.train_dataset):
                return _batch_loader(self.train_dataset)
            if isinstance(self.train_dataset, ShardRows):
                return _rows_loader(self, self.train_dataset, "training", self._train_batch_size, shuffle=True)
            return super().get_train_dataloader()

        def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
            if eval_dataset is None:
                eval_dataset = self.eval_dataset
            named = (
                self.eval_dataset[eval_dataset]
                if isinstance(eval_dataset, str) and isinstance(self.eval_dataset, dict)
                else eval_dataset
            )
            if _is_batch_iterable(named):
                return _batch_loader(named)
            if isinstance(named, ShardRows):
                return _rows_loader(self, named, "evaluation", self.args.eval_batch_size, shuffle=False)
            return super().get_eval_dataloader(eval_dataset)

    TrainwireTransformersTrainer.__name__ = TrainwireTransformersTrainer.__qualname__ = f"Trainwire{base.__name__}"
    trainer.__class__ = TrainwireTransformersTrainer
    return trainer


def _check_distributed(args: transformers.TrainingArguments) -> None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if (args.world_size, args.process_index) != (world_size, rank):
        raise ValueError(
            f"the HuggingFace Trainer sees world size {args.world_size} and rank {args.process_index}, "
            f"but this worker is rank {rank} of {world_size}: build TrainingArguments inside the training "
            "loop (not on the driver), and set use_cpu=True when the workers have no GPU"
        )


def _is_batch_iterable(dataset: Any) -> bool:
    try:
        from ray.data.iterator import _IterableFromIterator
    except ImportError:  # pragma: no cover - Ray is a dependency of trainwire
        return False
    return isinstance(dataset, _IterableFromIterator)


def _batch_loader(batches: Any) -> DataLoader:
    # batch_size=1 with an unwrapping collate: the iterable already yields whole batches.
    return DataLoader(_IterableDataset(batches), batch_size=1, collate_fn=lambda items: items[0])


def _rows_loader(
    trainer: transformers.Trainer, rows: ShardRows, description: str, batch_size: int, shuffle: bool
) -> DataLoader:
    # Not through accelerator.prepare, which would give each rank a part of a shard that is already its own.
    generator = torch.Generator()
    generator.manual_seed(trainer.args.seed)
    return DataLoader(
        rows,
        batch_size=batch_size,
        sampler=RandomSampler(rows, generator=generator) if shuffle else SequentialSampler(rows),
        collate_fn=trainer._get_collator_with_removed_columns(trainer.data_collator, description=description),
        drop_last=trainer.args.dataloader_drop_last,
    )


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _link_or_copy(src: str, dst: str) -> None:
    # A hard link costs nothing and the report uploads the files before the temp dir goes.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
