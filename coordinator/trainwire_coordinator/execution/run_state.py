"""The run lifecycle as plain data: the controller's states, the transitions allowed, and what follows an attempt.

    PENDING -> STARTING -> RUNNING -> (RESTARTING -> STARTING -> RUNNING)* -> SUCCEEDED | FAILED | CANCELLED

The controller's states are objects that carry their own data, as in Ray Train V2: each knows
the public ``RunState`` it shows (``run_state``) and the reason it gives (a ``Failed`` its
worker error, a ``Restarting`` its cause, a ``Resizing`` its target size), so the controller
records a state object instead of a state number and a hand-written string.

RESTARTING covers every new worker group of a run: after a worker failure (counted against
``FailureConfig.max_failures``), after an elastic resize, and when a new coordinator takes a run
over (neither counted). The controller applies the decisions; this module decides, with the
injected failure and scaling policies (``after_attempt`` returns the state that ends an
attempt: whether another attempt follows, why, at which size, and whether it counts as a
failure). It imports only the generated protos, so the lifecycle is tested without Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

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


class ControllerState:
    """The base of the controller's states."""

    # The public state a run shows while its controller is in this one.
    run_state: ClassVar[int]
    # Another attempt (a new worker group) follows this state.
    restarts: ClassVar[bool] = False

    @property
    def reason(self) -> str:
        """What the run's ``state_reason`` says in this state."""
        return ""

    @property
    def counts_as_failure(self) -> bool:
        """Whether reaching this state adds one to the run's ``num_failures``."""
        return False

    @property
    def cause(self) -> str:
        """Why another attempt follows (the label of the restarts metric); "" when none does."""
        return ""

    @property
    def resize_to(self) -> int:
        """The size the scaling policy chose for the next group (0: the policy decides then)."""
        return 0

    @property
    def is_terminal(self) -> bool:
        return self.run_state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED)


def _waiting(attempt: int) -> int:
    # The first group of a run is pending; every later one is a restart.
    return common_pb2.PENDING if attempt == 0 else common_pb2.RESTARTING


@dataclass(frozen=True)
class Initializing(ControllerState):
    """A run accepted, no group started yet."""

    run_state: ClassVar[int] = common_pb2.PENDING


@dataclass(frozen=True)
class FittingPreprocessor(ControllerState):
    """The run's preprocessor is being fitted before its group is placed, and it takes a while."""

    attempt: int
    dataset: str
    available: dict[str, float]

    @property
    def run_state(self) -> int:  # type: ignore[override]
        return _waiting(self.attempt)

    @property
    def reason(self) -> str:
        return (
            f"fitting the preprocessor on dataset {self.dataset!r} before reserving the workers: its Ray Data "
            f"tasks need 1 CPU each (cluster has {self.available} available)"
        )


@dataclass(frozen=True)
class Reserving(ControllerState):
    """The group's placement waits for resources the cluster does not have yet."""

    attempt: int
    num_workers: int
    bundle: dict[str, float]
    available: dict[str, float]
    # Bundles for actors the training function starts itself (RLlib's env runners).
    side: tuple[dict[str, float], ...] = ()

    @property
    def run_state(self) -> int:  # type: ignore[override]
        return _waiting(self.attempt)

    @property
    def reason(self) -> str:
        side = f" and {len(self.side)} actors of the training function ({', '.join(map(str, self.side))})"
        return (
            f"waiting for resources: {self.num_workers} workers x {self.bundle}{side if self.side else ''} "
            f"(cluster has {self.available} available)"
        )


@dataclass(frozen=True)
class Starting(ControllerState):
    """A group's actors start (or a warm group is taken from the pool) and the backend sets up."""

    run_state: ClassVar[int] = common_pb2.STARTING
    world_size: int
    max_workers: int = 0
    elastic: bool = False
    warm: bool = False

    @property
    def reason(self) -> str:
        if self.warm:
            return "reusing warm workers"
        return f"{self.world_size} of up to {self.max_workers} workers" if self.elastic else ""


