"""Ray Train V2's local mode: ``ScalingConfig(num_workers=0)`` runs the loop in the calling process.

No coordinator, no Ray: ``train.report`` records metrics, checkpoints are copied into
``<storage_path>/<name>/checkpoints/`` (default storage: ``~/trainwire_results``), and
``fit()`` returns a Result as a run would, for stepping through a loop in a debugger.
Validation runs inline. Rank 0 of a world of 1.
"""

from __future__ import annotations

import inspect
import os
import shutil
import time
import traceback
import uuid
from typing import TYPE_CHECKING, Any

import pandas as pd

from trainwire.callbacks import dispatch
from trainwire.checkpoint import Checkpoint
from trainwire.result import Result, WorkerFailure
from trainwire.train.context import TrainContext, TrainSession, get_session_or_none, set_session
from trainwire.train.v2 import (
    CheckpointUploadMode,
    ReportedCheckpoint,
    TrainRunContext,
    UserCallback,
    ValidationConfig,
    ValidationTaskConfig,
    check_report_arguments,
)
from trainwire_core.errors import InvalidArgumentError, TrainingFailedError
from trainwire_core.structs import flatten_metrics

if TYPE_CHECKING:
    from trainwire.trainer import DataParallelTrainer

DEFAULT_STORAGE = "~/trainwire_results"


class LocalSession(TrainSession):
    """The session of a local-mode loop: everything stays in this process and a local folder."""

    def __init__(self, context: TrainContext, run_dir: str, checkpoint: Checkpoint | None, datasets: dict) -> None:
        self.context = context
        self.run_dir = run_dir
        self.validation_config: ValidationConfig | None = None
        self._checkpoint = checkpoint
        self._datasets = datasets
        self._index = 0
        self.history: list[dict[str, Any]] = []
        self.checkpoints: list[ReportedCheckpoint] = []
        self.user_callbacks: list[UserCallback] = []

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint | None = None,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Any = None,
        validation: bool | ValidationTaskConfig = False,
    ) -> None:
        mode, delete_local = check_report_arguments(
            metrics,
            checkpoint,
            checkpoint_dir_name,
            checkpoint_upload_mode,
            delete_local_checkpoint_after_upload,
            validation,
            self.validation_config,
        )
        self._index += 1
        metrics = dict(metrics)
        if checkpoint is not None:
            name = checkpoint_dir_name or f"checkpoint_{self._index:06d}"
            dest = os.path.join(self.run_dir, "checkpoints", name)
            if checkpoint_upload_fn is not None:
                checkpoint = checkpoint_upload_fn(checkpoint, name)
                dest = checkpoint.path
            elif mode is CheckpointUploadMode.NO_UPLOAD:
                dest = checkpoint.path
            else:
                checkpoint.to_directory(dest)
                if delete_local and checkpoint.is_local:
                    shutil.rmtree(checkpoint.path, ignore_errors=True)
            committed = Checkpoint.from_directory(dest) if "://" not in str(dest) else Checkpoint(dest)
            if validation:
                kwargs = self.validation_config.kwargs_for(validation)
                metrics.update(self.validation_config.fn(committed, **kwargs) or {})
            self._checkpoint = committed
            self.checkpoints.append(ReportedCheckpoint(committed, metrics))
        self.history.append(metrics)
        run_context = TrainRunContext(self.context.run_id, self.context.run_name)
        reported = self._checkpoint if checkpoint is not None else None
        dispatch(self.user_callbacks, "after_report", run_context, [metrics], reported)

    def get_checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    def get_all_reported_checkpoints(self, consistency_mode: Any = None, timeout_s: float | None = None) -> list:
        return list(self.checkpoints)

    def get_dataset_shard(self, name: str) -> Any:
        if name not in self._datasets:
            known = ", ".join(sorted(self._datasets)) or "none"
            raise InvalidArgumentError(
                f"get_dataset_shard: no dataset named {name!r} was passed to the trainer (datasets: {known})",
                field="datasets",
            )
        data = self._datasets[name]
        if hasattr(data, "iterator"):  # a ray.data.Dataset: its iterator, as a worker's shard is
            return data.iterator()
        return data


def _ranked(session: LocalSession, trainer: DataParallelTrainer) -> list[ReportedCheckpoint]:
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


def run_local(trainer: DataParallelTrainer) -> Result:
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
    try:
        if inspect.signature(loop).parameters:
            loop(dict(trainer.train_loop_config or {}))
        else:
            loop()
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
    )
    if error is not None:
        raise TrainingFailedError(f"local run {name!r} failed: {error}", result)
    return result
