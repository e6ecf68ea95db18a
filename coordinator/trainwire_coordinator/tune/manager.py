"""Searches run by the coordinator: started, listed, watched, cancelled, recorded and carried on.

A request is checked by checks.py before anything is recorded; each search is then run by its own
TuneDriver (driver.py), which packs trials onto the cluster and stops them early.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator

from trainwire_coordinator.execution.run_state import TERMINAL
from trainwire_coordinator.metadata import MetadataStore
from trainwire_coordinator.run_manager import RunManager
from trainwire_coordinator.tune.checks import check_access, check_first_trial, make_plan
from trainwire_coordinator.tune.driver import TUNE_ACTIVE, TuneDriver, now
from trainwire_coordinator.tune.stoppers import StopperGate
from trainwire_core.auth import current_caller
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, TrainwireError
from trainwire_core.v1 import common_pb2, coordinator_pb2, tune_pb2

logger = logging.getLogger(__name__)

KIND = "tune"
KEYS = "tune-idempotency-key"


def summary(tune: tune_pb2.TuneRun) -> tune_pb2.TuneRun:
    """The search without its trainer's request (pickled code, datasets): for lists and watchers."""
    out = tune_pb2.TuneRun()
    out.CopyFrom(tune)
    out.request.ClearField("trainer")
    out.request.trainer.framework = tune.request.trainer.framework
    return out