@dataclass(frozen=True)
class PreparingShards(ControllerState):
    """The group is up and Ray Data reads (and splits) its datasets, and it takes a while."""

    run_state: ClassVar[int] = common_pb2.STARTING
    world_size: int
    datasets: tuple[str, ...]
    available: dict[str, float]

    @property
    def reason(self) -> str:
        names = ", ".join(repr(n) for n in self.datasets)
        free = ", ".join(
            f"{self.available.get(k, 0.0):g} {k}" for k in ("CPU", "GPU") if k in self.available or k == "CPU"
        )
        return (
            f"reading datasets {names} for {self.world_size} workers with Ray Data, beside the workers' "
            f"reservation (its tasks ask for no CPU; free on the cluster: {free})"
        )


@dataclass(frozen=True)
class Running(ControllerState):
    """The group trains (or its workers still prepare their runtime environment)."""

    run_state: ClassVar[int] = common_pb2.RUNNING
    world_size: int
    preparing: str = ""

    @property
    def reason(self) -> str:
        return self.preparing


@dataclass(frozen=True)
class Stalled(ControllerState):
    """Ranks run on after others finished (blocked on a shard read or in a collective)."""

    run_state: ClassVar[int] = common_pb2.RUNNING
    running: tuple[int, ...]
    finished: tuple[int, ...]
    waited_s: float

    @property
    def reason(self) -> str:
        return (
            f"ranks {', '.join(map(str, self.running))} still running {self.waited_s:.0f} s after ranks "
            f"{', '.join(map(str, self.finished))} finished: a rank blocked on a shard read or in a collective "
            "waits for peers that have stopped (see DataConfig(datasets_to_split=...))"
        )


@dataclass(frozen=True)
class Restarting(ControllerState):
    """A new group follows: after a failure, a lost worker, or when a new coordinator takes over.

    Args:
        why: The state reason.
        restart_cause: ``failure`` (counted), ``lost_worker`` or ``coordinator_restart``.
        target: The size chosen for the next group (0: the scaling policy decides then).
    """

    run_state: ClassVar[int] = common_pb2.RESTARTING
    restarts: ClassVar[bool] = True
    why: str
    restart_cause: str
    target: int = 0

    @property
    def reason(self) -> str:
        return self.why

    @property
    def cause(self) -> str:
        return self.restart_cause

    @property
    def resize_to(self) -> int:
        return self.target

    @property
    def counts_as_failure(self) -> bool:
        return self.restart_cause == "failure"


@dataclass(frozen=True)
class Resizing(ControllerState):
    """An elastic group restarts at another size, chosen at a checkpoint."""

    run_state: ClassVar[int] = common_pb2.RESTARTING
    restarts: ClassVar[bool] = True
    world_size: int
    target: int

    @property
    def reason(self) -> str:
        return f"resizing from {self.world_size} to {self.target} workers at a checkpoint"

    @property
    def cause(self) -> str:
        return "resize"

    @property
    def resize_to(self) -> int:
        return self.target


@dataclass(frozen=True)
class Suspended(ControllerState):
    """The coordinator stops: this controller ends, the run stays active for the next coordinator."""

    run_state: ClassVar[int] = common_pb2.RESTARTING

    @property
    def reason(self) -> str:
        return "the coordinator is stopping; the next coordinator carries the run on"


@dataclass(frozen=True)
class Succeeded(ControllerState):
    """Every rank finished, or a stop criterion was reached."""

    run_state: ClassVar[int] = common_pb2.SUCCEEDED
    why: str = ""

    @property
    def reason(self) -> str:
        return self.why


@dataclass(frozen=True)
class Failed(ControllerState):
    """The run ended with an error; ``error`` is the worker's, when a worker failed (counted)."""

    run_state: ClassVar[int] = common_pb2.FAILED
    why: str
    error: common_pb2.WorkerError | None = None

    @property
    def reason(self) -> str:
        return self.why

    @property
    def counts_as_failure(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class Cancelled(ControllerState):
    """The run was cancelled."""

    run_state: ClassVar[int] = common_pb2.CANCELLED
    why: str = "cancelled by request"

    @property
    def reason(self) -> str:
        return self.why


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
