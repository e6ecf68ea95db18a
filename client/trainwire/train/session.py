"""The training loop's session: where a worker stands, and ``train.report()`` written once.

``TrainContext`` is where this worker stands in its run (``ray.train.get_context()``), and
``TrainSession`` the interface a worker runtime implements for ``trainwire.train``; the session
of the loop running in this process is set with ``set_session``.

``train.report()``, ``get_checkpoint()`` and ``get_dataset_shard()`` are written once, in
``ReportingSession``: local mode (``trainwire.train.local``) and the worker runtime
(``trainwire_worker.session``) subclass it and give only their transport: where a report goes
(``_deliver``: in this process, or the worker's report stream) and what a dataset is to the
loop (``_shard``). What a report may hold, how reports are numbered and checkpoints named,
what a ``checkpoint_upload_fn`` must return and how validation metrics are computed are the
same in both, so they live here, with the loop's functions that call the session
(``report``, ``get_checkpoint``, ``get_context``, ...), which ``trainwire.train`` re-exports.
"""

from __future__ import annotations

import abc
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.train.v2 import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    ReportedCheckpoint,
    ValidationConfig,
    ValidationTaskConfig,
)
from trainwire_core.errors import InvalidArgumentError


@dataclass(frozen=True)
class TrainContext:
    """Where this worker stands in its run, as ``ray.train.get_context()`` tells."""

    run_id: str
    run_name: str
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    attempt: int = 0
    storage_path: str = ""
    # This worker's local artifact directory; SyncConfig(sync_artifacts=True) copies it to the store.
    trial_dir: str = ""

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.run_name

    def get_trial_name(self) -> str:
        return self.run_name

    def get_storage(self) -> StorageInfo:
        """The run's directory in the shared store (a URI string), with Ray's StorageContext helpers."""
        return StorageInfo(self.storage_path)

    def get_trial_dir(self) -> str:
        """A local directory for this worker's artifacts (logs, plots, ...), as in Ray Train."""
        return self.trial_dir


class StorageInfo(str):
    """The URI of the run's directory in the store; a ``str``, with Ray's ``StorageContext`` helpers.

    ``build_checkpoint_path_from_name(name)`` is where a checkpoint of that directory name is
    committed: a loop that writes there itself reports it with ``CheckpointUploadMode.NO_UPLOAD``.
    """

    @property
    def experiment_fs_path(self) -> str:
        return str(self)

    @property
    def storage_path(self) -> str:
        return str(self)

    def build_checkpoint_path_from_name(self, name: str) -> str:
        return f"{str(self).split('?', 1)[0].rstrip('/')}/checkpoints/{name}" + (
            "?" + str(self).split("?", 1)[1] if "?" in self else ""
        )


class TrainSession(abc.ABC):
    """What a worker provides to the training loop running on it."""

    context: TrainContext

    @abc.abstractmethod
    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None, **options: Any) -> None:
        """``options``: Train V2's checkpoint_dir_name, checkpoint_upload_mode,
        delete_local_checkpoint_after_upload, checkpoint_upload_fn and validation."""

    def get_all_reported_checkpoints(self, consistency_mode: Any, timeout_s: float | None) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not keep reported checkpoints")

    def set_validation(self, config: Any) -> None:
        """The trainer's ValidationConfig, set before the loop starts."""
        self.validation_config = config

    @abc.abstractmethod
    def get_checkpoint(self) -> Checkpoint | None: ...

    @abc.abstractmethod
    def get_dataset_shard(self, name: str) -> Any: ...


_session: TrainSession | None = None


def set_session(session: TrainSession | None) -> None:
    global _session
    _session = session


def get_session() -> TrainSession:
    if _session is None:
        raise RuntimeError(
            "trainwire.train functions work only inside a training loop run by a trainwire worker "
            "(pass the loop to a Trainer and call fit())"
        )
    return _session


def get_session_or_none() -> TrainSession | None:
    """The session of the loop running in this process, if one is."""
    return _session


def checkpoint_id_for(report_index: int) -> str:
    """The directory name of a checkpoint reported without ``checkpoint_dir_name``."""
    return f"checkpoint_{report_index:06d}"


