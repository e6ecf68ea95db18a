"""Ray Train V2's API objects (``ray.train`` since Ray 2.51), and Ray's ``ray.train.v2`` paths.

``from trainwire import train`` gives each of these under Ray's name: ``train.CheckpointUploadMode``,
``train.CheckpointConsistencyMode``, ``train.ValidationConfig``, ``train.ValidationTaskConfig``,
``train.ReportedCheckpoint``, ``train.ReportedCheckpointStatus``, ``train.UserCallback``,
``train.LoggingConfig``, ``train.BackendConfig``, ``train.PreemptionInfo`` and the errors of
``trainwire.train.v2.api.exceptions``. ``trainwire.train.v2.jax`` and
``trainwire.train.v2.api.data_parallel_trainer`` are the module paths Ray's docs import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from trainwire.callbacks import RunCallback
from trainwire.checkpoint import Checkpoint
from trainwire_core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from trainwire.result import Result
    from trainwire_core.v1 import coordinator_pb2

logger = logging.getLogger(__name__)


class CheckpointUploadMode(enum.Enum):
    """How ``train.report`` persists a checkpoint.

    SYNC: copied to the run's storage before ``report`` returns.
    ASYNC: ``report`` returns at once; a thread of the worker copies the directory and then
        sends the report, so checkpoints are still committed in report order.
    NO_UPLOAD: the checkpoint already lies in the run's storage (the loop wrote it there);
        it is registered where it is.
    """

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(enum.Enum):
    """What ``train.get_all_reported_checkpoints`` waits for.

    COMMITTED: every checkpoint this worker reported is committed.
    VALIDATED: and its validation's metrics have joined it (here validation runs before the
        commit, so the two wait for the same thing).
    """

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclass
class ValidationTaskConfig:
    """Options of one validation, passed to ``train.report(..., validation=...)``.

    Args:
        fn_kwargs: Keyword arguments for the validation function (over ValidationConfig's).
        timeout_s: The longest the validation may take (None: no limit).
    """

    fn_kwargs: dict[str, Any] | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.fn_kwargs is None:
            self.fn_kwargs = {}
        if not isinstance(self.fn_kwargs, dict):
            raise InvalidArgumentError("ValidationTaskConfig.fn_kwargs must be a dict", field="validation.fn_kwargs")
        if self.timeout_s is not None and not self.timeout_s >= 0:
            raise InvalidArgumentError(
                f"ValidationTaskConfig.timeout_s must be None or >= 0, got {self.timeout_s!r}",
                field="validation.timeout_s",
            )


@dataclass
class ValidationConfig:
    """Asynchronous validation, passed to the trainer (``validation_config=``) as in Ray Train V2.

    ``fn(checkpoint, **kwargs) -> dict`` runs for each checkpoint reported with
    ``validation=True`` (or a ValidationTaskConfig) in a thread of rank 0's worker, which asks
    Ray for no resource: the loop goes on meanwhile. Its metrics join that checkpoint's
    (overwriting keys they share) before it is committed, so ``CheckpointConfig``'s score
    attribute and ``Result.best_checkpoints`` see them.

    Args:
        fn: The validation function.
        task_config: Default keyword arguments (a report's ValidationTaskConfig wins).
        ray_remote_kwargs: Accepted for Ray's signature; the validation asks for no resources.
    """

    fn: Callable[..., dict[str, Any]]
    task_config: ValidationTaskConfig = field(default_factory=ValidationTaskConfig)
    ray_remote_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidArgumentError("ValidationConfig.fn must be a function", field="validation_config.fn")
        if self.task_config is None:
            self.task_config = ValidationTaskConfig()
        if self.ray_remote_kwargs is None:
            self.ray_remote_kwargs = {}

    def kwargs_for(self, validation: bool | ValidationTaskConfig) -> dict[str, Any]:
        """The keyword arguments of one validation: the defaults, then the report's."""
        merged = dict(self.task_config.fn_kwargs or {})
        if isinstance(validation, ValidationTaskConfig):
            merged.update(validation.fn_kwargs or {})
        return merged

    def timeout_for(self, validation: bool | ValidationTaskConfig) -> float | None:
        if isinstance(validation, ValidationTaskConfig) and validation.timeout_s is not None:
            return validation.timeout_s
        return self.task_config.timeout_s


class ReportedCheckpointStatus(enum.Enum):
    """Where a reported checkpoint stands, as Ray's.

    trainwire validates a checkpoint before committing it, so a committed checkpoint is
    COMMITTED (no validation asked) or VALIDATED; the other members are never seen here.
    """

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass(frozen=True)
class ReportedCheckpoint:
    """A committed checkpoint, the metrics it was committed with (validation's included), its status."""

    checkpoint: Checkpoint
    metrics: dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED


class ValidationFn(Protocol):
    """What ``ValidationConfig(fn=...)`` takes: ``fn(checkpoint, **kwargs) -> dict`` of metrics."""

    def __call__(self, checkpoint: Checkpoint, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PreemptionInfo:
    """An imminent preemption, as Ray's ``train.get_preemption_info()`` returns it.

    Args:
        deadline_ms: The earliest reclaim deadline (UNIX ms), or None.
        preempted_node_to_ranks: Preempted node id -> the world ranks on it.
    """

    deadline_ms: int | None
    preempted_node_to_ranks: dict[str, list[int]]

    @property
    def preempted_node_ids(self) -> list[str]:
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> list[int]:
        return sorted({r for ranks in self.preempted_node_to_ranks.values() for r in ranks})


@dataclass
class LoggingConfig:
    """Ray Train's logging settings: the level of its ``ray.train`` logs, as Ray's.

    Args:
        log_level: A ``logging`` level name (any case); stored upper-case.
    """

    log_level: str = "INFO"

    def __post_init__(self) -> None:
        valid = set(logging.getLevelNamesMapping())
        if not isinstance(self.log_level, str) or self.log_level.upper() not in valid:
            raise InvalidArgumentError(
                f"LoggingConfig.log_level must be one of {', '.join(sorted(valid))}, got {self.log_level!r}",
                field="logging_config.log_level",
            )
        self.log_level = self.log_level.upper()


class BackendConfig:
    """The parent of a framework's backend settings (``TorchConfig``, ...), as ``ray.train.BackendConfig``.

    trainwire's workers run the backends registered in its framework table, so a subclass
    passed as ``backend_config=`` hands its fields (``to_dict()``, else its dataclass fields)
    to the trainer's registered backend; a custom ``backend_cls`` cannot run on the cluster.
    """

    @property
    def backend_cls(self) -> type:
        raise NotImplementedError(
            "trainwire runs the backends of its framework table on the workers; "
            "a BackendConfig's own backend_cls is not shipped to them"
        )

    @property
    def train_func_context(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        return contextlib.nullcontext

    @property
    def framework(self) -> str | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (a dataclass's fields, else empty, as Ray's base)."""
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}


@dataclass(frozen=True)
class TrainRunContext:
    """What a UserCallback is told of the run (Ray's ``TrainRunContext``, the parts a service knows)."""

    run_id: str
    run_name: str
    run_config: Any = None

    def get_run_config(self) -> Any:
        return self.run_config


class UserCallback(RunCallback):
    """Ray Train V2's user callback, fed by the run's event stream in the SDK.

    Override ``after_report`` and ``after_exception``. ``after_report`` is called once per
    report, in order, after the report is complete: with the committed checkpoint when the
    report carried one, else with None. ``metrics`` holds rank 0's metrics (the ones the run
    records; Ray lists every rank's). ``after_exception`` gets ``{world rank: exception}``.
    """

    def after_report(
        self, run_context: TrainRunContext, metrics: list[dict[str, Any]], checkpoint: Checkpoint | None
    ) -> None:
        """Every worker reported; ``checkpoint`` is the committed one or None."""

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: dict[int, Exception]) -> None:
        """A worker raised; the run may restart, as its FailureConfig says."""

    # --- the RunCallback side: pairs each report's metrics with its commit --------------------
    def _context(self, run: coordinator_pb2.RunInfo) -> TrainRunContext:
        return TrainRunContext(run_id=run.run_id, run_name=run.name)

    def _held(self) -> list[tuple[int, dict[str, Any]]]:
        if not hasattr(self, "_pending_reports"):
            self._pending_reports: list[tuple[int, dict[str, Any]]] = []
            self._single_worker = False
        return self._pending_reports

    def _release(self, run: coordinator_pb2.RunInfo, upto: int) -> None:
        """Reports at or below ``upto`` without a checkpoint: no commit can come for them any more."""
        held = self._held()
        while held and held[0][0] <= upto:
            _, metrics = held.pop(0)
            self.after_report(self._context(run), [metrics], None)

    def _on_report(self, run: coordinator_pb2.RunInfo, index: int, metrics: dict[str, Any]) -> None:
        held = self._held()
        if self._single_worker:
            # One rank's reports are committed before its next one is handled.
            self._release(run, index - 1)
        held.append((index, metrics))

    def on_run_start(self, run: coordinator_pb2.RunInfo, config: dict[str, Any]) -> None:
        self._held().clear()
        self._single_worker = config.get("num_workers") == 1

    def on_checkpoint(self, run: coordinator_pb2.RunInfo, checkpoint: coordinator_pb2.CheckpointInfo) -> None:
        from trainwire_core.structs import struct_to_dict

        # Commits come in report order: earlier reports still held carried no checkpoint.
        self._release(run, checkpoint.index - 1)
        held = self._held()
        metrics = struct_to_dict(checkpoint.metrics)
        if held and held[0][0] == checkpoint.index:
            held.pop(0)
        self.after_report(self._context(run), [metrics], Checkpoint._of_run(checkpoint.uri))

    def on_worker_error(self, run: coordinator_pb2.RunInfo, error: coordinator_pb2.WorkerError) -> None:
        self.after_exception(self._context(run), {error.world_rank: WorkerException(error)})

    def on_state(self, run: coordinator_pb2.RunInfo, state: str, reason: str) -> None:
        if state in ("RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED"):
            self._release(run, 1 << 62)

    def on_run_end(self, run: coordinator_pb2.RunInfo, result: Result) -> None:
        self._release(run, 1 << 62)


class WorkerException(Exception):
    """An exception raised on a worker, as the SDK learns of it (type name, message, traceback)."""

    def __init__(self, error: coordinator_pb2.WorkerError) -> None:
        super().__init__(f"{error.exc_type}: {error.message}")
        self.world_rank = error.world_rank
        self.exc_type = error.exc_type
        self.message = error.message
        self.traceback = error.traceback


# Ray's module paths under ``ray.train.v2``, loaded when first named.
_SUBMODULES = frozenset({"api", "jax"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
