"""The run controller: drives one run's worker groups through the lifecycle of ``run_state``.

As Ray Train V2's controller, it is a loop of attempts through explicit states
(``run_state``: ``Reserving``, ``Starting``, ``Running``, ``Restarting``, ``Resizing``,
``Succeeded``...) that carry their own data, and whose decisions are pure functions of
``run_state`` (``after_attempt``, ``group_size``, ``resize_target``, ``stop_reached``,
``is_stale``) under the injected failure and scaling policies. What redirects a run from
outside an attempt is one ``Signals`` object, what an elastic run remembers of a lost
worker one ``LossMemory``. The work is done by collaborators behind small interfaces:
``Placement`` (reservations and worker groups), ``Pool`` (warm groups), ``RunData``
(preprocessor fitting and sharding), ``Checkpoints`` (commits) and a clock; the defaults
are Ray's, and tests drive the controller with fakes and no Ray. Every state change goes
through ``_transition``.

What admission decided (configs, datasets, store, placement plan) comes in one
``AdmittedRun``; the operator's timeouts and budgets in one ``ControllerSettings``. Recording
the run, its events and its metrics are ``callbacks`` on typed hooks, as Ray Train V2's
``ControllerCallback``: the controller says what happened, and a callback that fails is
logged without ending the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainwire.train.session import TrainContext
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_coordinator.execution.callbacks import ControllerCallback, ControllerCallbacks
from trainwire_coordinator.execution.datasets import RunDatasets, report_if_slow
from trainwire_coordinator.execution.placement import WorkerPool
from trainwire_coordinator.execution.run_state import (
    TERMINAL,
    AttemptOutcome,
    ControllerState,
    Failed,
    FailurePolicy,
    FittingPreprocessor,
    Initializing,
    LossMemory,
    PreparingShards,
    Reserving,
    Restarting,
    Running,
    Signals,
    Stalled,
    Starting,
    after_attempt,
    check_transition,
    group_size,
    is_stale,
    resize_target,
    stop_reached,
)
from trainwire_core.structs import flatten_metrics, struct_to_dict
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2, coordinator_pb2, worker_reports_pb2
from trainwire_core.worker_runtime import WorkerRun

logger = logging.getLogger(__name__)

# How long an elastic group waits, after a rank fails, for Ray to report a dead actor.
LOST_WORKER_GRACE_S = 20.0


class Group(Protocol):
    """What the controller needs of a worker group (``placement.WorkerGroup``)."""

    metas: list[Any]

    def __len__(self) -> int: ...

    async def check_framework(self, framework: str) -> None: ...

    def run(self, specs: list[WorkerRun]) -> list[Any]: ...

    def shutdown(self, graceful: bool = False) -> None: ...


class Placement(Protocol):
    """Where groups come from (``placement.RayPlacement``)."""

    def available(self) -> dict[str, float]: ...

    def reserve(self, bundles: list[dict[str, float]], strategy: str) -> Any: ...

    def release(self, reservation: Any) -> None: ...

    async def start_group(
        self,
        reservation: Any,
        num_workers: int,
        resources: dict[str, float],
        env: dict[str, str],
        capture_child_tasks: bool = False,
    ) -> Group: ...


class Pool(Protocol):
    """Warm groups kept between runs of the same shape (``placement.WorkerPool``)."""

    def acquire(self, key: Hashable) -> tuple[Any, Any] | None: ...

    async def release(self, key: Hashable, pg: Any, group: Any) -> None: ...

    def evict_all(self) -> bool: ...


class RunData(Protocol):
    """A run's preprocessor fit and dataset sharding (``datasets.RunDatasets``)."""

    def preprocessor_unfitted(self) -> bool: ...

    def fit_preprocessor(self) -> Any: ...

    def shards(
        self, world_size: int, reservation: Any, uses_ray_data: bool, node_ids: list[str] | None = None
    ) -> list[dict[str, Any]]: ...