class TuneManager:
    """Starts, tracks and carries on searches; each search's trials are runs of the RunManager.

    Args:
        runs: Makes and cancels the trials' runs; its event log tells the searches of their reports.
        metadata: Where searches are recorded (documents of kind "tune").
    """

    def __init__(self, runs: RunManager, metadata: MetadataStore) -> None:
        self.runs, self.metadata = runs, metadata
        self.drivers: dict[str, TuneDriver] = {}
        self.by_run: dict[str, TuneDriver] = {}
        # Trial runs made from now on wait on each report for their search's stopper (a no-op without one).
        runs.trial_callbacks.append(StopperGate(self.by_run))

    def _follow_events(self, follow: bool = True) -> None:
        # The run event log tells this manager of its trials' events only while a search runs:
        # a plain fit's events never come here.
        observers = self.runs.events.observers
        if follow and self._on_event not in observers:
            observers.append(self._on_event)
        elif not follow and self._on_event in observers:
            observers.remove(self._on_event)

    def _on_event(self, event: coordinator_pb2.RunEvent) -> None:
        driver = self.by_run.get(event.run_id)
        if driver is not None:
            driver.on_event(event)

    async def save(self, tune: tune_pb2.TuneRun) -> None:
        """Records the search as it is now."""
        await self.runs._write(self.metadata.put_document, KIND, tune.tune_id, tune.SerializeToString())

    async def tune(self, request: tune_pb2.TuneRequest) -> tune_pb2.TuneRun:
        """Checks and records a search, then starts it."""
        caller = current_caller()
        check_access(request, caller, self.runs.checks.allow_pickled_code)
        if request.idempotency_key:
            earlier = await asyncio.to_thread(self.metadata.get_document, KEYS, request.idempotency_key)
            if earlier is not None:
                return await asyncio.to_thread(self.get_tune, earlier.decode())
        tune_id = uuid.uuid4().hex[:16]
        request = tune_pb2.TuneRequest.FromString(request.SerializeToString())
        if not request.tune_config.search_alg.HasField("seed"):
            # Chosen once and kept: a coordinator that takes the search over draws the same trials.
            # 32 bits: the range every searcher takes (Optuna's samplers refuse larger seeds).
            request.tune_config.search_alg.seed = random.getrandbits(32)
        plan = await asyncio.to_thread(make_plan, request)
        await check_first_trial(request, self.runs.checks)
        name = request.name or f"{request.trainer.framework}-tune-{tune_id[:8]}"
        tune = tune_pb2.TuneRun(
            tune_id=tune_id,
            name=name,
            state=common_pb2.PENDING,
            request=request,
            best_trial=-1,
            created_at=now(),
            updated_at=now(),
            submitted_by=caller.name,
            num_trials_planned=-1 if plan.searcher.total is None else plan.searcher.total,
        )
        if request.idempotency_key:
            stored = await self.runs._write(
                self.metadata.create_document, KEYS, request.idempotency_key, tune_id.encode()
            )
            if stored.decode() != tune_id:
                return await asyncio.to_thread(self.get_tune, stored.decode())
        await self.save(tune)
        self._launch(TuneDriver(self, tune, plan))
        return tune

    def _launch(self, driver: TuneDriver) -> None:
        self._follow_events()
        self.drivers[driver.tune.tune_id] = driver
        driver.task = asyncio.get_running_loop().create_task(driver.main(), name=f"tune-{driver.tune.tune_id}")
        driver.task.add_done_callback(lambda _: self._forget(driver))

    def _forget(self, driver: TuneDriver) -> None:
        if driver.tune.state in TUNE_ACTIVE:  # stopped with the coordinator: the next one carries it on
            return
        self.drivers.pop(driver.tune.tune_id, None)
        for trial in driver.tune.trials:
            self.by_run.pop(trial.run_id, None)
        if not self.drivers and not self.by_run:
            self._follow_events(False)

    def get_tune(self, tune_id: str) -> tune_pb2.TuneRun:
        """The search by id, else the newest one of that name."""
        if not tune_id:
            raise InvalidArgumentError("tune_id is required", field="tune_id")
        driver = self.drivers.get(tune_id)
        if driver is not None:
            return driver.tune
        data = self.metadata.get_document(KIND, tune_id)
        if data is not None:
            return tune_pb2.TuneRun.FromString(data)
        named = [t for t in self._all() if t.name == tune_id]
        if not named:
            raise NotFoundError(f"no search with id or name {tune_id!r}")
        newest = max(named, key=lambda t: (t.created_at.ToNanoseconds(), t.tune_id))
        return self.drivers[newest.tune_id].tune if newest.tune_id in self.drivers else newest

    def _all(self) -> list[tune_pb2.TuneRun]:
        return [tune_pb2.TuneRun.FromString(d) for d in self.metadata.list_documents(KIND)]

    def list_tunes(self, request: tune_pb2.ListTunesRequest) -> tune_pb2.ListTunesResponse:
        """A page of searches, newest first, without their trainers' requests."""
        if not 0 <= request.page_size <= 1000:
            raise InvalidArgumentError("page_size must be between 0 and 1000", field="page_size")
        try:
            start = int(request.page_token or 0)
        except ValueError:
            raise InvalidArgumentError("page_token is malformed", field="page_token") from None
        if start < 0:
            raise InvalidArgumentError("page_token is malformed", field="page_token")
        tunes = sorted(self._all(), key=lambda t: (t.created_at.ToNanoseconds(), t.tune_id), reverse=True)
        size = request.page_size or 100
        page = [
            summary(self.drivers[t.tune_id].tune if t.tune_id in self.drivers else t)
            for t in tunes[start : start + size]
        ]
        token = str(start + size) if start + size < len(tunes) else ""
        return tune_pb2.ListTunesResponse(tunes=page, next_page_token=token)

    async def watch(self, tune_id: str) -> AsyncIterator[tune_pb2.TuneRun]:
        """The search now, then again each time it changes, until it has ended."""
        tune = await asyncio.to_thread(self.get_tune, tune_id)
        tune_id, seen = tune.tune_id, -1
        while True:
            driver = self.drivers.get(tune_id)
            if driver is None:
                tune = await asyncio.to_thread(self.get_tune, tune_id)
                yield summary(tune)
                if tune.state not in TUNE_ACTIVE:
                    return
                await asyncio.sleep(self.runs.events.poll_s)  # another coordinator's search: polled
                continue
            if driver.version != seen:
                seen = driver.version
                snapshot = summary(driver.tune)
                yield snapshot
                if snapshot.state not in TUNE_ACTIVE:
                    return
            async with driver.changed:
                try:
                    await asyncio.wait_for(driver.changed.wait(), 1.0)
                except TimeoutError:
                    pass

    async def cancel(self, tune_id: str) -> tune_pb2.TuneRun:
        """Cancels an active search and its trials; waits up to 30 s for it to end."""
        tune = await asyncio.to_thread(self.get_tune, tune_id)
        driver = self.drivers.get(tune.tune_id)
        if driver is not None and tune.state in TUNE_ACTIVE:
            await driver.cancel("cancelled by request")
            if driver.task is not None:
                await asyncio.wait({driver.task}, timeout=30)
            return driver.tune
        return tune

    async def resume(self, request: tune_pb2.ResumeTuneRequest) -> tune_pb2.TuneRun:
        """Ray's ``Tuner.restore(...)`` modes on a search: its failed trials run again, its unfinished ones stop.

        A search still running takes the retried trials at once. One that has ended runs again until
        they end (its other trials stay as they were); with no failed trial to retry it is left as is.
        """
        tune = await asyncio.to_thread(self.get_tune, request.tune_id)
        # Running its trials again runs its code again: the scopes the search needed.
        check_access(tune.request, current_caller(), self.runs.checks.allow_pickled_code)
        retry = request.resume_errored or request.restart_errored
        failed = [t for t in tune.trials if t.state == common_pb2.FAILED] if retry else []
        driver = self.drivers.get(tune.tune_id)
        if tune.state in TUNE_ACTIVE and driver is None:
            raise FailedPreconditionError(
                f"search {tune.tune_id} is being carried on by another coordinator: restore it there", field="tune_id"
            )
        if driver is not None and tune.state in TUNE_ACTIVE:
            if not request.resume_unfinished:
                await driver.stop_all("stopped by Tuner.restore(resume_unfinished=False)")
            for trial in failed:
                await driver.retry(trial, request.restart_errored)
            await driver.save()
            return driver.tune
        if not failed:
            return tune
        tune = tune_pb2.TuneRun.FromString(tune.SerializeToString())
        try:
            plan = await asyncio.to_thread(make_plan, tune.request)
        except TrainwireError as exc:
            raise FailedPreconditionError(f"cannot run the search again: {exc.message}", field="tune_id") from None
        driver = TuneDriver(self, tune, plan)
        for trial in tune.trials:
            if trial.state != common_pb2.FAILED:
                await self._replay(driver, trial)  # the searcher and scheduler learn the search so far
        for trial in failed:
            await driver.retry(tune.trials[trial.index], request.restart_errored)
        driver._update_best()
        driver.budget_from = time.time()  # a time budget counts from the restore, as Ray's counts from its start
        tune.state = common_pb2.RUNNING
        tune.state_reason = f"restored: {len(failed)} failed trials run again"
        tune.ClearField("error_field")
        await driver.save()
        self._launch(driver)
        return tune

    async def recover(self) -> list[str]:
        """Carries on the searches a previous coordinator left active (after RunManager.recover)."""
        resumed = []
        for tune in await asyncio.to_thread(self._all):
            if tune.state not in TUNE_ACTIVE or tune.tune_id in self.drivers:
                continue
            try:
                plan = await asyncio.to_thread(make_plan, tune.request)
            except TrainwireError as exc:
                tune.state, tune.state_reason = common_pb2.FAILED, f"cannot carry the search on: {exc.message}"
                await self.save(tune)
                continue
            driver = TuneDriver(self, tune, plan)
            for trial in tune.trials:
                await self._replay(driver, trial)
            driver._update_best()
            self._launch(driver)
            resumed.append(tune.tune_id)
        if resumed:
            logger.info("carrying on %d search(es) left active by the previous coordinator", len(resumed))
        return resumed

    async def _replay(self, driver: TuneDriver, trial: tune_pb2.Trial) -> None:
        """Brings a trial's record up to date from its run: the scheduler and searcher see its reports again."""
        if not trial.run_id:
            return
        self._follow_events()
        self.by_run[trial.run_id] = driver
        reports = trial.num_reports
        trial.num_reports = 0
        after = 0
        while True:
            batch = await asyncio.to_thread(self.metadata.read_events, trial.run_id, after, 5000)
            if not batch:
                break
            after = batch[-1][0]
            for _, payload in batch:
                event = coordinator_pb2.RunEvent.FromString(payload)
                if event.WhichOneof("kind") == "metrics":
                    driver.on_result(trial, event.metrics, act=False)
        if trial.num_reports < reports:
            logger.warning("trial %d of search %s has fewer reports than recorded", trial.index, driver.tune.tune_id)
        if trial.state in TERMINAL:  # recorded as ended (an ASHA stop included): as it was
            driver.tell_searcher(trial)
            return
        run = await asyncio.to_thread(self.runs.get_run, trial.run_id)
        trial.state, trial.state_reason = run.state, run.state_reason
        if run.state in TERMINAL:
            driver._trial_ended(trial)

    async def shutdown(self) -> None:
        """Stops driving searches; they stay active for the next coordinator (their trials are suspended)."""
        for driver in list(self.drivers.values()):
            if driver.task is not None:
                driver.task.cancel()
