"""The controller's typed hooks, and the callbacks the coordinator hangs on them.

As Ray Train V2's ``ControllerCallback`` (``v2/_internal/execution/callback.py``): the
controller drives a run's lifecycle and tells its callbacks what happened; recording the run
(``RunPersistence``), streaming its events (``RunEvents``) and counting it in Prometheus
(``ControllerMetricsCallback``) are callbacks, not calls inside the controller. The coordinator's
MLflow tracker and the registry mirror watch the event log (``EventLog.observers``), which also
carries the events no controller makes (a run's first PENDING, an uploaded checkpoint).

Hooks are coroutines, called in the order the callbacks were given (events before the record:
a watcher that sees a run's end has its event too). A callback that raises is logged and the
others still run; the run goes on, as Ray's best-effort hooks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor

from google.protobuf import struct_pb2, timestamp_pb2

from trainwire_coordinator.execution.run_state import TERMINAL, ControllerState
from trainwire_coordinator.metadata import MetadataStore, RunRecord
from trainwire_coordinator.metrics import CoordinatorMetrics
from trainwire_core.v1 import common_pb2, coordinator_pb2

logger = logging.getLogger(__name__)


class ControllerCallback:
    """Hooks on a run's controller; each does nothing unless overridden.

    ``run`` is the run's live view, already updated when a hook is called.
    """

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        """The run moved from ``previous`` to ``current`` (``run.state`` and its reason are set)."""

    async def on_worker_error(self, run: coordinator_pb2.Run, error: common_pb2.WorkerError, counted: bool) -> None:
        """An attempt ended with ``error``; ``counted``: it counts against ``FailureConfig.max_failures``."""

    async def on_restart(self, run: coordinator_pb2.Run, cause: str) -> None:
        """A new worker group is to start (``run.attempt`` is its number): after a failure, a resize or a
        coordinator restart (``cause``)."""

    async def on_report(self, run: coordinator_pb2.Run, report_index: int, metrics: struct_pb2.Struct) -> None:
        """Rank 0 reported ``metrics`` (the run's) for ``report_index``."""

    async def on_checkpoint_committed(
        self, run: coordinator_pb2.Run, info: common_pb2.CheckpointInfo, seconds: float
    ) -> None:
        """A checkpoint was committed (manifest, index, retention) in ``seconds``."""

    async def after_report(self, run: coordinator_pb2.Run) -> None:
        """A worker's report was handled: the run's report index, metrics or checkpoints changed."""


class ControllerCallbacks(ControllerCallback):
    """Calls every hook on each callback in order; one that raises is logged and skipped."""

    def __init__(self, callbacks: Sequence[ControllerCallback] = ()) -> None:
        self.callbacks = list(callbacks)

    async def _each(self, hook: str, call: Callable[[ControllerCallback], Awaitable[None]], run_id: str) -> None:
        for callback in self.callbacks:
            try:
                await call(callback)
            except Exception:  # noqa: BLE001 - a callback never ends the run it watches
                logger.exception("run %s: callback %s failed in %s", run_id, type(callback).__name__, hook)

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        await self._each(
            "after_controller_state_update",
            lambda c: c.after_controller_state_update(run, previous, current),
            run.run_id,
        )

    async def on_worker_error(self, run: coordinator_pb2.Run, error: common_pb2.WorkerError, counted: bool) -> None:
        await self._each("on_worker_error", lambda c: c.on_worker_error(run, error, counted), run.run_id)

    async def on_restart(self, run: coordinator_pb2.Run, cause: str) -> None:
        await self._each("on_restart", lambda c: c.on_restart(run, cause), run.run_id)

    async def on_report(self, run: coordinator_pb2.Run, report_index: int, metrics: struct_pb2.Struct) -> None:
        await self._each("on_report", lambda c: c.on_report(run, report_index, metrics), run.run_id)

    async def on_checkpoint_committed(
        self, run: coordinator_pb2.Run, info: common_pb2.CheckpointInfo, seconds: float
    ) -> None:
        await self._each("on_checkpoint_committed", lambda c: c.on_checkpoint_committed(run, info, seconds), run.run_id)

    async def after_report(self, run: coordinator_pb2.Run) -> None:
        await self._each("after_report", lambda c: c.after_report(run), run.run_id)


class RunEvents(ControllerCallback):
    """Appends the run's events to its event log (what ``WatchRun`` streams).

    Args:
        emit: Appends one event; returns its id (``EventLog.append``).
    """

    def __init__(self, emit: Callable[[coordinator_pb2.RunEvent], Awaitable[int]]) -> None:
        self.emit = emit

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        change = coordinator_pb2.StateChange(state=current.run_state, reason=current.reason, cause=current.cause)
        await self.emit(coordinator_pb2.RunEvent(run_id=run.run_id, state_change=change))

    async def on_worker_error(self, run: coordinator_pb2.Run, error: common_pb2.WorkerError, counted: bool) -> None:
        await self.emit(coordinator_pb2.RunEvent(run_id=run.run_id, worker_error=error))

    async def on_report(self, run: coordinator_pb2.Run, report_index: int, metrics: struct_pb2.Struct) -> None:
        event = coordinator_pb2.MetricsEvent(report_index=report_index, metrics=metrics)
        await self.emit(coordinator_pb2.RunEvent(run_id=run.run_id, metrics=event))

    async def on_checkpoint_committed(
        self, run: coordinator_pb2.Run, info: common_pb2.CheckpointInfo, seconds: float
    ) -> None:
        await self.emit(coordinator_pb2.RunEvent(run_id=run.run_id, checkpoint=info))


def now() -> timestamp_pb2.Timestamp:
    """The time now, as a run's timestamps hold it."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def run_record(run: coordinator_pb2.Run, idempotency_key: str = "") -> RunRecord:
    """The metadata store's record of ``run`` (a snapshot of it, and the columns it is listed by)."""
    return RunRecord(
        run_id=run.run_id,
        name=run.name,
        state=run.state,
        created_at=run.created_at.ToNanoseconds() / 1e9,
        updated_at=run.updated_at.ToNanoseconds() / 1e9,
        data=run.SerializeToString(),
        idempotency_key=idempotency_key,
    )


class RunPersistence(ControllerCallback):
    """Saves the run's record after each state change and each report (a new coordinator carries it on from there).

    Args:
        metadata: Where runs are recorded.
        writes: The one thread metadata writes run on, so they land in the order they were made
            (``EventLog.writes``: a state's event is written before its record).
    """

    def __init__(self, metadata: MetadataStore, writes: Executor) -> None:
        self.metadata = metadata
        self.writes = writes

    async def save_run(self, run: coordinator_pb2.Run) -> None:
        """Saves a snapshot of the run, stamped ``updated_at`` now, off the event loop."""
        run.updated_at.CopyFrom(now())
        await asyncio.get_running_loop().run_in_executor(self.writes, self.metadata.update_run, run_record(run))

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        await self.save_run(run)

    async def after_report(self, run: coordinator_pb2.Run) -> None:
        await self.save_run(run)


class ControllerMetricsCallback(ControllerCallback):
    """Counts runs' ends, worker failures, restarts and commit times (``trainwire_coordinator.metrics``)."""

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self.metrics = metrics

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        if current.run_state in TERMINAL:
            self.metrics.runs_finished.labels(common_pb2.RunState.Name(current.run_state)).inc()

    async def on_worker_error(self, run: coordinator_pb2.Run, error: common_pb2.WorkerError, counted: bool) -> None:
        self.metrics.worker_failures.labels(str(counted).lower()).inc()

    async def on_restart(self, run: coordinator_pb2.Run, cause: str) -> None:
        self.metrics.restarts.labels(cause).inc()

    async def on_checkpoint_committed(
        self, run: coordinator_pb2.Run, info: common_pb2.CheckpointInfo, seconds: float
    ) -> None:
        self.metrics.commit_seconds.observe(seconds)
