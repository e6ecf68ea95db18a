"""The run controller's states as objects that carry their own data, as in Ray Train V2.

Each state knows the public ``RunState`` it shows (``run_state``) and the reason it gives, so
the controller records a state object instead of a state number and a hand-written string.
The states that end an attempt are what ``run_state.after_attempt`` returns: whether another
attempt follows (``restarts``), why (``cause``), at which size (``resize_to``), and whether
the failure counts against ``FailureConfig.max_failures`` (``counts_as_failure``).

This module imports only the generated protos, so the lifecycle can be tested without Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainwire_core.v1 import common_pb2


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