def check_report_arguments(
    metrics: Any,
    checkpoint: Checkpoint | None,
    checkpoint_dir_name: str | None,
    checkpoint_upload_mode: CheckpointUploadMode | str,
    delete_local_checkpoint_after_upload: bool | None,
    validation: bool | ValidationTaskConfig,
    validation_config: ValidationConfig | None,
) -> tuple[CheckpointUploadMode, bool]:
    """``train.report``'s arguments, checked alike on a worker and in local mode.

    Returns:
        The upload mode, and whether the local checkpoint is deleted once uploaded.

    Raises:
        InvalidArgumentError: An argument ``train.report`` cannot take (the field is named).
    """
    from trainwire_core.storage import is_path_component

    if not isinstance(metrics, dict):
        raise InvalidArgumentError(f"train.report metrics must be a dict, got {type(metrics).__name__}")
    mode = CheckpointUploadMode(checkpoint_upload_mode)
    if checkpoint_dir_name is not None and not is_path_component(checkpoint_dir_name):
        raise InvalidArgumentError(
            f"train.report checkpoint_dir_name must be one plain directory name, got {checkpoint_dir_name!r}",
            field="checkpoint_dir_name",
        )
    if validation and checkpoint is None:
        raise InvalidArgumentError("train.report: validation needs a checkpoint", field="validation")
    if validation and validation_config is None:
        raise InvalidArgumentError(
            "train.report(validation=...) needs the trainer's validation_config=ValidationConfig(fn)",
            field="validation",
        )
    if delete_local_checkpoint_after_upload is None:
        # As Ray: an ASYNC upload owns the directory it was given.
        delete_local_checkpoint_after_upload = mode is CheckpointUploadMode.ASYNC
    return mode, delete_local_checkpoint_after_upload


@dataclass
class Report:
    """One checked ``train.report()`` call, numbered, for the transport to deliver.

    Args:
        index: The report's number in the run (the worker's continue the run's count).
        metrics: What the loop reported.
        checkpoint: The loop's checkpoint, or None.
        checkpoint_id: The checkpoint's directory name ("" without a checkpoint).
        mode: How the checkpoint is persisted.
        delete_local: Delete the loop's local checkpoint directory once it is persisted.
        upload_fn: The loop's ``checkpoint_upload_fn``, or None.
        validation: The validation to run on the checkpoint (False: none; only rank 0 validates).
    """

    index: int
    metrics: dict[str, Any]
    checkpoint: Checkpoint | None = None
    checkpoint_id: str = ""
    mode: CheckpointUploadMode = CheckpointUploadMode.SYNC
    delete_local: bool = False
    upload_fn: Any = None
    validation: bool | ValidationTaskConfig = False