class Checkpoints(Protocol):
    """Where a run's checkpoints are committed and ranked (``checkpoint_manager.CheckpointManager``)."""

    @property
    def checkpoints(self) -> Sequence[Any]: ...

    @property
    def latest(self) -> Any | None: ...

    def info(self, checkpoint: Any) -> common_pb2.CheckpointInfo: ...

    def ranked(self) -> Sequence[Any]: ...

    def commit(self, checkpoint_id: str, index: int, metrics: dict[str, Any], files: list[Any]) -> Any: ...

    def load(self) -> None: ...

    def remove_uncommitted(self) -> None: ...


def _ray_placement() -> Placement:
    from trainwire_coordinator.execution.placement import RayPlacement

    return RayPlacement()


def _no_secret(run_id: str) -> str:
    return ""


@dataclass(frozen=True)
class ReportEndpoint:
    """Where a run's workers send their reports, and how they prove who they are.

    Attributes:
        address: The address workers report to (set by ``RunManager.listen_at`` once the server listens).
        secret: The secret a run's workers present on their report streams, by run id.
        tls: How workers verify the coordinator on their report streams (None: plaintext).
    """

    address: str
    secret: Callable[[str], str] = _no_secret
    tls: ClientTLS | None = None


@dataclass(frozen=True)
class ControllerSettings:
    """The operator's timeouts and budgets for every run's controller, built once per coordinator.

    Attributes:
        pending_reason_after_s: A wait longer than this (placement, a preprocessor fit, a shard
            read) shows what the run waits for in its state reason.
        stall_reason_after_s: Ranks still running this long after another rank finished are named
            in the state reason (a rank blocked on a shard read or a collective waits for peers
            that have stopped).
        stall_fail_after_s: ... and after this long (0: never) the attempt fails with that reason.
        log_max_bytes: The most of one rank's output per attempt that the store keeps (0: all).
        materialize_below_bytes: Ray Data datasets whose files are at most this size are read once
            per attempt (0: never).
    """

    pending_reason_after_s: float = 1.0
    stall_reason_after_s: float = 60.0
    stall_fail_after_s: float = 0.0
    log_max_bytes: int = 64 << 20
    materialize_below_bytes: int = 0


@dataclass
class ControllerRuntime:
    """The collaborators every run's controller shares: the report endpoint, warm groups, placement, a clock."""

    report: ReportEndpoint
    pool: Pool = field(default_factory=lambda: WorkerPool(0))
    placement: Placement = field(default_factory=_ray_placement)
    clock: Callable[[], float] = time.monotonic


def _error_from_exception(rank: int, attempt: int, exc: BaseException) -> common_pb2.WorkerError:
    cause = getattr(exc, "cause", None) or exc
    return common_pb2.WorkerError(
        world_rank=rank,
        attempt=attempt,
        exc_type=type(cause).__name__,
        message=str(cause),
        traceback=str(exc),
    )


