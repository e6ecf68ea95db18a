"""Ray Train V2's local mode: ``ScalingConfig(num_workers=0)`` runs the loop in the calling process.

No coordinator, no Ray: ``train.report`` records metrics, checkpoints are copied into
``<storage_path>/<name>/checkpoints/`` (default storage: ``~/trainwire_results``), and
``fit()`` returns a Result as a run would, for stepping through a loop in a debugger.
Validation runs inline. Rank 0 of a world of 1.
"""

from __future__ import annotations

import inspect
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from trainwire.callbacks import dispatch
from trainwire.checkpoint import Checkpoint
from trainwire.result import Result, WorkerFailure
from trainwire.train.session import Report, ReportingSession, TrainContext, get_session_or_none, set_session
from trainwire.train.v2 import CheckpointUploadMode, ReportedCheckpoint, TrainRunContext, UserCallback
from trainwire_core.errors import InvalidArgumentError, TrainingFailedError
from trainwire_core.structs import flatten_metrics

if TYPE_CHECKING:
    from trainwire.config import RunConfig


class LocalTrainer(Protocol):
    """What local mode runs of a trainer (a DataParallelTrainer with ``num_workers=0``)."""

    train_loop_per_worker: Any
    train_loop_config: dict[str, Any] | None
    run_config: RunConfig
    datasets: dict[str, Any]
    resume_from_checkpoint: Checkpoint | None

    def _callbacks(self) -> list[Any]: ...


DEFAULT_STORAGE = "~/trainwire_results"


class LocalSession(ReportingSession):
    """The session of a local-mode loop: reports stay in this process, checkpoints in a local folder."""

    def __init__(self, context: TrainContext, run_dir: str, checkpoint: Checkpoint | None, datasets: dict) -> None:
        super().__init__(context, checkpoint, datasets, next_report_index=1)
        self.run_dir = run_dir
        self.history: list[dict[str, Any]] = []
        self.checkpoints: list[ReportedCheckpoint] = []
        self.user_callbacks: list[UserCallback] = []

    def _deliver(self, report: Report) -> None:
        """Copies the checkpoint into the run's folder, validates it inline and runs the callbacks."""
        metrics = dict(report.metrics)
        if report.checkpoint is not None:
            dest = os.path.join(self.run_dir, "checkpoints", report.checkpoint_id)
            if report.upload_fn is not None:
                dest = self._upload_with_fn(report).path
            elif report.mode is CheckpointUploadMode.NO_UPLOAD:
                dest = report.checkpoint.path
            else:
                report.checkpoint.to_directory(dest)
                if report.delete_local:
                    self._delete_local(report.checkpoint)
            committed = Checkpoint.from_directory(dest) if "://" not in str(dest) else Checkpoint(dest)
            if report.validation:
                metrics.update(self._validation_metrics(committed, report.validation))
            self._checkpoint = committed
            self.checkpoints.append(ReportedCheckpoint(committed, metrics))
        self.history.append(metrics)
        run_context = TrainRunContext(self.context.run_id, self.context.run_name)
        reported = self._checkpoint if report.checkpoint is not None else None
        dispatch(self.user_callbacks, "after_report", run_context, [metrics], reported)

    def get_all_reported_checkpoints(self, consistency_mode: Any = None, timeout_s: float | None = None) -> list:
        return list(self.checkpoints)

    def _shard(self, name: str, data: Any) -> Any:
        if hasattr(data, "iterator"):  # a ray.data.Dataset: its iterator, as a worker's shard is
            return data.iterator()
        if isinstance(data, pd.DataFrame | pa.Table):
            # A worker's shard is a Ray Data iterator: the same methods here, without starting Ray.
            return LocalDataShard(data)
        return data


def _column_values(column: pa.ChunkedArray) -> np.ndarray:
    """A column as numpy; list-typed cells (tensors) stacked into one array where they have one shape."""
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype == object and len(values) and all(isinstance(v, np.ndarray) for v in values):
        try:
            return np.stack(values)
        except ValueError:
            return values
    return values


