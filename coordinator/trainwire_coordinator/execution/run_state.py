"""The run lifecycle as plain data: states, the transitions allowed, and what follows an attempt.

    PENDING -> STARTING -> RUNNING -> (RESTARTING -> STARTING -> RUNNING)* -> SUCCEEDED | FAILED | CANCELLED

RESTARTING covers every new worker group of a run: after a worker failure (counted against
``FailureConfig.max_failures``), after an elastic resize, and when a new coordinator takes a run
over (neither counted). The controller applies the decisions; this module decides, with the
injected failure and scaling policies, and is tested without Ray. What it decides are the
controller's states of ``controller_states``, which carry their own data (a ``Failed`` its
worker error, a ``Restarting`` its cause, a ``Resizing`` its target size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trainwire_coordinator.execution.controller_states import (
    Cancelled,
    ControllerState,
    Failed,
    Resizing,
    Restarting,
    Succeeded,
    Suspended,
)
from trainwire_core.v1 import common_pb2

if TYPE_CHECKING:
    from trainwire.config import FailureConfig

PENDING, STARTING, RUNNING, RESTARTING = (
    common_pb2.PENDING,
    common_pb2.STARTING,
    common_pb2.RUNNING,
    common_pb2.RESTARTING,
)
SUCCEEDED, FAILED, CANCELLED = common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
ACTIVE = frozenset({PENDING, STARTING, RUNNING, RESTARTING})

# A state may also follow itself with a new reason (a wait that says what it waits for).
TRANSITIONS: dict[int, frozenset[int]] = {
    PENDING: frozenset({PENDING, STARTING, RESTARTING, FAILED, CANCELLED}),
    STARTING: frozenset({STARTING, RUNNING, RESTARTING, FAILED, CANCELLED}),
    RUNNING: frozenset({RUNNING, RESTARTING, SUCCEEDED, FAILED, CANCELLED}),
    RESTARTING: frozenset({RESTARTING, STARTING, FAILED, CANCELLED}),
}


class IllegalTransitionError(RuntimeError):
    """A controller bug: it tried a transition the lifecycle does not have."""


def check_transition(current: int, new: int) -> None:
    """Raises IllegalTransitionError unless ``new`` may follow ``current``."""
    if new not in TRANSITIONS.get(current, frozenset()):
        name = common_pb2.RunState.Name
        raise IllegalTransitionError(f"a run cannot go from {name(current)} to {name(new)}")


@dataclass(frozen=True)
class AttemptOutcome:
    """How one worker group's attempt ended."""

    error: common_pb2.WorkerError | None = None
    cancelled: bool = False
    # Why, when not by a CancelRun call.
    cancel_reason: str = ""
    # The coordinator is stopping; its successor carries the run on.
    suspended: bool = False
    stop_reached: bool = False
    # Set when the scaling policy asked for a group of another size.
    resize_to: int = 0
    world_size: int = 0
    # A worker's process or node died (not an exception in the training code).
    worker_lost: bool = False
    elastic: bool = False
    # A checkpoint was committed since the last lost worker (or ever, for the first).
    progressed: bool = False


class FailurePolicyLike(Protocol):
    """What ``after_attempt`` needs of a failure policy."""

    def should_restart(self, num_failures: int, error: common_pb2.WorkerError) -> bool: ...


class FailurePolicy:
    """Ray Train's rule, injected into the controller: restart up to ``max_failures`` times (-1: always)."""

    def __init__(self, config: FailureConfig) -> None:
        self.config = config

    def should_restart(self, num_failures: int, error: common_pb2.WorkerError) -> bool:
        """Whether a group that failed ``num_failures`` times so far starts again."""
        if self.config.fail_fast:
            return False
        return self.config.max_failures < 0 or num_failures <= self.config.max_failures


def after_attempt(outcome: AttemptOutcome, num_failures: int, failure_policy: FailurePolicyLike) -> ControllerState:
    """The one transition function for the end of an attempt.

    Args:
        outcome: How the attempt ended.
        num_failures: Failures counted before this attempt.
        failure_policy: Decides whether a failed group restarts.

    Returns:
        The state that follows: ``Suspended``, ``Cancelled``, ``Failed`` (carrying the worker's
        error), ``Succeeded``, or one that ``restarts`` (``Restarting`` with its cause, ``Resizing``).
    """
    if outcome.suspended:
        return Suspended()
    if outcome.cancelled:
        return Cancelled(outcome.cancel_reason or "cancelled by request")
    if outcome.error is not None:
        error = outcome.error
        summary = f"rank {error.world_rank} raised {error.exc_type}: {error.message}"
        if outcome.worker_lost and outcome.elastic and outcome.progressed:
            # An elastic group carries on with what is left; a loss with no checkpoint since
            # the last one counts as a failure, so a worker that always dies cannot loop forever.
            reason = f"a worker was lost ({summary}); continuing with the workers that fit"
            return Restarting(reason, "lost_worker", outcome.resize_to)
        failures = num_failures + 1
        if failure_policy.should_restart(failures, error):
            return Restarting(f"restart {failures} after failure: {summary}", "failure", outcome.resize_to)
        return Failed(summary, error)
    if outcome.stop_reached:
        return Succeeded("stop criteria reached")
    if outcome.resize_to:
        return Resizing(outcome.world_size, outcome.resize_to)
    return Succeeded()