class RunController:
    """Runs one run to its end: placement, backend setup, training, restarts.

    Args:
        run: The run's live view; the controller updates it, its callbacks record it.
        admitted: What admission decided: the request, its backend, datasets, store and placement plan.
        runtime: The report endpoint, warm groups, placement and clock.
        policy: Decides restarts after failures.
        checkpoints: Commits the run's checkpoints.
        callbacks: Told of state changes, reports, commits, failures and restarts, in this order.
        settings: Timeouts and budgets (default: ``ControllerSettings()``).
        data: Fits the run's preprocessor and shards its datasets (default: ``RunDatasets``).
    """

    def __init__(
        self,
        run: coordinator_pb2.Run,
        admitted: AdmittedRun,
        runtime: ControllerRuntime,
        policy: FailurePolicy,
        checkpoints: Checkpoints,
        *,
        callbacks: Sequence[ControllerCallback] = (),
        settings: ControllerSettings | None = None,
        data: RunData | None = None,
    ) -> None:
        self.run = run
        self.admitted = admitted
        self.request = admitted.request
        self.backend = admitted.backend
        self.datasets = admitted.datasets
        self.plan = admitted.plan
        self.runtime = runtime
        self.settings = settings or ControllerSettings()
        self.callbacks = ControllerCallbacks(callbacks)
        self.policy = policy
        self.checkpoints = checkpoints
        if data is None and (
            admitted.datasets or admitted.request.pickled_preprocessor or admitted.request.HasField("preprocessor")
        ):
            data = RunDatasets(admitted, checkpoints, materialize_below_bytes=self.settings.materialize_below_bytes)
        # None: a run with neither datasets nor a preprocessor (most loops) has nothing to fit or shard.
        self.data: RunData | None = data
        self.task: asyncio.Task | None = None
        self.scaling = self.plan.scaling_policy()
        self.signals = Signals()
        self.losses = LossMemory()
        # The size of the current attempt's group.
        self.world_size = 0
        # The controller's own state; ``run.state`` is its public face.
        self.state: ControllerState = Initializing()
        self._interrupt = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        # Commits that complete reports owe, counted before any await: the end of an attempt waits
        # for them, since their directories are not yet in the index and would be cleared away.
        self._owed_commits = 0
        self._no_owed_commits = asyncio.Event()
        self._no_owed_commits.set()
        self._pending: dict[int, dict[int, worker_reports_pb2.TrainingReport]] = {}
        # A stop decided on a result (run_config.stop, a search's stopper): later reports are not the run's.
        self._keep_until: int | None = None

    @property
    def attempt(self) -> int:
        return self.run.attempt

    # --- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self._main(), name=f"run-{self.run.run_id}")

    def resume(self) -> None:
        """Carries on a run that a stopped coordinator left active, from its latest committed checkpoint.

        This is not a failure: ``num_failures`` and ``FailureConfig.max_failures`` are untouched. The
        attempt number moves on, so reports of the old group, if any still arrive, are ignored.
        """
        self.task = asyncio.create_task(self._resume(), name=f"run-{self.run.run_id}")

    async def _resume(self) -> None:
        try:
            await asyncio.to_thread(self.checkpoints.load)
            await asyncio.to_thread(self.checkpoints.remove_uncommitted)
            self.refresh_checkpoints()
            latest = self.checkpoints.latest
            self.run.attempt += 1
            self.run.num_coordinator_restarts += 1
            where = f"from checkpoint {latest.checkpoint_id}" if latest is not None else "from the start"
            await self.callbacks.on_restart(self.run, "coordinator_restart")
            await self._transition(Restarting(f"the coordinator restarted; resuming {where}", "coordinator_restart"))
        except Exception as exc:  # noqa: BLE001 - a run that cannot be taken up still ends
            logger.exception("run %s: cannot resume", self.run.run_id)
            await self._transition(Failed(f"the coordinator restarted and could not resume the run: {exc}"))
            return
        await self._main()

    async def suspend(self) -> None:
        """Ends the current attempt and leaves the run active for the next coordinator."""
        await self._redirect(suspend=True)

    async def cancel(self, reason: str = "") -> None:
        """Ends the run CANCELLED, with ``reason`` (default: "cancelled by request")."""
        await self._redirect(cancel=True, reason=reason)

    async def _redirect(self, *, cancel: bool = False, suspend: bool = False, reason: str = "") -> None:
        if self.run.state in TERMINAL:
            return
        if cancel and not self.signals.cancel:
            self.signals.cancel_reason = reason
        self.signals.cancel |= cancel
        self.signals.suspend |= suspend
        self._interrupt.set()
        if self.task is not None:
            await asyncio.shield(self.task)

    async def _transition(self, new: ControllerState) -> None:
        """The one place a run changes state: checked against the lifecycle, recorded, streamed."""
        state, reason = new.run_state, new.reason
        if self.run.state == state and self.run.state_reason == reason:
            self.state = new
            return
        check_transition(self.run.state, state)
        previous, self.state = self.state, new
        self.run.state = state
        self.run.state_reason = reason
        await self.callbacks.after_controller_state_update(self.run, previous, new)

    async def _main(self) -> None:
        try:
            while True:
                error = await self._run_attempt()
                committed = len(self.checkpoints.checkpoints)
                signals = self.signals
                outcome = AttemptOutcome(
                    error=error,
                    cancelled=signals.cancel,
                    cancel_reason=signals.cancel_reason,
                    suspended=signals.suspend,
                    stop_reached=signals.stop_reached,
                    resize_to=signals.resize_to,
                    world_size=self.world_size,
                    worker_lost=signals.worker_lost,
                    elastic=self.scaling.elastic,
                    progressed=self.losses.progressed(committed),
                )
                following = after_attempt(outcome, self.run.num_failures, self.policy)
                if signals.worker_lost:
                    self.losses.note_loss(committed, self.runtime.clock())
                if error is not None and following.run_state != common_pb2.CANCELLED and not signals.suspend:
                    await self.callbacks.on_worker_error(self.run, error, following.counts_as_failure)
                if following.counts_as_failure:
                    self.run.num_failures += 1
                if isinstance(following, Failed) and following.error is not None:
                    self.run.error.CopyFrom(following.error)
                await self._transition(following)
                if not following.restarts:
                    return
                self.losses.grow_to = following.resize_to  # the size the policy chose, for the next group
                self.run.attempt += 1
                await self.callbacks.on_restart(self.run, following.cause)
                signals.next_attempt()
                self._interrupt.clear()
                # After any commit still owed (a report that came just before the group ended):
                # its directory is not yet in the index, and would be taken for a failed attempt's.
                await self._no_owed_commits.wait()
                async with self._commit_lock:
                    await asyncio.to_thread(self.checkpoints.remove_uncommitted)
        except Exception as exc:  # noqa: BLE001 - a controller bug must still end the run
            logger.exception("run %s: controller failed", self.run.run_id)
            self.run.error.CopyFrom(_error_from_exception(-1, self.attempt, exc))
            await self._transition(Failed(f"internal error in the coordinator: {exc}"))

    # --- one attempt -------------------------------------------------------------
    async def _reserve(self, num_workers: int) -> Any:
        bundles = self.plan.bundles(num_workers)
        placement = self.runtime.placement
        reservation = placement.reserve(bundles + list(self.plan.side_bundles), self.plan.strategy)
        ready = asyncio.ensure_future(reservation.ready())
        done, _ = await asyncio.wait([ready], timeout=self.settings.pending_reason_after_s)
        if not done:
            await self._transition(
                Reserving(self.attempt, num_workers, bundles[-1], placement.available(), self.plan.side_bundles)
            )
            interrupt = asyncio.ensure_future(self._interrupt.wait())
            await asyncio.wait([ready, interrupt], return_when=asyncio.FIRST_COMPLETED)
            interrupt.cancel()
            ready.cancel()  # no-op when ready; else the run was cancelled while waiting
        return reservation

    def _pool_key(self, num_workers: int) -> tuple:
        bundles = tuple(tuple(sorted(b.items())) for b in self.plan.bundles(num_workers))
        env = tuple(sorted(self.backend.worker_env(self.request).items()))
        return (self.backend.name, bundles, self.plan.strategy, env)

    async def _start_group(self) -> tuple[Any, Group] | None:
        """A warm group of the same shape if the pool has one, else a new reservation and actors.

        Returns None when the run was cancelled while it waited for resources.
        """
        if not self.scaling.elastic:
            key = self._pool_key(self.scaling.max_workers)
            if self.backend.reuse_workers and (warm := self.runtime.pool.acquire(key)) is not None:
                self.world_size = self.scaling.max_workers
                await self._transition(Starting(self.world_size, warm=True))
                return warm
        # Idle pooled groups hold resources this run may need.
        self.runtime.pool.evict_all()
        available = await asyncio.to_thread(self.runtime.placement.available) if self.scaling.elastic else {}
        num_workers = group_size(self.scaling, available, self.losses, self.world_size, self.runtime.clock())
        reservation = await self._reserve(num_workers)
        if self.signals.stop_requested:
            self.runtime.placement.release(reservation)
            return None
        self.world_size = num_workers
        await self._transition(Starting(num_workers, self.scaling.max_workers, self.scaling.elastic))
        try:
            resources = self.plan.bundles(num_workers)[-1]
            env = self.backend.worker_env(self.request)
            group = await self.runtime.placement.start_group(
                reservation, num_workers, resources, env, capture_child_tasks=bool(self.plan.side_bundles)
            )
            await group.check_framework(self.backend.name)
        except BaseException:
            self.runtime.placement.release(reservation)
            raise
        return reservation, group

    async def _run_attempt(self) -> common_pb2.WorkerError | None:
        """Runs one worker group to its end; returns the first worker error, if any."""
        self._pending.clear()
        try:
            if self.data is not None and self.data.preprocessor_unfitted():
                # Before the reservation, as Ray Train's driver does: the fit's Ray Data tasks
                # need CPUs that the run's placement group (or idle warm groups) would hold.
                self.runtime.pool.evict_all()
                attempt = self.attempt
                await report_if_slow(
                    asyncio.to_thread(self.data.fit_preprocessor),
                    self.settings.pending_reason_after_s,
                    # Ray Data's fit tasks compete for the CPUs the cluster reports free.
                    lambda: self._transition(FittingPreprocessor(attempt, "train", self.runtime.placement.available())),
                    self._interrupt,
                )
                if self.signals.stop_requested:
                    return None  # cancelled while the fit waited
            started = await self._start_group()
        except Exception as exc:  # noqa: BLE001 - a group that cannot start is a failed attempt
            return None if self.signals.stop_requested else _error_from_exception(0, self.attempt, exc)
        if started is None:
            return None
        reservation, group = started
        error: common_pb2.WorkerError | None = None
        try:
            await self.backend.on_start(group, self.request)  # type: ignore[arg-type]
            await self.backend.on_training_start(group, self.request)  # type: ignore[arg-type]
            world_size, datasets = len(group), tuple(self.datasets)
            if self.data is None:
                shards: list[dict[str, Any]] | None = [{} for _ in range(world_size)]
            else:
                shards = await report_if_slow(
                    asyncio.to_thread(
                        self.data.shards,
                        world_size,
                        reservation,
                        self.backend.uses_ray_data,
                        [m.node_id for m in group.metas],  # locality hints, by rank
                    ),
                    self.settings.pending_reason_after_s,
                    # A run never waits silently: a slow read or split says what it waits for.
                    lambda: self._transition(PreparingShards(world_size, datasets, self.runtime.placement.available())),
                    self._interrupt,
                )
            if shards is None:
                return None  # cancelled while the datasets were read
            await self._transition(Running(len(group)))
            error = await self._train(group, shards)
            return error
        except Exception as exc:  # noqa: BLE001 - setup failures count as worker failures
            error = _error_from_exception(0, self.attempt, exc)
            return None if self.signals.stop_requested else error
        finally:
            clean = error is None and not self._interrupt.is_set()
            try:
                # A failed or interrupted group may hang in a collective: the backend gets a moment
                # to release what it holds on this side (rendezvous servers), then the actors die.
                await asyncio.wait_for(self.backend.on_shutdown(group, self.request), 10 if clean else 1)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - best effort on a group being torn down
                clean = False
            if clean and self.backend.reuse_workers and not self.scaling.elastic:
                await self.runtime.pool.release(self._pool_key(len(group)), reservation, group)  # type: ignore[arg-type]
            else:
                group.shutdown(graceful=clean)
                self.runtime.placement.release(reservation)

    def _worker_runs(self, group: Group, shards: list[dict[str, Any]]) -> list[WorkerRun]:
        latest = self.checkpoints.latest
        start_from = self.checkpoints.info(latest).uri if latest is not None else self.request.resume_from_checkpoint
        request_bytes = self.request.SerializeToString()  # once for every rank
        store, report = self.admitted.store, self.runtime.report
        return [
            WorkerRun(
                framework=self.backend.name,
                request_bytes=request_bytes,
                context=TrainContext(
                    run_id=self.run.run_id,
                    run_name=self.run.name,
                    world_rank=meta.world_rank,
                    world_size=len(group),
                    local_rank=meta.local_rank,
                    local_world_size=meta.local_world_size,
                    node_rank=meta.node_rank,
                    attempt=self.attempt,
                    storage_path=self.run.path,
                ),
                coordinator_address=report.address,
                report_secret=report.secret(self.run.run_id),
                report_tls=report.tls,
                store_uri=store.uri_of(store.root),
                checkpoint_uri=start_from,
                dataset_shards=shard,
                next_report_index=self.run.last_report_index + 1,
                log_max_bytes=self.settings.log_max_bytes,
            )
            for meta, shard in zip(group.metas, shards)
        ]

    async def _train(self, group: Group, shards: list[dict[str, Any]]) -> common_pb2.WorkerError | None:
        runs = group.run(self._worker_runs(group, shards))
        refs = {asyncio.ensure_future(ref): meta.world_rank for ref, meta in zip(runs, group.metas)}
        interrupt = asyncio.ensure_future(self._interrupt.wait())
        finished: list[int] = []
        first_finished_at = 0.0
        try:
            while refs:
                timeout = self._stall_wait(first_finished_at) if finished else None
                done, _ = await asyncio.wait([*refs, interrupt], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    stalled = await self._on_stall(sorted(refs.values()), finished, first_finished_at)
                    if stalled is not None:
                        return stalled
                    continue
                if interrupt in done:
                    return None  # cancelled or stop criteria reached: the group is torn down
                for fut in done:
                    rank = refs.pop(fut)
                    try:
                        outcome = fut.result()
                    except Exception as exc:  # noqa: BLE001 - an actor died
                        self.signals.worker_lost = True
                        return _error_from_exception(rank, self.attempt, exc)
                    if outcome:
                        error = common_pb2.WorkerError.FromString(outcome)
                        if self.scaling.elastic and refs:
                            # When a host dies, the ranks left often fail first (their collective
                            # loses a peer) and Ray reports the dead actor only later: an elastic
                            # group waits a moment to tell a lost worker from a bug in the loop.
                            lost = await self._lost_worker(refs)
                            if lost is not None:
                                self.signals.worker_lost = True
                                return lost
                        return error
                    if not finished:
                        first_finished_at = self.runtime.clock()
                    finished.append(rank)
            return None
        finally:
            interrupt.cancel()
            for fut in refs:
                fut.cancel()

    def _stall_wait(self, first_finished_at: float) -> float:
        """How long to wait for the ranks left before looking at them again."""
        waited = self.runtime.clock() - first_finished_at
        deadlines = [self.settings.stall_reason_after_s]
        if self.settings.stall_fail_after_s > 0:
            deadlines.append(self.settings.stall_fail_after_s)
        ahead = [d - waited for d in deadlines if d > waited]
        return max(min(ahead), 0.01) if ahead else self.settings.stall_reason_after_s

    async def _on_stall(
        self, running: list[int], finished: list[int], first_finished_at: float
    ) -> common_pb2.WorkerError | None:
        """Shows ranks that run on after others finished; fails the attempt once the setting says so."""
        waited = self.runtime.clock() - first_finished_at
        if waited < self.settings.stall_reason_after_s:
            return None
        stalled = Stalled(tuple(running), tuple(finished), waited)
        await self._transition(stalled)
        if 0 < self.settings.stall_fail_after_s <= waited:
            return common_pb2.WorkerError(
                world_rank=running[0], attempt=self.attempt, exc_type="StalledError", message=stalled.reason
            )
        return None

    async def _lost_worker(self, refs: dict[Any, int]) -> common_pb2.WorkerError | None:
        """The error of a rank whose actor died within ``LOST_WORKER_GRACE_S``, if one did."""
        done, _ = await asyncio.wait(list(refs), timeout=LOST_WORKER_GRACE_S, return_when=asyncio.FIRST_EXCEPTION)
        for fut in done:
            if fut.exception() is not None:
                return _error_from_exception(refs[fut], self.attempt, fut.exception())
        return None

    # --- reports ------------------------------------------------------------------
    async def on_report(self, report: worker_reports_pb2.WorkerReport) -> None:
        """Handles one message of a worker's report stream."""
        if is_stale(report.attempt, self.attempt, self.run.state):
            return  # from a group already torn down
        kind = report.WhichOneof("kind")
        if kind == "status" and isinstance(self.state, Running):
            # What a worker does before its loop (installing its runtime environment) shows as the reason.
            await self._transition(Running(self.state.world_size, preparing=report.status.reason[:500]))
        if kind != "report":
            return  # hello; errors arrive as the outcome of the worker's run
        if isinstance(self.state, Running) and self.state.preparing:
            await self._transition(Running(self.state.world_size))
        msg = report.report
        if self._keep_until is not None and msg.report_index > self._keep_until:
            return  # the loop ran on while the stop reached it: as in Ray, the run ends at its result
        self.run.last_report_index = max(self.run.last_report_index, msg.report_index)
        by_rank = self._pending.setdefault(msg.report_index, {})
        by_rank[report.world_rank] = msg
        # Decide completeness before any await: reports of other ranks interleave here.
        complete = len(by_rank) == self.world_size
        if complete:
            del self._pending[msg.report_index]
        owes_commit = complete and any(r.checkpoint_id for r in by_rank.values())
        if owes_commit:
            self._owed_commits += 1
            self._no_owed_commits.clear()
        try:
            if report.world_rank == 0:
                self.run.latest_metrics.CopyFrom(msg.metrics)
                await self.callbacks.on_report(self.run, msg.report_index, msg.metrics)
                if stop_reached(self.request.run_config.stop, flatten_metrics(struct_to_dict(msg.metrics))):
                    self.signals.stop_reached = True
                    self.keep_reports_until(msg.report_index)
                    self._interrupt.set()
            if owes_commit:
                await self._commit(msg.report_index, by_rank)
        finally:
            if owes_commit:
                self._owed_commits -= 1
                if not self._owed_commits:
                    self._no_owed_commits.set()
        await self.callbacks.after_report(self.run)

    def keep_reports_until(self, report_index: int) -> None:
        """Drops the run's reports after ``report_index``: a stop was decided on that result."""
        if self._keep_until is None or report_index < self._keep_until:
            self._keep_until = report_index

    async def _commit(self, index: int, by_rank: dict[int, worker_reports_pb2.TrainingReport]) -> None:
        checkpoint_id = next(r.checkpoint_id for r in by_rank.values() if r.checkpoint_id)
        files = list(by_rank[0].files) if 0 in by_rank else []
        staged = {rank: list(r.files) for rank, r in by_rank.items() if rank != 0 and r.files}
        metrics = struct_to_dict(by_rank[0].metrics) if 0 in by_rank else {}
        # Commits run one at a time, in report order (the lock is FIFO).
        async with self._commit_lock:
            started = time.perf_counter()
            committed = await asyncio.to_thread(self.checkpoints.commit, checkpoint_id, index, metrics, files, staged)
            seconds = time.perf_counter() - started
            info = self.checkpoints.info(committed)
            self.refresh_checkpoints()
            await self.callbacks.on_checkpoint_committed(self.run, info, seconds)
        await self._maybe_resize()

    async def _maybe_resize(self) -> None:
        """At a checkpoint, asks the scaling policy whether a larger group would fit now."""
        if not self.scaling.elastic or self._interrupt.is_set():
            return
        available = await asyncio.to_thread(self.runtime.placement.available)
        target = resize_target(self.scaling, self.world_size, available, self.losses, self.runtime.clock())
        if target:
            self.signals.resize_to = target
            self._interrupt.set()

    def refresh_checkpoints(self) -> None:
        latest = self.checkpoints.latest
        if latest is not None:
            self.run.latest_checkpoint.CopyFrom(self.checkpoints.info(latest))
        del self.run.best_checkpoints[:]
        self.run.best_checkpoints.extend(self.checkpoints.info(c) for c in self.checkpoints.ranked())