class LocalDataShard:
    """A local-mode dataset shard with Ray Data's ``DataIterator`` methods (and ``materialize()``'s).

    A worker gets its shard as a Ray Data iterator; in local mode a pandas DataFrame or an Arrow
    table passed as a dataset is wrapped in this instead, so the loop reads it the same way:
    ``iter_batches``, ``iter_torch_batches``, ``iter_tf_batches``, ``iter_rows``, ``to_tf``,
    ``materialize().to_pandas()`` (Ray's GBDT pattern), ``count``, ``schema``. Batches come in the
    rows' order unless ``local_shuffle_buffer_size`` is given (then the rows are shuffled once per
    pass, seeded by ``local_shuffle_seed``); ``prefetch_batches`` has nothing to prefetch here.
    """

    def __init__(self, data: pd.DataFrame | pa.Table) -> None:
        self._table = pa.Table.from_pandas(data, preserve_index=False) if isinstance(data, pd.DataFrame) else data

    def __repr__(self) -> str:
        return f"LocalDataShard(num_rows={self._table.num_rows}, schema={self._table.schema.names})"

    # --- Ray Data's DataIterator ------------------------------------------------------------
    def iter_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        batch_format: str | None = "default",
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterator[Any]:
        """Batches of ``batch_size`` rows as dicts of numpy arrays ("default"/"numpy"), "pandas" or "pyarrow"."""
        if batch_format not in ("default", "numpy", "pandas", "pyarrow", None):
            raise ValueError(f"batch_format must be 'default', 'numpy', 'pandas' or 'pyarrow', got {batch_format!r}")
        table = self._table
        if local_shuffle_buffer_size:
            order = np.random.default_rng(local_shuffle_seed).permutation(table.num_rows)
            table = table.take(pa.array(order))
        size = table.num_rows if batch_size is None else int(batch_size)
        if size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        for start in range(0, table.num_rows, size):
            part = table.slice(start, size)
            if drop_last and part.num_rows < size:
                break
            if batch_format == "pyarrow":
                yield part
            elif batch_format == "pandas":
                yield part.to_pandas()
            else:
                yield {name: _column_values(part.column(name)) for name in part.column_names}

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """Each row as a dict."""
        yield from self._table.to_pylist()

    def iter_torch_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        device: Any = "auto",
        collate_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        pin_memory: bool = False,
    ) -> Iterator[Any]:
        """Batches as dicts of torch tensors (``dtypes``: one dtype or one per column), or ``collate_fn``'s."""
        import torch

        target = "cpu" if device == "auto" else device  # one process, no accelerator assigned to it
        for batch in self.iter_batches(
            batch_size=batch_size,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        ):
            if collate_fn is not None:
                yield collate_fn(batch)
                continue
            yield {
                name: torch.tensor(
                    values, dtype=dtypes.get(name) if isinstance(dtypes, dict) else dtypes, device=target
                )
                for name, values in batch.items()
            }

    def iter_tf_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Batches as dicts of TensorFlow tensors (``dtypes``: one dtype or one per column)."""
        import tensorflow as tf

        for batch in self.iter_batches(
            batch_size=batch_size,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        ):
            yield {
                name: tf.convert_to_tensor(values, dtype=dtypes.get(name) if isinstance(dtypes, dict) else dtypes)
                for name, values in batch.items()
            }

    def to_tf(
        self,
        feature_columns: str | list[str],
        label_columns: str | list[str],
        *,
        additional_columns: str | list[str] | None = None,
        prefetch_batches: int = 1,
        batch_size: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        feature_type_spec: Any = None,
        label_type_spec: Any = None,
        additional_type_spec: Any = None,
    ) -> Any:
        """A ``tf.data.Dataset`` of (features, labels): a tensor for one column name, a dict for a list."""
        import tensorflow as tf

        def pick(columns: str | list[str], batch: dict[str, np.ndarray]) -> Any:
            if isinstance(columns, str):
                return batch[columns]
            return {c: batch[c] for c in columns}

        full = next(
            self.iter_batches(
                batch_size=None,
                local_shuffle_buffer_size=local_shuffle_buffer_size,
                local_shuffle_seed=local_shuffle_seed,
            ),
            None,
        )
        if full is None:
            full = {name: np.array([]) for name in self._table.column_names}
        parts = [pick(feature_columns, full), pick(label_columns, full)]
        if additional_columns is not None:
            parts.append(pick(additional_columns, full))
        return tf.data.Dataset.from_tensor_slices(tuple(parts)).batch(batch_size, drop_remainder=drop_last)

    def materialize(self) -> LocalDataShard:
        """The shard's rows, held (they already are): ``to_pandas()``, ``count()``, ``take()`` ..."""
        return LocalDataShard(self._table)

    def schema(self) -> pa.Schema:
        """The rows' Arrow schema."""
        return self._table.schema

    def stats(self) -> str:
        """A line about the shard (Ray's execution statistics have nothing to report here)."""
        return f"local-mode shard: {self._table.num_rows} rows, {self._table.num_columns} columns"

    # --- MaterializedDataset's reads -------------------------------------------------------
    def to_pandas(self, limit: int | None = None) -> pd.DataFrame:
        """The rows as a pandas DataFrame."""
        table = self._table if limit is None else self._table.slice(0, limit)
        return table.to_pandas()

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table."""
        return self._table

    def count(self) -> int:
        """The number of rows."""
        return self._table.num_rows

    def columns(self) -> list[str]:
        """The column names."""
        return list(self._table.column_names)

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        """The first ``limit`` rows as dicts."""
        return self._table.slice(0, limit).to_pylist()

    def take_all(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every row as a dict."""
        return self._table.to_pylist() if limit is None else self.take(limit)

    def take_batch(self, batch_size: int = 20, *, batch_format: str | None = "default") -> Any:
        """The first ``batch_size`` rows as one batch."""
        return next(self.iter_batches(batch_size=batch_size, batch_format=batch_format))


