"""The run controller: drives one run's worker groups through the lifecycle of ``run_state``.

The controller does the work (placement, backend setup, training, reports); every state
change goes through ``_transition``, and what follows an attempt is ``run_state.after_attempt``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from trainwire.dataset_schema import DatasetSchema
from trainwire.errors import require_installed
from trainwire.storage import Store
from trainwire.structs import struct_to_dict
from trainwire.tls import ClientTLS
from trainwire.train.context import TrainContext
from trainwire.v1 import common_pb2, coordinator_pb2, worker_reports_pb2
from trainwire_coordinator.checkpoint_manager import CheckpointManager, flatten_metrics
from trainwire_coordinator.datasets import fit_wait_reason, report_if_slow, split_beside_reservation
from trainwire_coordinator.failure_policy import FailurePolicy
from trainwire_coordinator.metrics import CoordinatorMetrics
from trainwire_coordinator.placement import WorkerGroup, bundles_for, scaling_policy
from trainwire_coordinator.preprocessors import build_preprocessor
from trainwire_coordinator.run_state import TERMINAL, AttemptOutcome, after_attempt, check_transition
from trainwire_coordinator.worker_pool import WorkerPool
from trainwire_worker.backends.base import Backend
from trainwire_worker.datasets import ShardSpec

logger = logging.getLogger(__name__)


@dataclass
class ControllerDeps:
    """What a controller needs from the coordinator around it."""

    store: Store
    save_run: Callable[[coordinator_pb2.Run], Awaitable[None]]
    emit: Callable[[coordinator_pb2.RunEvent], Awaitable[int]]
    coordinator_address: Callable[[], str]
    # The secret a run's workers present on their report streams.
    report_secret: Callable[[str], str] = lambda run_id: ""
    # How workers verify the coordinator on their report streams (None: plaintext).
    report_tls: ClientTLS | None = None
    pending_reason_after_s: float = 1.0
    pool: WorkerPool = field(default_factory=lambda: WorkerPool(0))
    metrics: CoordinatorMetrics = field(default_factory=CoordinatorMetrics)


def _check_framework(worker: Any, module: str, framework: str, package: str, install: str) -> None:
    require_installed(module, framework, package, install)


# How long an elastic group waits, after a rank fails, for Ray to report a dead actor.
LOST_WORKER_GRACE_S = 20.0
# After a lost worker, an elastic group does not grow for this long: long enough for Ray to declare
# a lost node dead (until then its resources still look available).
RESIZE_AFTER_LOSS_S = 60.0


def _error_from_exception(rank: int, attempt: int, exc: BaseException) -> common_pb2.WorkerError:
    cause = getattr(exc, "cause", None) or exc
    return common_pb2.WorkerError(
        world_rank=rank,
        attempt=attempt,
        exc_type=type(cause).__name__,
        message=str(cause),
        traceback=str(exc),
    )


def _read(ds: DatasetSchema) -> Any:
    import ray.data

    return (ray.data.read_csv if ds.format == "csv" else ray.data.read_parquet)(ds.uri)


class RunController:
    """Runs one run to its end: placement, backend setup, training, restarts.

    Args:
        run: The run's live view; the controller updates and saves it.
        request: The validated Fit request.
        backend: The framework backend.
        datasets: Resolved datasets by name.
        deps: Store, persistence and event hooks.
        policy: Decides restarts after failures.
    """

    def __init__(
        self,
        run: coordinator_pb2.Run,
        request: coordinator_pb2.FitRequest,
        backend: Backend,
        datasets: dict[str, DatasetSchema],
        deps: ControllerDeps,
        policy: FailurePolicy,
        checkpoints: CheckpointManager,
    ) -> None:
        self.run = run
        self.request = request
        self.backend = backend
        self.datasets = datasets
        self.deps = deps
        self.policy = policy
        self.checkpoints = checkpoints
        self.task: asyncio.Task | None = None
        self._interrupt = asyncio.Event()
        self._cancel_requested = False
        # The coordinator is stopping: end the attempt, leave the run for its successor.
        self._suspend_requested = False
        self._stop_reached = False
        self.scaling = scaling_policy(request.scaling_config)
        # The size of the current attempt's group, and the size the scaling policy asked for next.
        self.world_size = 0
        self._resize_to = 0
        self._grow_to = 0
        self._worker_lost = False
        self._lost_at: float | None = None
        # Committed checkpoints when a worker was last lost (an elastic run carries on once per checkpoint).
        self._checkpoints_at_loss = -1
        self._preprocessor: Any = None
        self._commit_lock = asyncio.Lock()
        self._pending: dict[int, dict[int, worker_reports_pb2.TrainingReport]] = {}

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
            self.deps.metrics.restarts.labels("coordinator_restart").inc()
            await self._transition(common_pb2.RESTARTING, f"the coordinator restarted; resuming {where}")
        except Exception as exc:  # noqa: BLE001 - a run that cannot be taken up still ends
            logger.exception("run %s: cannot resume", self.run.run_id)
            await self._transition(common_pb2.FAILED, f"the coordinator restarted and could not resume the run: {exc}")
            return
        await self._main()

    async def suspend(self) -> None:
        """Ends the current attempt and leaves the run active for the next coordinator."""
        if self.run.state in TERMINAL:
            return
        self._suspend_requested = True
        self._interrupt.set()
        if self.task is not None:
            await asyncio.shield(self.task)

    def _stop_requested(self) -> bool:
        return self._cancel_requested or self._suspend_requested

    async def cancel(self) -> None:
        if self.run.state in TERMINAL:
            return
        self._cancel_requested = True
        self._interrupt.set()
        if self.task is not None:
            await asyncio.shield(self.task)

    async def _transition(self, state: int, reason: str = "") -> None:
        """The one place a run changes state: checked against the lifecycle, recorded, streamed."""
        if self.run.state == state and self.run.state_reason == reason:
            return
        check_transition(self.run.state, state)
        if state in TERMINAL:
            self.deps.metrics.finished(state)
        self.run.state = state
        self.run.state_reason = reason
        # Event before record: a watcher that sees the end has the event too.
        await self.deps.emit(
            coordinator_pb2.RunEvent(
                run_id=self.run.run_id, state_change=coordinator_pb2.StateChange(state=state, reason=reason)
            )
        )
        await self.deps.save_run(self.run)

    async def _main(self) -> None:
        try:
            while True:
                self._worker_lost = False
                error = await self._run_attempt()
                committed = len(self.checkpoints.checkpoints)
                outcome = AttemptOutcome(
                    error=error,
                    cancelled=self._cancel_requested,
                    suspended=self._suspend_requested,
                    stop_reached=self._stop_reached,
                    resize_to=self._resize_to,
                    world_size=self.world_size,
                    worker_lost=self._worker_lost,
                    elastic=self.scaling.elastic,
                    progressed=self._checkpoints_at_loss < 0 or committed > self._checkpoints_at_loss,
                )
                decision = after_attempt(outcome, self.run.num_failures, self.policy)
                if self._worker_lost:
                    self._checkpoints_at_loss = committed
                    self._lost_at = time.monotonic()
                if error is not None and decision.state != common_pb2.CANCELLED and not self._suspend_requested:
                    self.deps.metrics.worker_failures.labels(str(decision.counts_as_failure).lower()).inc()
                    await self.deps.emit(coordinator_pb2.RunEvent(run_id=self.run.run_id, worker_error=error))
                if decision.counts_as_failure:
                    assert error is not None
                    self.run.num_failures += 1
                    if not decision.restart:
                        self.run.error.CopyFrom(error)
                await self._transition(decision.state, decision.reason)
                if not decision.restart:
                    return
                self._grow_to = self._resize_to  # the size the policy chose, for the next group
                self._resize_to = 0
                cause = "failure" if decision.counts_as_failure else "lost_worker" if error is not None else "resize"
                self.deps.metrics.restarts.labels(cause).inc()
                self.run.attempt += 1
                self._interrupt.clear()
                await asyncio.to_thread(self.checkpoints.remove_uncommitted)
        except Exception as exc:  # noqa: BLE001 - a controller bug must still end the run
            logger.exception("run %s: controller failed", self.run.run_id)
            self.run.error.CopyFrom(_error_from_exception(-1, self.attempt, exc))
            await self._transition(common_pb2.FAILED, f"internal error in the coordinator: {exc}")

    # --- one attempt -------------------------------------------------------------
    async def _reserve(self, num_workers: int) -> Any:
        scaling = self.request.scaling_config
        bundles = bundles_for(scaling, num_workers)
        pg = placement_group(bundles, strategy=scaling.placement_strategy or "PACK")
        ready = asyncio.ensure_future(pg.ready())
        done, _ = await asyncio.wait([ready], timeout=self.deps.pending_reason_after_s)
        if not done:
            waiting = common_pb2.PENDING if self.attempt == 0 else common_pb2.RESTARTING
            await self._transition(
                waiting,
                f"waiting for resources: {num_workers} workers x {bundles[-1]} "
                f"(cluster has {ray.available_resources()} available)",
            )
            interrupt = asyncio.ensure_future(self._interrupt.wait())
            await asyncio.wait([ready, interrupt], return_when=asyncio.FIRST_COMPLETED)
            interrupt.cancel()
            ready.cancel()  # no-op when ready; else the run was cancelled while waiting
        return pg

    def _pool_key(self, num_workers: int) -> tuple:
        scaling = self.request.scaling_config
        bundles = tuple(tuple(sorted(b.items())) for b in bundles_for(scaling, num_workers))
        env = tuple(sorted(self.backend.worker_env(self.request).items()))
        return (self.backend.name, bundles, scaling.placement_strategy or "PACK", env)

    async def _start_group(self) -> tuple[Any, WorkerGroup] | None:
        """A warm group of the same shape if the pool has one, else a new placement group and actors.

        Returns None when the run was cancelled while it waited for resources.
        """
        if not self.scaling.elastic:
            key = self._pool_key(self.scaling.max_workers)
            if self.backend.reuse_workers and (warm := self.deps.pool.acquire(key)) is not None:
                self.world_size = self.scaling.max_workers
                await self._transition(common_pb2.STARTING, "reusing warm workers")
                return warm
        # Idle pooled groups hold resources this run may need.
        self.deps.pool.evict_all()
        num_workers = self.scaling.min_workers
        if self.scaling.elastic:
            num_workers = self.scaling.workers_to_start(await asyncio.to_thread(ray.available_resources))
            if self._grow_to:
                # What the policy saw fit at the checkpoint: the group just ended has not yet
                # handed its own CPUs back to what Ray reports as available.
                num_workers, self._grow_to = self._grow_to, 0
            elif self._lost_recently() and self.world_size:
                # Ray counts a lost node's CPUs as available until it declares the node dead: carry
                # on with the workers that are left, and grow at a checkpoint once it is safe to.
                num_workers = max(self.scaling.min_workers, min(num_workers, self.world_size - 1))
        pg = await self._reserve(num_workers)
        if self._stop_requested():
            remove_placement_group(pg)
            return None
        self.world_size = num_workers
        elastic = f"{num_workers} of up to {self.scaling.max_workers} workers" if self.scaling.elastic else ""
        await self._transition(common_pb2.STARTING, elastic)
        scaling = self.request.scaling_config
        try:
            group = await WorkerGroup.start(
                pg, num_workers, bundles_for(scaling, num_workers)[-1], self.backend.worker_env(self.request)
            )
            backend = self.backend
            await group.execute(_check_framework, backend.module, backend.name, backend.package, backend.install)
        except BaseException:
            remove_placement_group(pg)
            raise
        return pg, group

    async def _run_attempt(self) -> common_pb2.WorkerError | None:
        """Runs one worker group to its end; returns the first worker error, if any."""
        self._pending.clear()
        try:
            if self._preprocessor_unfitted():
                # Before the reservation, as Ray Train's driver does: the fit's Ray Data tasks
                # need CPUs that the run's placement group (or idle warm groups) would hold.
                self.deps.pool.evict_all()
                waiting = common_pb2.PENDING if self.attempt == 0 else common_pb2.RESTARTING
                await report_if_slow(
                    asyncio.to_thread(self._fit_preprocessor),
                    self.deps.pending_reason_after_s,
                    lambda: self._transition(waiting, fit_wait_reason("train")),
                    self._interrupt,
                )
                if self._stop_requested():
                    return None  # cancelled while the fit waited
            started = await self._start_group()
        except Exception as exc:  # noqa: BLE001 - a group that cannot start is a failed attempt
            return None if self._stop_requested() else _error_from_exception(0, self.attempt, exc)
        if started is None:
            return None
        pg, group = started
        error: common_pb2.WorkerError | None = None
        try:
            await self.backend.on_start(group, self.request)
            await self.backend.on_training_start(group, self.request)
            shards = await self._dataset_shards(len(group), pg)
            await self._transition(common_pb2.RUNNING)
            error = await self._train(group, shards)
            return error
        except Exception as exc:  # noqa: BLE001 - setup failures count as worker failures
            error = _error_from_exception(0, self.attempt, exc)
            return None if self._stop_requested() else error
        finally:
            clean = error is None and not self._interrupt.is_set()
            try:
                # A failed or interrupted group may hang in a collective: the backend gets a moment
                # to release what it holds on this side (rendezvous servers), then the actors die.
                await asyncio.wait_for(self.backend.on_shutdown(group, self.request), 10 if clean else 1)
            except Exception:  # noqa: BLE001 - best effort on a group being torn down
                clean = False
            if clean and self.backend.reuse_workers and not self.scaling.elastic:
                await self.deps.pool.release(self._pool_key(len(group)), pg, group)
            else:
                group.shutdown(graceful=clean)
                remove_placement_group(pg)

    def _preprocessor_unfitted(self) -> bool:
        return self._preprocessor is None and bool(
            self.request.pickled_preprocessor or self.request.HasField("preprocessor")
        )

    def _fit_preprocessor(self) -> Any:
        """Fits the run's preprocessor on the train dataset once per run (as Ray Train's driver does)."""
        if self._preprocessor_unfitted():
            import cloudpickle

            if self.request.pickled_preprocessor:
                preprocessor = cloudpickle.loads(self.request.pickled_preprocessor)
            else:
                preprocessor = build_preprocessor(self.request.preprocessor)
            if preprocessor.fit_status().name in ("NOT_FITTED", "PARTIALLY_FITTED"):
                preprocessor.fit(_read(self.datasets["train"]))
            self._preprocessor = preprocessor
            self.checkpoints.preprocessor_bytes = cloudpickle.dumps(preprocessor)
        return self._preprocessor

    async def _dataset_shards(self, world_size: int, pg: Any) -> list[dict[str, Any]]:
        preprocessor = await asyncio.to_thread(self._fit_preprocessor)
        shards: list[dict[str, Any]] = [{} for _ in range(world_size)]
        for name, ds in self.datasets.items():
            if self.backend.uses_ray_data:
                iterators = await asyncio.to_thread(split_beside_reservation, ds, world_size, preprocessor, pg)
                for rank in range(world_size):
                    shards[rank][name] = iterators[rank]
            else:
                for rank in range(world_size):
                    shards[rank][name] = ShardSpec(
                        ds.uri, ds.format, rank, world_size, self.checkpoints.preprocessor_bytes
                    )
        return shards

    async def _train(self, group: WorkerGroup, shards: list[dict[str, Any]]) -> common_pb2.WorkerError | None:
        latest = self.checkpoints.latest
        start_from = self.checkpoints.info(latest).uri if latest is not None else self.request.resume_from_checkpoint
        refs = {}
        for meta, actor, shard in zip(group.metas, group.actors, shards):
            context = TrainContext(
                run_id=self.run.run_id,
                run_name=self.run.name,
                world_rank=meta.world_rank,
                world_size=len(group),
                local_rank=meta.local_rank,
                local_world_size=meta.local_world_size,
                node_rank=meta.node_rank,
                attempt=self.attempt,
                storage_path=self.run.path,
            )
            ref = actor.run.remote(
                self.request.SerializeToString(),
                context,
                self.deps.coordinator_address(),
                self.deps.report_secret(self.run.run_id),
                self.deps.report_tls,
                self.deps.store.uri_of(self.deps.store.root),
                start_from,
                shard,
                self.run.last_report_index + 1,
                self.backend.train,
            )
            refs[asyncio.ensure_future(ref)] = meta.world_rank
        interrupt = asyncio.ensure_future(self._interrupt.wait())
        try:
            while refs:
                done, _ = await asyncio.wait([*refs, interrupt], return_when=asyncio.FIRST_COMPLETED)
                if interrupt in done:
                    return None  # cancelled or stop criteria reached: the group is torn down
                for fut in done:
                    rank = refs.pop(fut)
                    try:
                        outcome = fut.result()
                    except Exception as exc:  # noqa: BLE001 - an actor died
                        self._worker_lost = True
                        return _error_from_exception(rank, self.attempt, exc)
                    if outcome:
                        error = common_pb2.WorkerError.FromString(outcome)
                        if self.scaling.elastic and refs:
                            # When a host dies, the ranks left often fail first (their collective
                            # loses a peer) and Ray reports the dead actor only later: an elastic
                            # group waits a moment to tell a lost worker from a bug in the loop.
                            lost = await self._lost_worker(refs)
                            if lost is not None:
                                self._worker_lost = True
                                return lost
                        return error
            return None
        finally:
            interrupt.cancel()
            for fut in refs:
                fut.cancel()

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
        if report.attempt != self.attempt or self.run.state in TERMINAL:
            return  # from a group already torn down
        if report.WhichOneof("kind") != "report":
            return  # hello; errors arrive as the outcome of the worker's run
        msg = report.report
        self.run.last_report_index = max(self.run.last_report_index, msg.report_index)
        by_rank = self._pending.setdefault(msg.report_index, {})
        by_rank[report.world_rank] = msg
        # Decide completeness before any await: reports of other ranks interleave here.
        complete = len(by_rank) == self.world_size
        if complete:
            del self._pending[msg.report_index]
        if report.world_rank == 0:
            self.run.latest_metrics.CopyFrom(msg.metrics)
            await self.deps.emit(
                coordinator_pb2.RunEvent(
                    run_id=self.run.run_id,
                    metrics=coordinator_pb2.MetricsEvent(report_index=msg.report_index, metrics=msg.metrics),
                )
            )
            self._check_stop(struct_to_dict(msg.metrics))
        if complete and any(r.checkpoint_id for r in by_rank.values()):
            await self._commit(msg.report_index, by_rank)
        await self.deps.save_run(self.run)

    async def _commit(self, index: int, by_rank: dict[int, worker_reports_pb2.TrainingReport]) -> None:
        checkpoint_id = next(r.checkpoint_id for r in by_rank.values() if r.checkpoint_id)
        files = [f for r in by_rank.values() for f in r.files]
        metrics = struct_to_dict(by_rank[0].metrics) if 0 in by_rank else {}
        # Commits run one at a time, in report order (the lock is FIFO).
        async with self._commit_lock:
            with self.deps.metrics.commit_seconds.time():
                committed = await asyncio.to_thread(self.checkpoints.commit, checkpoint_id, index, metrics, files)
            info = self.checkpoints.info(committed)
            self.refresh_checkpoints()
            await self.deps.emit(coordinator_pb2.RunEvent(run_id=self.run.run_id, checkpoint=info))
        await self._maybe_resize()

    def _lost_recently(self) -> bool:
        return self._lost_at is not None and time.monotonic() - self._lost_at < RESIZE_AFTER_LOSS_S

    async def _maybe_resize(self) -> None:
        """At a checkpoint, asks the scaling policy whether a larger group would fit now."""
        if not self.scaling.elastic or self._interrupt.is_set():
            return
        if self._lost_recently():
            return
        target = self.scaling.resize_to(self.world_size, await asyncio.to_thread(ray.available_resources))
        if target:
            self._resize_to = target
            self._interrupt.set()

    def refresh_checkpoints(self) -> None:
        latest = self.checkpoints.latest
        if latest is not None:
            self.run.latest_checkpoint.CopyFrom(self.checkpoints.info(latest))
        del self.run.best_checkpoints[:]
        self.run.best_checkpoints.extend(self.checkpoints.info(c) for c in self.checkpoints.ranked())

    def _check_stop(self, metrics: dict[str, Any]) -> None:
        flat = flatten_metrics(metrics)
        for key, threshold in self.request.run_config.stop.items():
            value = flat.get(key)
            if isinstance(value, int | float) and value >= threshold:
                self._stop_reached = True
                self._interrupt.set()