class ScalingPolicy:
    """How many workers an attempt gets: fixed, or elastic between ``min_workers`` and ``max_workers``.

    As in Ray Train V2, an elastic run starts with as many workers as the cluster can place
    now (at least ``min_workers``) and grows at a checkpoint when more would fit.

    Args:
        min_workers: The fewest workers a run may train with.
        max_workers: The most it asks for.
        worker_resources: What one worker reserves, e.g. {"CPU": 1}.
    """

    def __init__(self, min_workers: int, max_workers: int, worker_resources: dict[str, float]) -> None:
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.worker_resources = worker_resources

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.max_workers

    def _fits(self, available: dict[str, float]) -> int:
        """How many more workers the available resources hold."""
        counts = [int(available.get(k, 0.0) // v) for k, v in self.worker_resources.items() if v > 0]
        return min(counts) if counts else self.max_workers

    def workers_to_start(self, available: dict[str, float]) -> int:
        """The group size for a new attempt; ``min_workers`` when even that must wait."""
        return max(self.min_workers, min(self.max_workers, self._fits(available)))

    def resize_to(self, current: int, available: dict[str, float]) -> int:
        """A larger size when more workers would fit beside the current group; else 0."""
        if not self.elastic or current >= self.max_workers:
            return 0
        target = min(self.max_workers, current + self._fits(available))
        return target if target > current else 0


# After a lost worker, an elastic group does not grow for this long: long enough for Ray to declare
# a lost node dead (until then its resources still look available).
RESIZE_AFTER_LOSS_S = 60.0


@dataclass
class Signals:
    """What redirects a run from outside its attempt's own flow (instead of loose flags).

    ``cancel`` and ``suspend`` hold for the rest of the run; the others for one attempt.
    """

    cancel: bool = False
    cancel_reason: str = ""
    # The coordinator is stopping: end the attempt, leave the run for its successor.
    suspend: bool = False
    stop_reached: bool = False
    worker_lost: bool = False
    # The size the scaling policy asked for at a checkpoint (0: none).
    resize_to: int = 0

    @property
    def stop_requested(self) -> bool:
        return self.cancel or self.suspend

    def next_attempt(self) -> None:
        self.worker_lost = False
        self.resize_to = 0


@dataclass
class LossMemory:
    """What an elastic run remembers of its last lost worker, across attempts."""

    lost_at: float | None = None
    # Committed checkpoints when a worker was last lost (an elastic run carries on once per checkpoint).
    checkpoints_at_loss: int = -1
    # The size the policy chose at a checkpoint, for the next group (Ray has not yet seen the old
    # group's CPUs come back when the new one starts).
    grow_to: int = 0

    def lost_recently(self, now: float) -> bool:
        return self.lost_at is not None and now - self.lost_at < RESIZE_AFTER_LOSS_S

    def progressed(self, committed: int) -> bool:
        """A checkpoint was committed since the last loss (or none was ever lost)."""
        return self.checkpoints_at_loss < 0 or committed > self.checkpoints_at_loss

    def note_loss(self, committed: int, now: float) -> None:
        self.checkpoints_at_loss = committed
        self.lost_at = now


def group_size(
    scaling: ScalingPolicy, available: dict[str, float], memory: LossMemory, world_size: int, now: float
) -> int:
    """How many workers a new attempt of a run starts with.

    Args:
        scaling: The run's scaling policy.
        available: What the cluster reports available now.
        memory: The run's last loss and the size chosen at its last checkpoint (consumed here).
        world_size: The size of the group just ended (0 before the first).
        now: The clock's time.
    """
    if not scaling.elastic:
        return scaling.min_workers
    if memory.grow_to:
        target, memory.grow_to = memory.grow_to, 0
        return target
    num_workers = scaling.workers_to_start(available)
    if memory.lost_recently(now) and world_size:
        # Ray counts a lost node's CPUs as available until it declares the node dead: carry on
        # with the workers that are left, and grow at a checkpoint once it is safe to.
        num_workers = max(scaling.min_workers, min(num_workers, world_size - 1))
    return num_workers


def resize_target(
    scaling: ScalingPolicy, world_size: int, available: dict[str, float], memory: LossMemory, now: float
) -> int:
    """At a checkpoint: the larger size an elastic group should restart at (0: carry on as is)."""
    if not scaling.elastic or memory.lost_recently(now):
        return 0
    return scaling.resize_to(world_size, available)


def stop_reached(stop: Mapping[str, float], metrics: Mapping[str, Any]) -> bool:
    """Whether flat ``metrics`` meet a ``RunConfig.stop`` criterion (a value at or past its threshold)."""
    for key, threshold in stop.items():
        value = metrics.get(key)
        if isinstance(value, int | float) and value >= threshold:
            return True
    return False


def is_stale(report_attempt: int, attempt: int, state: int) -> bool:
    """A report from a group already torn down (an older attempt), or for a run that has ended."""
    return report_attempt != attempt or state in TERMINAL