class ReportingSession(TrainSession):
    """A loop's session: report checks and numbering, the latest checkpoint, the datasets.

    Args:
        context: This worker's place in the run.
        checkpoint: What ``get_checkpoint`` returns at the start (a restored or given one).
        datasets: Dataset name -> what the loop reads (a worker's shard, local mode's dataset).
        next_report_index: The number the first report takes.
    """

    def __init__(
        self, context: TrainContext, checkpoint: Checkpoint | None, datasets: dict[str, Any], next_report_index: int
    ) -> None:
        self.context = context
        self.validation_config: ValidationConfig | None = None
        self._checkpoint = checkpoint
        self._datasets = datasets
        self._next_index = next_report_index

    # --- report -----------------------------------------------------------------------
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
        """Checks and numbers the report, then hands it to the transport (Ray Train V2's arguments)."""
        mode, delete_local = check_report_arguments(
            metrics,
            checkpoint,
            checkpoint_dir_name,
            checkpoint_upload_mode,
            delete_local_checkpoint_after_upload,
            validation,
            self.validation_config,
        )
        self._before_report()
        index = self._next_index
        self._next_index += 1
        report = Report(index, metrics)
        if checkpoint is not None:
            report.checkpoint = checkpoint
            report.checkpoint_id = checkpoint_dir_name or checkpoint_id_for(index)
            report.mode = mode
            report.delete_local = bool(delete_local)
            report.upload_fn = checkpoint_upload_fn
            # As in Ray, rank 0's checkpoint is the one validated.
            report.validation = validation if self.context.world_rank == 0 else False
        self._deliver(report)

    def _before_report(self) -> None:
        """Raises what the transport knows has failed since the last report (nothing by default)."""

    @abc.abstractmethod
    def _deliver(self, report: Report) -> None:
        """Persists the report's checkpoint, if any, and passes the report on."""

    # --- helpers for the transports -----------------------------------------------------
    @staticmethod
    def _upload_with_fn(report: Report) -> Checkpoint:
        """The checkpoint the loop's ``checkpoint_upload_fn`` made of the reported one."""
        uploaded = report.upload_fn(report.checkpoint, report.checkpoint_id)
        if not isinstance(uploaded, Checkpoint):
            raise InvalidArgumentError(
                f"checkpoint_upload_fn must return a Checkpoint, got {type(uploaded).__name__}",
                field="checkpoint_upload_fn",
            )
        return uploaded

    @staticmethod
    def _delete_local(checkpoint: Checkpoint | None) -> None:
        if checkpoint is not None and checkpoint.is_local:
            shutil.rmtree(checkpoint.path, ignore_errors=True)

    def _validation_metrics(
        self, checkpoint: Checkpoint, validation: bool | ValidationTaskConfig, timeout: bool = False
    ) -> dict[str, Any]:
        """The validation function's metrics for ``checkpoint``.

        Args:
            timeout: Run it in a thread and give up after the config's timeout (the worker's way;
                local mode runs it inline, where a debugger steps into it).
        """
        config = self.validation_config
        assert config is not None  # check_report_arguments refuses a validation without one
        kwargs = config.kwargs_for(validation)
        if not timeout:
            metrics = config.fn(checkpoint, **kwargs) or {}
        else:
            limit = config.timeout_for(validation)
            box: dict[str, Any] = {}

            def run() -> None:
                try:
                    box["metrics"] = config.fn(checkpoint, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - raised below
                    box["error"] = exc

            thread = threading.Thread(target=run, name="trainwire-validate", daemon=True)
            thread.start()
            thread.join(limit)
            if thread.is_alive():
                raise TimeoutError(f"validation took over {limit} s")
            if "error" in box:
                raise box["error"]
            metrics = box.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise TypeError(f"the validation function must return a dict, got {type(metrics).__name__}")
        return metrics

    # --- reading back -------------------------------------------------------------------
    def get_checkpoint(self) -> Checkpoint | None:
        """The latest checkpoint reported (or the one the loop started from)."""
        return self._checkpoint

    def get_dataset_shard(self, name: str) -> Any:
        """What the loop reads of dataset ``name``.

        Raises:
            InvalidArgumentError: No dataset of that name was given (field ``datasets``).
        """
        if name not in self._datasets:
            known = ", ".join(sorted(self._datasets)) or "none"
            raise InvalidArgumentError(
                f"get_dataset_shard: no dataset named {name!r} was passed to the trainer (datasets: {known})",
                field="datasets",
            )
        return self._shard(name, self._datasets[name])

    def _shard(self, name: str, data: Any) -> Any:
        """Dataset ``name`` as the loop reads it (as it was given, by default)."""
        return data


# --- the loop's functions (``trainwire.train.report`` and the like: re-exported by the package) ---
def report(
    metrics: dict[str, Any],
    checkpoint: Checkpoint | None = None,
    checkpoint_dir_name: str | None = None,
    checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
    delete_local_checkpoint_after_upload: bool | None = None,
    checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    validation: bool | ValidationTaskConfig = False,
) -> None:
    """Reports metrics (and optionally a checkpoint) from this worker, as Ray Train V2's.

    Every worker must call ``report`` the same number of times; rank 0's metrics are the
    run's. Checkpoints are committed in report order.

    Args:
        metrics: JSON-able metrics.
        checkpoint: A checkpoint to persist in the run's storage.
        checkpoint_dir_name: The checkpoint's directory name (default ``checkpoint_<index>``);
            unique within the run.
        checkpoint_upload_mode: SYNC copies before returning (the directory may be deleted
            after); ASYNC returns at once and copies in the background (a local directory's
            files are hard-linked first where the filesystem allows, so the loop may delete it;
            else leave it until ``get_all_reported_checkpoints`` returns); NO_UPLOAD registers
            a checkpoint already in the run's storage.
        delete_local_checkpoint_after_upload: Delete the local directory once copied
            (default: True for ASYNC, else False).
        checkpoint_upload_fn: ``fn(checkpoint, dir_name) -> Checkpoint`` that persists the
            checkpoint itself into the run's storage (see ``get_context().get_storage()``).
        validation: True, or a ValidationTaskConfig: run the trainer's ValidationConfig on
            this checkpoint, beside the loop; its metrics join the checkpoint's.
    """
    get_session().report(
        metrics,
        checkpoint,
        checkpoint_dir_name=checkpoint_dir_name,
        checkpoint_upload_mode=checkpoint_upload_mode,
        delete_local_checkpoint_after_upload=delete_local_checkpoint_after_upload,
        checkpoint_upload_fn=checkpoint_upload_fn,
        validation=validation,
    )


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """The run's committed checkpoints with their metrics, oldest first, once this worker's reports are in."""
    return get_session().get_all_reported_checkpoints(consistency_mode, timeout_s)


def get_checkpoint() -> Checkpoint | None:
    """The latest checkpoint of this run, or the one it resumes from, or None."""
    return get_session().get_checkpoint()


def get_context() -> TrainContext:
    """Ranks, world size and the run's name."""
    return get_session().context


def get_dataset_shard(dataset_name: str | None = "train") -> Any:
    """This worker's shard of a dataset passed to the trainer (a Ray Data iterator)."""
    return get_session().get_dataset_shard(dataset_name or "train")


def get_world_size() -> int:
    """How many workers the run has."""
    return get_context().get_world_size()


def get_world_rank() -> int:
    """This worker's rank among all workers (0 is the one whose metrics are the run's)."""
    return get_context().get_world_rank()


def get_local_rank() -> int:
    """This worker's rank among the workers on its node."""
    return get_context().get_local_rank()


def get_local_world_size() -> int:
    """How many of the run's workers are on this worker's node."""
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    """The rank of this worker's node."""
    return get_context().get_node_rank()


def get_trial_name() -> str:
    """The run's name (Ray's trial name)."""
    return get_context().get_trial_name()


def get_experiment_name() -> str:
    """The run's name (Ray's experiment name)."""
    return get_context().get_experiment_name()


def get_trial_dir() -> str:
    """A local directory for this worker's artifacts."""
    return get_context().get_trial_dir()
