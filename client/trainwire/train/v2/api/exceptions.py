"""Ray Train V2's errors of a failed ``fit()`` (``ray.train.v2.api.exceptions``).

``TrainingFailedError`` is trainwire's one error of a failed run (``trainwire_core.errors``);
these are its kinds, as Ray names them, with Ray's constructor arguments and attributes. Each
keeps ``result`` (the failed run's ``Result``, None until ``fit()`` attaches it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainwire_core.errors import TrainingFailedError

if TYPE_CHECKING:
    from trainwire.train.v2 import PreemptionInfo

__all__ = ["ControllerError", "NCCLHangError", "PreemptionError", "TrainingFailedError", "WorkerGroupError"]


class WorkerGroupError(TrainingFailedError):
    """Training failed because workers raised.

    Args:
        error_message: What failed, readable.
        worker_failures: World rank -> the exception that rank raised.
    """

    def __init__(self, error_message: str, worker_failures: dict[int, Exception]) -> None:
        super().__init__("Training failed due to worker errors:\n" + error_message, None)
        self._error_message = error_message
        self.worker_failures = worker_failures

    def __reduce__(self) -> tuple[type, tuple[str, dict[int, Exception]]]:
        return (type(self), (self._error_message, self.worker_failures))


class NCCLHangError(WorkerGroupError):
    """Ray's NCCL hang detector's error; trainwire has no NCCL hang detector and never raises it."""


class ControllerError(TrainingFailedError):
    """Training failed outside the workers: the run's controller (here: the coordinator) failed.

    Args:
        controller_failure: The controller's exception.
    """

    def __init__(self, controller_failure: Exception) -> None:
        super().__init__("Training failed due to controller error:\n" + str(controller_failure), None)
        self.controller_failure = controller_failure
        self.with_traceback(controller_failure.__traceback__)

    def __reduce__(self) -> tuple[type, tuple[Exception]]:
        return (type(self), (self.controller_failure,))


class PreemptionError(TrainingFailedError):
    """Training was interrupted by node preemption (never raised here: trainwire gets no preemption notice).

    Args:
        preemption_info: Which nodes and ranks were preempted.
        drain_timed_out: Whether the workers were torn down at the reclaim deadline.
    """

    def __init__(self, preemption_info: PreemptionInfo, drain_timed_out: bool = False) -> None:
        self.preemption_info = preemption_info
        self.drain_timed_out = drain_timed_out
        super().__init__(
            "Training was interrupted by node preemption "
            f"(preempted_ranks={preemption_info.preempted_ranks}, drain_timed_out={drain_timed_out}).",
            None,
        )

    def __reduce__(self) -> tuple[type, tuple[PreemptionInfo, bool]]:
        return (type(self), (self.preemption_info, self.drain_timed_out))


def failed_run_error(message: str, result: object) -> TrainingFailedError:
    """The error ``fit()`` raises for a failed run, as Ray's kinds: a worker's failure, else the controller's.

    Args:
        message: What ended the run.
        result: The run's ``Result``; its ``error`` (a worker's failure) picks the kind.
    """
    from trainwire.train.v2 import WorkerException

    failure = getattr(result, "error", None)
    error: TrainingFailedError
    if failure is not None:
        # WorkerException reads the rank, type, message and traceback a WorkerFailure holds.
        error = WorkerGroupError(message, {failure.world_rank: WorkerException(failure)})
    else:
        error = ControllerError(RuntimeError(message))
    error.result = result
    return error