def _ranked(session: LocalSession, trainer: LocalTrainer) -> list[ReportedCheckpoint]:
    config = trainer.run_config.checkpoint_config
    attr = config.checkpoint_score_attribute
    order = list(enumerate(session.checkpoints))
    if not attr:
        return [c for _, c in sorted(order, key=lambda p: p[0], reverse=True)]

    def score(item: tuple[int, ReportedCheckpoint]) -> tuple[float, int]:
        value = flatten_metrics(item[1].metrics).get(attr)
        if not isinstance(value, int | float):
            return (float("-inf"), item[0])
        return (value if config.checkpoint_score_order == "max" else -value, item[0])

    return [c for _, c in sorted(order, key=score, reverse=True)]


def run_local(trainer: LocalTrainer) -> Result:
    """Runs ``trainer``'s loop here and returns its Result (raises TrainingFailedError as fit() does)."""
    loop = trainer.train_loop_per_worker
    if not callable(loop):
        raise InvalidArgumentError("local mode needs train_loop_per_worker as a function", field="train_loop")
    if get_session_or_none() is not None:
        raise InvalidArgumentError("local mode cannot start inside another training loop", field="scaling_config")
    name = trainer.run_config.name or f"local-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    storage = os.path.expanduser(trainer.run_config.storage_path or DEFAULT_STORAGE)
    if storage.startswith("file://"):
        storage = storage[len("file://") :]
    if "://" in storage:
        raise InvalidArgumentError("local mode keeps checkpoints in a local directory", field="run_config.storage_path")
    run_dir = os.path.join(storage, name)
    os.makedirs(run_dir, exist_ok=True)
    context = TrainContext(
        run_id=name,
        run_name=name,
        world_rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        storage_path=run_dir,
        trial_dir=run_dir,
    )
    session = LocalSession(context, run_dir, trainer.resume_from_checkpoint, dict(trainer.datasets))
    session.validation_config = getattr(trainer, "validation_config", None)
    callbacks = trainer._callbacks()
    session.user_callbacks = [c for c in callbacks if isinstance(c, UserCallback)]
    error: WorkerFailure | None = None
    set_session(session)
    return_value: Any = None
    try:
        if inspect.signature(loop).parameters:
            return_value = loop(dict(trainer.train_loop_config or {}))
        else:
            return_value = loop()
    except Exception as exc:  # the Result carries it, as a run's does
        error = WorkerFailure(0, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))
        dispatch(session.user_callbacks, "after_exception", TrainRunContext(name, name), {0: exc})
    finally:
        set_session(None)
    ranked = _ranked(session, trainer)
    result = Result(
        metrics=session.history[-1] if session.history else {},
        checkpoint=session.checkpoints[-1].checkpoint if session.checkpoints else None,
        error=error,
        path=run_dir,
        metrics_dataframe=pd.json_normalize(session.history, sep="/") if session.history else pd.DataFrame(),
        best_checkpoints=[(c.checkpoint, c.metrics) for c in ranked],
        run_id=name,
        name=name,
        state="FAILED" if error else "SUCCEEDED",
        return_value=None if error else return_value,
    )
    if error is not None:
        raise TrainingFailedError(f"local run {name!r} failed: {error}", result)
    return result
