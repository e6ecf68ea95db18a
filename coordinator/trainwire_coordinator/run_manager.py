"""The coordinator's domain logic behind the servicers: runs, events, reports."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pyarrow.fs as pafs

from trainwire.checkpoint import Checkpoint
from trainwire.config import FailureConfig
from trainwire_coordinator.admission.checkpoint_uploads import receive_checkpoint
from trainwire_coordinator.admission.code_policy import CodePolicy
from trainwire_coordinator.admission.datasets import DatasetService
from trainwire_coordinator.admission.fit_checks import FitChecks, run_store
from trainwire_coordinator.admission.report_checks import ReportSecrets, check_report
from trainwire_coordinator.admission.runtime_envs import PackageService
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_coordinator.execution.callbacks import (
    ControllerCallback,
    ControllerMetricsCallback,
    RunEvents,
    RunPersistence,
    now,
    run_record,
)
from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
from trainwire_coordinator.execution.controller import (
    ControllerRuntime,
    ControllerSettings,
    ReportEndpoint,
    RunController,
)
from trainwire_coordinator.execution.placement import WorkerPool
from trainwire_coordinator.execution.run_state import ACTIVE, TERMINAL, FailurePolicy
from trainwire_coordinator.metadata import MetadataStore, RunRecord
from trainwire_coordinator.metrics import CoordinatorMetrics
from trainwire_coordinator.run_streams import EventLog, LogReader, watch_logs
from trainwire_core.auth import ANYONE, SUBMIT_CODE, Caller, current_caller
from trainwire_core.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError, TrainwireError
from trainwire_core.manifest import is_derived_path
from trainwire_core.storage import Store, is_relative_path
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2, coordinator_pb2, worker_reports_pb2

logger = logging.getLogger(__name__)


PROGRAM_EXITED = "the program that started it exited"


class RunManager:
    """Creates runs, owns their controllers and routes worker reports.

    Args:
        metadata: Runs and events.
        store: The shared store.
        datasets: Upload and dataset resolution.
        coordinator_address: The address workers report to; "" until ``listen_at`` is told it.
        allow_pickled_code: Accept cloudpickled training code.
        packages: Runtime-environment packages.
        allow_pip_installs: Accept runtime environments with pip requirements.
        policy_factory: Builds the failure policy of a run (tests inject one).
        authenticated: Calls come with tokens (the server checks them); without, every caller is
            ``ANYONE`` and no call asks who it is.
    """

    def __init__(
        self,
        metadata: MetadataStore,
        store: Store,
        datasets: DatasetService,
        coordinator_address: str,
        *,
        allow_pickled_code: bool = True,
        packages: PackageService | None = None,
        allow_pip_installs: bool = True,
        watch_poll_s: float = 1.0,
        pending_reason_after_s: float = 1.0,
        capacity_wait_s: float = 0.0,
        worker_pool_idle_s: float = 0.0,
        report_key: str = "",
        report_tls: ClientTLS | None = None,
        policy_factory: Callable[[FailureConfig], FailurePolicy] = FailurePolicy,
        stall_reason_after_s: float = 60.0,
        stall_fail_after_s: float = 0.0,
        embedded_owner: str = "",
        log_max_bytes: int = 64 << 20,
        materialize_below_bytes: int = 0,
        code_policy: CodePolicy | None = None,
        pip_allowed_index_urls: Sequence[str] = (),
        authenticated: bool = True,
    ) -> None:
        self.metadata = metadata
        self.authenticated = authenticated
        self.store = store
        self.datasets = datasets
        self.events = EventLog(metadata, watch_poll_s)
        self.packages = packages or PackageService(store)
        self.checks = FitChecks(
            code_policy or CodePolicy(store),
            self.packages,
            datasets,
            allow_pickled_code=allow_pickled_code,
            allow_pip_installs=allow_pip_installs,
            pip_allowed_index_urls=tuple(pip_allowed_index_urls),
            capacity_wait_s=capacity_wait_s,
            store=store,
        )
        # Every run's controller gets the same settings, collaborators and callbacks, built once here.
        self.controller_settings = ControllerSettings(
            pending_reason_after_s=pending_reason_after_s,
            stall_reason_after_s=stall_reason_after_s,
            stall_fail_after_s=stall_fail_after_s,
            log_max_bytes=log_max_bytes,
            materialize_below_bytes=materialize_below_bytes,
        )
        # Set when this coordinator is embedded in one program: its runs end with that program.
        self.embedded_owner = embedded_owner
        self.policy_factory = policy_factory
        self.pool = WorkerPool(worker_pool_idle_s)
        self.report_secrets = ReportSecrets(report_key)
        self.controller_runtime = ControllerRuntime(
            report=ReportEndpoint(coordinator_address, self.report_secrets.secret_for, report_tls), pool=self.pool
        )
        self.controllers: dict[str, RunController] = {}
        self.metrics = CoordinatorMetrics(lambda: [c.run.state for c in list(self.controllers.values())])
        self.persistence = RunPersistence(metadata, self.events.writes)
        # In this order: the metrics, then the event (a watcher that sees the end has it), then the record.
        self.callbacks: list[ControllerCallback] = [
            ControllerMetricsCallback(self.metrics),
            RunEvents(self.events.append),
            self.persistence,
        ]
        # Hung after those on a search's trial runs only (the search's stopper gate): a plain fit never enters tune/.
        self.trial_callbacks: list[ControllerCallback] = []

    async def recover(self) -> list[str]:
        """Carries on the runs a previous coordinator left active; returns their ids.

        Each restarts from its latest committed checkpoint (its old worker group ended
        with the old coordinator, whose Ray job owned it). A run whose request no longer
        passes this coordinator's checks (its dataset is gone, pickled code is now refused)
        fails with the reason.
        """
        active = sorted(ACTIVE)
        records: list[RunRecord] = []
        token = ""
        while True:
            page, token = await asyncio.to_thread(self.metadata.list_runs, active, 100, token)
            records += page
            if not token:
                break
        resumed = []
        for rec in records:
            if rec.run_id in self.controllers:
                continue
            run = coordinator_pb2.Run.FromString(rec.data)
            if self.embedded_owner and run.embedded_owner != self.embedded_owner:
                # Another program's embedded run: that program is gone (else its own coordinator
                # would hold the state), and this one does not take its runs over.
                await self._end_unadopted(run, common_pb2.CANCELLED, PROGRAM_EXITED)
                continue
            try:
                admitted = await asyncio.to_thread(self.checks.validate, run.request, check_capacity=False)
            except TrainwireError as exc:
                reason = f"the coordinator restarted and cannot carry the run on: {exc.message}"
                await self._end_unadopted(run, common_pb2.FAILED, reason)
                continue
            self._launch(self._controller(run, admitted), resume=True)
            resumed.append(run.run_id)
        if resumed:
            logger.info("carrying on %d run(s) left active by the previous coordinator", len(resumed))
        return resumed

    async def _end_unadopted(self, run: coordinator_pb2.Run, state: int, reason: str) -> None:
        """Ends a run no controller takes up: the event first (a watcher sees the end), then the record."""
        run.state, run.state_reason = state, reason
        change = coordinator_pb2.StateChange(state=state, reason=reason)
        await self.events.append(coordinator_pb2.RunEvent(run_id=run.run_id, state_change=change))
        await self._save(run)

    # --- runs ------------------------------------------------------------------
    async def _write(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Runs a metadata write on the metadata thread: off the event loop, in the order made."""
        return await asyncio.get_running_loop().run_in_executor(self.events.writes, fn, *args)

    async def _save(self, run: coordinator_pb2.Run) -> None:
        """Saves a snapshot of the run on the metadata thread (writes keep their order)."""
        await self.persistence.save_run(run)

    def listen_at(self, address: str) -> None:
        """Where workers report from now on: the server's address, once it listens (every controller shares it)."""
        runtime = self.controller_runtime
        runtime.report = dataclasses.replace(runtime.report, address=address)

    def check_fit(
        self, request: coordinator_pb2.FitRequest, caller: Caller, *, check_capacity: bool = True
    ) -> AdmittedRun:
        """Every check a Fit from ``caller`` passes before it is recorded (``FitChecks.check``); blocking."""
        return self.checks.check(request, caller, check_capacity=check_capacity)

    async def fit(
        self,
        request: coordinator_pb2.FitRequest,
        *,
        tune_id: str = "",
        trial_index: int = 0,
        submitted_by: str | None = None,
    ) -> coordinator_pb2.Run:
        """Checks and records a run, then starts it (a search's trials name their search and index)."""
        caller = current_caller() if self.authenticated else ANYONE
        # Dataset and checkpoint checks read the store; capacity asks Ray: off the event loop.
        admitted = await asyncio.to_thread(self.check_fit, request, caller)
        store = admitted.store
        run_id = uuid.uuid4().hex[:16]
        name = admitted.run_config.name or f"{request.framework}-{run_id[:8]}"
        run = coordinator_pb2.Run(
            run_id=run_id,
            name=name,
            state=common_pb2.PENDING,
            framework=request.framework,
            path=store.uri_of(store.run_dir(run_id)),
            created_at=now(),
            updated_at=now(),
            request=request,
            submitted_by=caller.name if submitted_by is None else submitted_by,
            embedded_owner=self.embedded_owner,
            tune_id=tune_id,
            trial_index=trial_index,
        )
        stored = await self._write(self.metadata.create_run, run_record(run, request.idempotency_key))
        if stored.run_id != run_id:
            return coordinator_pb2.Run.FromString(stored.data)
        await self.events.append(
            coordinator_pb2.RunEvent(run_id=run_id, state_change=coordinator_pb2.StateChange(state=common_pb2.PENDING))
        )
        self._launch(self._controller(run, admitted))
        return run

    def _controller(self, run: coordinator_pb2.Run, admitted: AdmittedRun) -> RunController:
        # The run's own copy of the request: one copy of its pickled code per live run, not two.
        admitted = dataclasses.replace(admitted, request=run.request)
        return RunController(
            run=run,
            admitted=admitted,
            runtime=self.controller_runtime,
            policy=self.policy_factory(admitted.failure_config),
            checkpoints=CheckpointManager(
                admitted.store, run.run_id, run.name, admitted.checkpoint_config, admitted.request.framework
            ),
            callbacks=self.callbacks + self.trial_callbacks if run.tune_id else self.callbacks,
            settings=self.controller_settings,
        )

    def _launch(self, controller: RunController, resume: bool = False) -> None:
        run_id = controller.run.run_id
        self.controllers[run_id] = controller
        controller.resume() if resume else controller.start()
        assert controller.task is not None
        # A finished run lives on in the metadata store only; its controller (datasets, pickled code) goes.
        controller.task.add_done_callback(lambda _: self._forget(run_id))

    def _forget(self, run_id: str) -> None:
        self.controllers.pop(run_id, None)
        self.events.forget(run_id)

    def _run_store(self, storage_path: str | None) -> Store:
        """The run's own store (``RunConfig.storage_path``), else the coordinator's."""
        return run_store(self.store, storage_path)

    def get_run(self, run_id: str) -> coordinator_pb2.Run:
        if not run_id:
            raise InvalidArgumentError("run_id is required", field="run_id")
        if run_id in self.controllers:
            return self.controllers[run_id].run
        record = self.metadata.get_run(run_id) or self.metadata.get_run_by_name(run_id)
        if record is None:
            raise NotFoundError(f"no run with id or name {run_id!r}")
        return coordinator_pb2.Run.FromString(record.data)

    def list_runs(self, request: coordinator_pb2.ListRunsRequest) -> coordinator_pb2.ListRunsResponse:
        if request.page_size < 0 or request.page_size > 1000:
            raise InvalidArgumentError("page_size must be between 0 and 1000", field="page_size")
        try:
            records, token = self.metadata.list_runs(list(request.states), request.page_size or 100, request.page_token)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc), field="page_token") from exc
        runs = [coordinator_pb2.Run.FromString(r.data) for r in records]
        if request.submitted_by:
            # A page may come back short; its token still leads on to the rest.
            runs = [run for run in runs if run.submitted_by == request.submitted_by]
        return coordinator_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    async def watch(
        self, request: coordinator_pb2.WatchRunRequest, batched: bool = False
    ) -> AsyncIterator[coordinator_pb2.RunEvent] | AsyncIterator[coordinator_pb2.RunEventBatch]:
        """A run's events from ``after_event_id`` on, one message each or in batches (``batched``)."""
        run_id = (await asyncio.to_thread(self.get_run, request.run_id)).run_id
        if request.after_event_id < 0:
            raise InvalidArgumentError("after_event_id must be >= 0", field="after_event_id")

        def has_ended() -> bool:
            return self.get_run(run_id).state in TERMINAL

        live = run_id in self.controllers
        watch = self.events.watch_batched if batched else self.events.watch
        async for message in watch(run_id, request.after_event_id, has_ended, live):
            yield message

    async def watch_logs(self, request: coordinator_pb2.WatchLogsRequest) -> AsyncIterator[coordinator_pb2.LogLines]:
        run = await asyncio.to_thread(self.get_run, request.run_id)
        store = await asyncio.to_thread(self._run_store, run.request.run_config.storage_path)
        reader = LogReader(store, store.run_dir(run.run_id), list(request.ranks), request.after)

        def has_ended() -> bool:
            return self.get_run(run.run_id).state in TERMINAL

        run_ended = self.events.ended(run.run_id) if run.run_id in self.controllers else None
        async for batch in watch_logs(reader, request.follow, has_ended, run_ended=run_ended):
            yield batch

    async def cancel(self, run_id: str, reason: str = "") -> coordinator_pb2.Run:
        run = await asyncio.to_thread(self.get_run, run_id)
        controller = self.controllers.get(run.run_id)
        if controller is not None:
            await controller.cancel(reason)
            return controller.run
        return run

    def authorize_reports(self, metadata: dict[str, str]) -> str:
        """Checks a report stream's credentials; returns the run it may report for."""
        return self.report_secrets.authorize(metadata)

    async def on_worker_report(self, report: worker_reports_pb2.WorkerReport, run_id: str) -> None:
        """Routes one report of a stream authorized for ``run_id``, once it is checked."""
        check_report(report, run_id)
        if report.WhichOneof("kind") == "report":
            self.metrics.reports.inc()
        controller = self.controllers.get(report.run_id)
        if controller is not None:
            await controller.on_report(report)

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Ends every worker group and leaves active runs for the next coordinator to carry on.

        An embedded coordinator stops with its program: its runs end CANCELLED instead.
        """
        live = [c for c in self.controllers.values() if c.run.state not in TERMINAL]
        if self.embedded_owner:
            suspending = [c.cancel(PROGRAM_EXITED) for c in live]
        else:
            suspending = [c.suspend() for c in live]
        if suspending:
            try:
                await asyncio.wait_for(asyncio.gather(*suspending, return_exceptions=True), timeout_s)
            except TimeoutError:
                logger.warning("some runs did not stop within %ss; their groups end with this process", timeout_s)
        self.pool.evict_all()

    async def upload_checkpoint(
        self, requests: AsyncIterator[coordinator_pb2.UploadCheckpointRequest]
    ) -> coordinator_pb2.CheckpointInfo:
        """Stores an uploaded checkpoint as the one checkpoint of a new SUCCEEDED run."""
        run_id = uuid.uuid4().hex[:16]
        trusted = SUBMIT_CODE in current_caller().scopes
        header, checkpoints = await receive_checkpoint(self.store, run_id, requests, code_trusted=trusted)
        run = coordinator_pb2.Run(
            run_id=run_id,
            name=header.run_name,
            state=common_pb2.SUCCEEDED,
            state_reason="uploaded checkpoint",
            framework="upload",
            path=self.store.uri_of(self.store.run_dir(run_id)),
            created_at=now(),
            updated_at=now(),
        )
        info = checkpoints.info(checkpoints.latest)
        run.latest_checkpoint.CopyFrom(info)
        run.best_checkpoints.append(info)
        run.latest_metrics.CopyFrom(info.metrics)
        await self._write(self.metadata.create_run, run_record(run))
        await self.events.append(coordinator_pb2.RunEvent(run_id=run_id, checkpoint=info))
        await self.events.append(
            coordinator_pb2.RunEvent(
                run_id=run_id, state_change=coordinator_pb2.StateChange(state=common_pb2.SUCCEEDED)
            )
        )
        return info

    def download_checkpoint(self, checkpoint: str) -> AsyncIterator[coordinator_pb2.FileChunk]:
        store, path = checkpoint_location(self, checkpoint)
        return iter_checkpoint_files(store, path)


CHUNK_BYTES = 1 << 20


def checkpoint_location(runs: RunManager, checkpoint: str) -> tuple[Store, str]:
    """The store and path of a checkpoint named ``<run id or name>/<checkpoint id>`` (or just the run, for
    its latest), or by a URI inside the coordinator's store."""
    if not checkpoint:
        raise InvalidArgumentError("checkpoint is required", field="checkpoint")
    if "://" in checkpoint:
        # Compared as text and read through the store's own filesystem: a URI anywhere else would let a
        # caller read any file the coordinator can, or make it open filesystems (hosts) of the caller's choice.
        prefix = runs.store.uri + "/runs/"
        rel = checkpoint.split("?", 1)[0][len(prefix) :] if checkpoint.startswith(prefix) else ""
        if not is_relative_path(rel):
            raise PermissionDeniedError(
                "only checkpoints in the coordinator's store can be named by URI; use <run>/<checkpoint id>",
                field="checkpoint",
            )
        path = runs.store.path("runs", rel)
        if runs.store.fs.get_file_info(path).type != pafs.FileType.Directory:
            raise NotFoundError(f"no checkpoint directory at {checkpoint!r}")
        return Store.for_filesystem(runs.store.fs, path), path
    run_ref, _, checkpoint_id = checkpoint.partition("/")
    run = runs.get_run(run_ref)
    if not checkpoint_id:
        if not run.HasField("latest_checkpoint"):
            raise NotFoundError(f"run {run_ref!r} has no checkpoint")
        checkpoint_id = run.latest_checkpoint.checkpoint_id
    info = next((c for c in run.best_checkpoints if c.checkpoint_id == checkpoint_id), None)
    if info is None:
        raise NotFoundError(f"run {run_ref!r} has no checkpoint {checkpoint_id!r}")
    ckpt = Checkpoint(info.uri)
    return Store.for_filesystem(ckpt.filesystem, ckpt.path), ckpt.path


async def iter_checkpoint_files(store: Store, path: str) -> AsyncIterator[coordinator_pb2.FileChunk]:
    """Streams every file of a checkpoint directory in chunks."""
    # The predictor's compiled libraries live beside the model; they are its cache, not the checkpoint.
    files = [(rel, size) for rel, size in await asyncio.to_thread(store.walk_files, path) if not is_derived_path(rel)]
    if not files:
        raise NotFoundError(f"checkpoint {store.uri_of(path)} has no files")
    for rel, _ in files:
        data = await asyncio.to_thread(store.read_bytes, f"{path}/{rel}")
        for offset in range(0, max(len(data), 1), CHUNK_BYTES):
            yield coordinator_pb2.FileChunk(path=rel, offset=offset, data=data[offset : offset + CHUNK_BYTES])
