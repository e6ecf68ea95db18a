"""One search's driver: it suggests trials, starts them as runs while they fit and acts on their reports."""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf import timestamp_pb2

from trainwire_coordinator.admission.fit_checks import cluster_view
from trainwire_coordinator.execution.run_state import TERMINAL, stop_reached
from trainwire_coordinator.tune.checks import Plan
from trainwire_coordinator.tune.pbt import RemoteExplorer
from trainwire_coordinator.tune.schedulers import SCHEDULER_FIELD, FIFOScheduler, Stop
from trainwire_coordinator.tune.scheduling import (
    ERROR,
    PAUSE,
    PAUSED,
    PENDING,
    RUNNING,
    STOP,
    TERMINATED,
    ControllerScheduler,
    SchedTrial,
)
from trainwire_coordinator.tune.searchers import SEARCHER_FIELD, library_error
from trainwire_coordinator.tune.space import flatten, nest
from trainwire_coordinator.tune.stoppers import SearchStopper
from trainwire_coordinator.tune.trials import add, fits, resolve_sample_from, trial_name, trial_needs, trial_request
from trainwire_core.errors import TrainwireError
from trainwire_core.structs import flatten_metrics, merge_dicts, metrics_to_struct, struct_to_dict, to_struct
from trainwire_core.v1 import common_pb2, coordinator_pb2, tune_pb2

if TYPE_CHECKING:
    from trainwire_coordinator.run_manager import RunManager


class SearchHost(Protocol):
    """What a search's driver needs of the manager that holds it (the TuneManager)."""

    runs: RunManager
    by_run: dict[str, TuneDriver]  # trial run id -> its search's driver, for the event log's reports

    async def save(self, tune: tune_pb2.TuneRun) -> None: ...


# Searches have always logged under the manager's name: log filters on it keep working.
logger = logging.getLogger("trainwire_coordinator.tune.manager")

TUNE_ACTIVE = frozenset({common_pb2.PENDING, common_pb2.RUNNING})
# The most often a search's record is rewritten while its trials report.
SAVE_EVERY_S = 0.25


def now() -> timestamp_pb2.Timestamp:
    """The time now, as a search's records hold it."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


class TuneDriver:
    """Runs one search: suggests trials, starts them as runs while they fit, acts on their reports."""

    def __init__(self, manager: SearchHost, tune: tune_pb2.TuneRun, plan: Plan) -> None:
        self.manager, self.tune, self.plan = manager, tune, plan
        self.runs = manager.runs
        self.wake = asyncio.Event()
        self.changed = asyncio.Condition()
        self.version = 0
        self.stops: dict[int, Stop] = {}
        self.by_run: dict[str, tune_pb2.Trial] = {t.run_id: t for t in tune.trials if t.run_id}
        for trial in tune.trials:  # a search taken over: a Repeater's begun group goes on with its config
            plan.searcher.known(trial.index, flatten(struct_to_dict(trial.config)))
        self.needs: dict[int, dict[str, float]] = {}
        self.exhausted = False
        # Set once the search is being ended early (stop_all, its time budget, fail_fast, a cancel or a
        # failure): unlike ``exhausted`` (no trial left to suggest), its running trials are being stopped.
        self.ending = False
        self.cancel_reason = ""
        self.task: asyncio.Task | None = None
        self._save_task: asyncio.Task | None = None
        # The user's stopper, in an actor of the search; a dict stop is data, decided here.
        self.stopper = SearchStopper(tune.request.pickled_stopper) if tune.request.pickled_stopper else None
        self.stop_dict = dict(tune.request.trainer.run_config.stop)
        # A trial run's stopper decision under way (run id -> it): its report waits for it (``decided``).
        self.deciding: dict[str, asyncio.Task] = {}
        self.started_at: dict[int, float] = {}
        # Schedulers that Ray's TuneController drives (HyperBand, PBT, ...): this driver is their controller.
        self.sched = plan.scheduler if isinstance(plan.scheduler, ControllerScheduler) else None
        self.sched_trials: dict[int, SchedTrial] = {}
        self.acting = True
        # Trials a scheduler paused whose run is ending: the trial whose checkpoint they go on from, the
        # config, the checkpoint chosen and the clone's training_iteration it was chosen at.
        self.pausing: dict[int, tuple[int, Any, Any, Any]] = {}
        # A trial's committed checkpoints: by the training_iteration they were reported at, and the latest.
        self.checkpoints: dict[int, tuple[str, int]] = {}
        self.checkpoint_at: dict[int, dict[int, str]] = {}
        self.checkpoint_iteration: dict[str, int] = {}
        self.resolving: set[int] = set()
        # When the time budget started: the search's creation (a restore starts it again).
        self.budget_from = tune.created_at.ToSeconds()

    # --- the search's loop -----------------------------------------------------------
    async def main(self) -> None:
        """Drives the search until it ends, is cancelled or fails."""
        try:
            if self.tune.state == common_pb2.PENDING:
                self.tune.state = common_pb2.RUNNING
                await self.save()
            while not self.cancel_reason and self.tune.state in TUNE_ACTIVE:
                # Cleared before the work, not after: a trial that ends meanwhile wakes the next wait.
                self.wake.clear()
                await self._over_budget()
                if self.stopper is not None and not self.ending and await self.stopper.stop_all():
                    await self.stop_all("the search's stopper stopped the search (stop_all)")
                await self._fill()
                if self.exhausted and not self._active():
                    break
                try:
                    await asyncio.wait_for(self.wake.wait(), 1.0)
                except TimeoutError:
                    pass
            if self.tune.state in TUNE_ACTIVE:
                await self._finish()
        except TrainwireError as exc:
            await self.fail(exc.message, exc.field)
        except Exception as exc:  # a bug: the search ends FAILED with it, not silently
            logger.exception("search %s failed", self.tune.tune_id)
            await self.fail(f"internal error: {exc!r}")
        finally:
            if self.stopper is not None and self.tune.state not in TUNE_ACTIVE:
                self.stopper.close()
            explorer = getattr(self.sched, "explorer", None)
            if explorer is not None and self.tune.state not in TUNE_ACTIVE:
                explorer.close()
            if self.tune.state not in TUNE_ACTIVE:
                self.plan.searcher.close()

    def _active(self) -> list[tune_pb2.Trial]:
        return [t for t in self.tune.trials if t.state not in TERMINAL]

    def _limit(self) -> int:
        config = self.tune.request.tune_config
        limits = [n for n in (config.max_concurrent_trials, self.plan.searcher.max_concurrent) if n]
        return min(limits) if limits else 0

    async def stop_all(self, reason: str) -> None:
        """Ends the search as finished (Ray's stop_all): no new trials, running ones stop as finished."""
        self.exhausted = self.ending = True
        for trial in self._active():
            if trial.run_id:
                self.stops.setdefault(trial.index, Stop(reason, early=False))
                await self.runs.cancel(trial.run_id, reason)
            else:
                trial.state, trial.state_reason = common_pb2.CANCELLED, reason
        self.wake.set()

    async def _over_budget(self) -> None:
        budget = self.tune.request.tune_config.time_budget_s
        if not budget or self.ending or time.time() - self.budget_from < budget:
            return
        self.exhausted = self.ending = True
        reason = f"the search's time budget of {budget:g} s is spent"
        for trial in self._active():
            if trial.run_id:
                self.stops[trial.index] = Stop(reason, early=True)
                await self.runs.cancel(trial.run_id, reason)
            else:
                trial.state, trial.state_reason = common_pb2.CANCELLED, reason

    async def _fill(self) -> None:
        """Starts trials while the concurrency limits and the cluster allow."""
        while True:
            active = self._active()
            limit = self._limit()
            waiting = [t for t in active if not t.run_id]
            if limit and len(active) - len(waiting) >= limit:
                self._reason(
                    f"{len(active) - len(waiting)} trials running, the most allowed at once "
                    f"(max_concurrent_trials={limit})"
                )
                return
            if self.sched is None:
                trial = waiting[0] if waiting else await self._next_trial()
            else:  # the scheduler picks among pending and paused trials, as Ray's choose_trial_to_run
                trial = self._choose(waiting) or await self._next_trial()
            if trial is None:
                return
            request = self._request(trial)
            need = self.needs.setdefault(trial.index, await asyncio.to_thread(trial_needs, request))
            used: dict[str, float] = {}
            for other in active:
                if other.run_id:
                    add(used, self.needs.get(other.index, {}))
            # Alone, a trial is checked against the cluster by its own Fit: Ray is asked once.
            total = (await asyncio.to_thread(cluster_view))[0] if used else {}
            if used and not fits(need, used, total):
                reason = (
                    f"waiting for resources: the trial needs {_resources(need)}; running trials hold "
                    f"{_resources(used)} of the cluster's {_resources(total, need)}"
                )
                if trial.state_reason != reason:
                    trial.state_reason = reason
                    self._reason(f"trial {trial.index} waits for resources")
                    await self.save()
                return
            await self._start(trial, request)

    def _reason(self, reason: str) -> None:
        planned = self.tune.num_trials_planned
        to_go = "" if planned < 0 else f"; {max(planned - len(self.tune.trials), 0)} trials to go"
        text = reason + to_go
        if self.tune.state_reason != text:
            self.tune.state_reason = text
            self._changed()

    async def _next_trial(self) -> tune_pb2.Trial | None:
        if self.exhausted:
            return None
        index = len(self.tune.trials)
        try:
            values = await self.plan.searcher.asuggest(index)
        except Exception as exc:  # the search ends FAILED naming its algorithm (main's handler)
            raise library_error(self.plan.searcher.display_name, exc, SEARCHER_FIELD, started=True) from exc
        if values is None:
            self.exhausted = True
            return None
        config = nest(values)
        if self.plan.space.derived:
            function = self.tune.request.function_trainable
            config = await asyncio.to_thread(resolve_sample_from, self.plan.space.derived, config, function)
        trial = self.tune.trials.add(index=index, state=common_pb2.PENDING)
        trial.config.CopyFrom(to_struct(config, "search_space"))
        if self.sched is not None:
            await self._add_to_scheduler(trial)
        # Recorded before its run is made: a coordinator taking over finds it and makes the same run.
        await self.save()
        return trial

    def _request(self, trial: tune_pb2.Trial) -> coordinator_pb2.FitRequest:
        config = merge_dicts(self.plan.space.constants, struct_to_dict(trial.config))
        key = f"tune/{self.tune.tune_id}/{trial.index}"
        if trial.past_run_ids:  # a paused trial goes on in a run of its own
            key += f"/{len(trial.past_run_ids)}"
        request = trial_request(
            self.tune.request.trainer,
            config,
            trial_name(self.tune.name, trial.index),
            key,
            self.tune.request.search_space,
        )
        if trial.resume_from_checkpoint:
            request.resume_from_checkpoint = trial.resume_from_checkpoint
        return request

    async def _start(self, trial: tune_pb2.Trial, request: coordinator_pb2.FitRequest) -> None:
        try:
            run = await self.runs.fit(
                request, tune_id=self.tune.tune_id, trial_index=trial.index, submitted_by=self.tune.submitted_by
            )
        except TrainwireError as exc:
            trial.state, trial.state_reason = common_pb2.FAILED, f"the trial could not start: {exc.message}"
            self._trial_ended(trial)
            await self.save()
            return
        trial.run_id = run.run_id
        self.started_at.setdefault(trial.index, time.time())
        if trial.index in self.sched_trials:
            self.sched_trials[trial.index].status = RUNNING
        self.by_run[run.run_id] = trial
        self.manager.by_run[run.run_id] = self
        # Its first events may have come before the driver knew the run: take its state as it is now.
        run = self.runs.get_run(run.run_id)
        trial.state, trial.state_reason = run.state, run.state_reason
        if run.state in TERMINAL:
            self._trial_ended(trial)
        self._reason(f"{len(self._active())} trials running")
        await self.save()

    async def _finish(self) -> None:
        trials = self.tune.trials
        counts: dict[str, int] = {}
        for t in trials:
            label = "stopped early" if t.early_stopped else common_pb2.RunState.Name(t.state).lower()
            counts[label] = counts.get(label, 0) + 1
        summary = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
        if self.cancel_reason:
            state, reason = common_pb2.CANCELLED, f"{self.cancel_reason} ({summary})"
        else:
            state, reason = common_pb2.SUCCEEDED, f"{len(trials)} trials: {summary}"
        await self._serve_best()
        await self.end(state, reason)

    async def end(self, state: int, reason: str, field: str = "") -> None:
        """Ends the search in ``state`` and records it."""
        self.tune.state, self.tune.state_reason = state, reason
        if field:
            self.tune.error_field = field
        await self.save()

    async def fail(self, reason: str, field: str = "") -> None:
        """Ends the search FAILED: no new trials, running ones are cancelled."""
        if self.tune.state not in TUNE_ACTIVE:
            return
        self.exhausted = self.ending = True
        await self.end(common_pb2.FAILED, reason, field)
        for trial in self._active():
            if trial.run_id:
                await self.runs.cancel(trial.run_id, f"the search failed: {reason}")

    async def cancel(self, reason: str) -> None:
        """Stops the search: no new trials, running ones are cancelled."""
        self.cancel_reason = reason
        self.exhausted = self.ending = True
        for trial in self._active():
            if trial.run_id:
                await self.runs.cancel(trial.run_id, reason)
            else:
                trial.state, trial.state_reason = common_pb2.CANCELLED, reason
        self.wake.set()

    # --- Tuner.restore --------------------------------------------------------------------
    async def retry(self, trial: tune_pb2.Trial, restart: bool) -> None:
        """A failed trial runs again in a new run: from its latest committed checkpoint, or from scratch.

        As Ray's ``resume_errored`` / ``restart_errored``: a trial without a checkpoint starts over.
        """
        old = trial.run_id
        uri, iteration = "", 0
        if old and not restart:
            run = await asyncio.to_thread(self.runs.get_run, old)
            if run.HasField("latest_checkpoint") and run.latest_checkpoint.uri:
                uri = run.latest_checkpoint.uri
                iteration = trial.iteration_offset + int(run.latest_checkpoint.index)
        elif not restart and trial.resume_from_checkpoint:  # failed before its run started: where it was to go on
            uri, iteration = trial.resume_from_checkpoint, trial.iteration_offset
        if old:
            trial.past_run_ids.append(old)
            self.by_run.pop(old, None)
            self.manager.by_run.pop(old, None)
            trial.run_id = ""
        trial.resume_from_checkpoint, trial.iteration_offset = uri, iteration
        if restart or not uri:
            trial.ClearField("last_result")
            trial.ClearField("best_metric")
            trial.num_reports = 0
        self.stops.pop(trial.index, None)
        self.started_at.pop(trial.index, None)
        self.needs.pop(trial.index, None)
        trial.early_stopped = False
        where = f"its checkpoint at training_iteration {iteration}" if uri else "the start"
        how = "restart_errored" if restart else "resume_errored"
        trial.state = common_pb2.PENDING
        trial.state_reason = f"failed, goes on from {where} (Tuner.restore({how}=True))"
        if self.sched is not None:  # the scheduler heard of its error: it joins again as a new trial
            self.sched_trials.pop(trial.index, None)
            await self._add_to_scheduler(trial)
        self.wake.set()

    # --- trials' events ------------------------------------------------------------------
    def on_event(self, event: coordinator_pb2.RunEvent) -> None:
        """Acts on an event of one of the search's trial runs."""
        trial = self.by_run.get(event.run_id)
        if trial is None:
            return
        kind = event.WhichOneof("kind")
        if kind == "metrics":
            self.on_result(trial, event.metrics, act=True)
            self._save_soon()
        elif kind == "checkpoint":
            iteration = trial.iteration_offset + event.checkpoint.index
            self.checkpoints[trial.index] = (event.checkpoint.uri, iteration)
            self.checkpoint_at.setdefault(trial.index, {})[iteration] = event.checkpoint.uri
            self.checkpoint_iteration[event.checkpoint.uri] = iteration
            if trial.index in self.sched_trials:
                self.sched_trials[trial.index].checkpoint = event.checkpoint.uri
        elif kind == "state_change" and trial.state not in TERMINAL:
            change = event.state_change
            if change.state == common_pb2.CANCELLED and trial.index in self.pausing:
                self._paused(trial)
                return
            trial.state, trial.state_reason = change.state, change.reason
            if change.state == common_pb2.RUNNING and not trial.num_reports:
                self.started_at[trial.index] = time.time()  # Ray counts a trial's time from its start, not its wait
            if change.state in TERMINAL:
                self._trial_ended(trial)
                self.wake.set()
                asyncio.get_running_loop().create_task(self.save())
            else:
                self._save_soon()

    def on_result(self, trial: tune_pb2.Trial, event: coordinator_pb2.MetricsEvent, act: bool) -> None:
        """Records a trial's report and asks the scheduler about it (``act``: stop the trial if it says so)."""
        reported = struct_to_dict(event.metrics)
        metrics = flatten_metrics(reported)
        # As Ray Tune counts results; a trial that went on from a checkpoint counts on from it.
        metrics.setdefault("training_iteration", trial.iteration_offset + event.report_index)
        trial.last_result.CopyFrom(metrics_to_struct(metrics))
        trial.num_reports += 1
        self._ask_stoppers(trial, reported, metrics, act, event.report_index)
        metric, value = self.plan.metric, None
        if metric:
            if metric not in metrics:
                if act:
                    reported = ", ".join(sorted(metrics))
                    self._spawn(
                        self.fail(
                            f"tune_config.metric {metric!r} is not among the metrics trial {trial.index} reported "
                            f"({reported})",
                            "tune_config.metric",
                        )
                    )
                return
            value = _number(metrics[metric])
            if value is not None and (
                not trial.HasField("best_metric")
                or (value > trial.best_metric if self.plan.mode == "max" else value < trial.best_metric)
            ):
                trial.best_metric = value
        scheduler = self.plan.scheduler
        if isinstance(scheduler, FIFOScheduler) or trial.index in self.stops:
            return
        if self.sched is not None:
            self._ask_scheduler(trial, metrics, act)
            return
        progress = _number(metrics.get(scheduler.time_attr))
        if progress is None:
            if act:
                self._spawn(
                    self.fail(
                        f"the scheduler's time_attr {scheduler.time_attr!r} is not among the metrics trial "
                        f"{trial.index} reported",
                        "tune_config.scheduler.time_attr",
                    )
                )
            return
        try:
            stop = scheduler.on_result(trial.index, progress, value)
        except Exception as exc:  # a scheduler's bug or refusal: the search fails naming it
            self._library_failed(library_error(scheduler.display_name, exc, SCHEDULER_FIELD, started=True), act)
            return
        if stop is not None:
            self.stops[trial.index] = stop
            if act and trial.run_id:
                self._spawn(self.runs.cancel(trial.run_id, stop.reason))

    # --- a scheduler Ray's controller drives (HyperBand, MedianStoppingRule, PBT) --------------
    def get_trials(self) -> list[SchedTrial]:
        """The search's trials as the scheduler sees them (Ray's ``TuneController.get_trials``)."""
        return [self.sched_trials[t.index] for t in self.tune.trials if t.index in self.sched_trials]

    def get_live_trials(self) -> list[SchedTrial]:
        return [t for t in self.get_trials() if not t.is_finished()]

    def stop_trial(self, st: SchedTrial) -> None:
        """Stops a trial for the scheduler, as Ray's ``stop_trial``: the scheduler hears of it first."""
        assert self.sched is not None
        if st.is_finished():
            return
        if st.status in (PENDING, PAUSED):
            self.sched.on_trial_remove(self, st)
        else:
            self.sched.on_trial_complete(self, st, st.last_result)
        was, st.status = st.status, TERMINATED
        if not self.acting:
            return
        trial = self.tune.trials[st.index]
        progress = _number(st.last_result.get(self.sched.time_attr))
        max_t = getattr(self.sched, "max_t", None)
        early = not (max_t is not None and progress is not None and progress >= max_t)
        at = f" at {self.sched.time_attr} {_num(progress)}" if progress is not None else ""
        reason = f"stopped by {self.sched.display_name}{at}"
        self.pausing.pop(st.index, None)
        if trial.run_id and was == RUNNING:
            self.stops[st.index] = Stop(reason, early=early)
            self._spawn(self.runs.cancel(trial.run_id, reason))
        elif trial.state not in TERMINAL:  # paused: its run has ended, or is ending
            self.stops[st.index] = Stop(reason, early=early)
            if not trial.run_id:
                trial.state, trial.state_reason, trial.early_stopped = common_pb2.CANCELLED, reason, early
                if not early:
                    trial.state = common_pb2.SUCCEEDED
                self.tell_searcher(trial)
                self._update_best()
                self._save_soon()

    def pause_trial(self, st: SchedTrial) -> None:
        """Pauses a trial: its run ends, and it goes on later in a new run from its latest checkpoint."""
        self._restart_later(st, st, None, None, st.last_result.get("training_iteration"))

    def exploit(self, st: SchedTrial, source: SchedTrial, config: Any, checkpoint: Any, at: Any = None) -> None:
        """PBT's exploit: the trial goes on from ``source``'s checkpoint (the one of its result at
        training_iteration ``at`` once committed, else ``checkpoint``) with ``config``."""
        self._restart_later(st, source, config, checkpoint, at)

    def _restart_later(self, st: SchedTrial, source: SchedTrial, config: Any, checkpoint: Any, at: Any) -> None:
        st.status = PAUSED
        if not self.acting:
            return
        trial = self.tune.trials[st.index]
        self.pausing[st.index] = (source.index, config, checkpoint, at)
        if trial.run_id and trial.state not in TERMINAL:
            assert self.sched is not None
            what = "paused" if source is st else f"exploits trial {source.index}"
            self._spawn(self.runs.cancel(trial.run_id, f"{what} ({self.sched.display_name})"))
        elif not trial.run_id:  # already paused (synchronous PBT): it only takes the new checkpoint and config
            self._paused(trial)

    def _choose(self, waiting: list[tune_pb2.Trial]) -> tune_pb2.Trial | None:
        assert self.sched is not None
        try:
            st = self.sched.choose_trial_to_run(self)
        except Exception as exc:
            raise library_error(self.sched.display_name, exc, SCHEDULER_FIELD, started=True) from exc
        ready = {t.index: t for t in waiting if t.index not in self.resolving and t.index not in self.pausing}
        return ready.get(st.index) if st is not None else None

    async def _add_to_scheduler(self, trial: tune_pb2.Trial) -> None:
        assert self.sched is not None
        config = self._trial_config(trial)
        st = self.sched_trials[trial.index] = SchedTrial(trial.index, copy.deepcopy(config))
        try:
            self.sched.on_trial_add(self, st)
        except TrainwireError:
            raise
        except Exception as exc:
            raise library_error(self.sched.display_name, exc, SCHEDULER_FIELD, started=True) from exc
        if st.config != config:
            self._set_trial_config(trial, st.config)

    def _set_trial_config(self, trial: tune_pb2.Trial, config: dict[str, Any]) -> None:
        """Records the config the scheduler gave a trial (keyed like param_space)."""
        keyed = {"train_loop_config": config} if self.tune.request.function_trainable else config
        trial.config.CopyFrom(to_struct(keyed, "tune_config.scheduler"))

    def _ask_scheduler(self, trial: tune_pb2.Trial, metrics: dict[str, Any], act: bool) -> None:
        assert self.sched is not None
        st = self.sched_trials.get(trial.index)
        if st is None:  # a trial recorded before this coordinator took the search over
            st = self.sched_trials[trial.index] = SchedTrial(trial.index, self._trial_config(trial))
            self.sched.on_trial_add(self, st)
        if st.is_finished() or st.status == PAUSED:
            return
        st.status = RUNNING
        result = dict(metrics)
        result.setdefault("time_total_s", time.time() - self.started_at.setdefault(trial.index, time.time()))
        st.last_result = result
        self.acting = act
        try:
            decision = self.sched.on_trial_result(self, st, result)
            if decision == STOP:
                self.stop_trial(st)
            elif decision == PAUSE:
                self.pause_trial(st)
        except TrainwireError as exc:
            self._library_failed(exc, act)
        except Exception as exc:  # a scheduler's bug or refusal: the search fails naming it
            self._library_failed(library_error(self.sched.display_name, exc, SCHEDULER_FIELD, started=True), act)
        finally:
            self.acting = True

    def _paused(self, trial: tune_pb2.Trial) -> None:
        """A paused trial's run has ended: the trial waits to go on from the chosen checkpoint."""
        source, config, chosen, at = self.pausing.pop(trial.index)
        if trial.run_id:
            trial.past_run_ids.append(trial.run_id)
            self.by_run.pop(trial.run_id, None)
            trial.run_id = ""
        # Ray saves the clone at the result it decided on; that checkpoint is committed just after the
        # result's event, so it is taken here, once the paused run has ended, when it exists.
        uri = self.checkpoint_at.get(source, {}).get(at) if at is not None else None
        uri = uri or chosen or self.checkpoints.get(source, ("", 0))[0]
        iteration = self.checkpoint_iteration.get(uri, 0) if uri else 0
        trial.resume_from_checkpoint, trial.iteration_offset = uri, iteration
        assert self.sched is not None
        if source == trial.index:
            what = f"paused by {self.sched.display_name}"
        else:
            what = f"exploits trial {source} ({self.sched.display_name})"
        at = f"its checkpoint at training_iteration {iteration}" if uri else "the start (no checkpoint)"
        trial.state, trial.state_reason = common_pb2.PENDING, f"{what}; goes on from {at}"
        if config is not None and not isinstance(config, dict):  # explored in the actor: a reference
            self.resolving.add(trial.index)
            self._spawn(self._resolve_config(trial, config))
        elif config is not None:
            self._set_trial_config(trial, config)
        self.wake.set()
        self._save_soon()

    async def _resolve_config(self, trial: tune_pb2.Trial, ref: Any) -> None:
        try:
            config = await RemoteExplorer.answer(ref)
        except TrainwireError as exc:
            await self.fail(exc.message, exc.field)
            return
        finally:
            self.resolving.discard(trial.index)
        self.sched_trials[trial.index].config = config
        self._set_trial_config(trial, config)
        self.wake.set()
        await self.save()

    def _ask_stoppers(
        self, trial: tune_pb2.Trial, reported: dict[str, Any], metrics: dict[str, Any], act: bool, report_index: int
    ) -> None:
        """A dict stop (here) and the user's stopper (its actor) decide on a result, as Ray's do."""
        iteration = metrics["training_iteration"]
        now_s = time.time()
        started = self.started_at.setdefault(trial.index, now_s)
        # Ray's auto-filled keys a stop may name (``{"time_total_s": 5}``); the loop's own values win.
        auto = {"timestamp": int(now_s), "time_total_s": now_s - started}
        if act and trial.index not in self.stops and stop_reached(self.stop_dict, {**auto, **metrics}):
            self._stop_trial(trial, f"reached run_config.stop at training_iteration {iteration}", report_index)
        if self.stopper is None:
            return
        result = {
            **auto,
            **reported,
            "training_iteration": iteration,
            "trial_id": trial.run_id,
            "config": self._trial_config(trial),
            "done": False,
        }
        # Submitted now, in report order; while replaying, only to rebuild the stopper's state.
        ref = self.stopper.decide(trial.run_id, result)
        if act:
            decision = self._act_on_stopper(trial, ref, iteration, report_index)
            self.deciding[trial.run_id] = asyncio.get_running_loop().create_task(decision)

    async def decided(self, run_id: str) -> None:
        """Waits for the stopper's decision on the trial run's latest result, if one is under way.

        The run's report path waits here (``StopperGate``), as Ray's trial waits for its controller:
        a trial the stopper stops ends at the result it decided on, not reports later.
        """
        task = self.deciding.pop(run_id, None)
        if task is not None:
            await asyncio.wait([task])  # shielded: the report path's end does not cancel the decision

    async def _act_on_stopper(self, trial: tune_pb2.Trial, ref: Any, iteration: Any, report_index: int) -> None:
        assert self.stopper is not None
        try:
            stop_trial, stop_everything = await self.stopper.answer(ref)
        except TrainwireError as exc:
            self._keep_until(trial, report_index)
            self._spawn(self.fail(exc.message, exc.field))
            return
        # What follows from the decision is spawned: the trial's report waits for the decision only,
        # not for runs to end (a cancel waits for its run's controller).
        if stop_trial and trial.index not in self.stops and trial.state not in TERMINAL:
            self._stop_trial(trial, f"stopped by the search's stopper at training_iteration {iteration}", report_index)
        if stop_everything and not self.ending:
            self._keep_until(trial, report_index)  # the trial whose result stopped the search ends at it
            self._spawn(self.stop_all("the search's stopper stopped the search (stop_all)"))

    def _stop_trial(self, trial: tune_pb2.Trial, reason: str, report_index: int | None = None) -> None:
        """Stops a trial as finished (Ray's TERMINATED): it ends SUCCEEDED with ``reason``.

        Decided on the run's result ``report_index``: the reports its loop made after that one are dropped.
        """
        self.stops[trial.index] = Stop(reason, early=False)
        if report_index is not None:
            self._keep_until(trial, report_index)
        if trial.run_id:
            self._spawn(self.runs.cancel(trial.run_id, reason))

    def _keep_until(self, trial: tune_pb2.Trial, report_index: int) -> None:
        controller = self.runs.controllers.get(trial.run_id) if trial.run_id else None
        if controller is not None:
            controller.keep_reports_until(report_index)

    def _trial_config(self, trial: tune_pb2.Trial) -> dict[str, Any]:
        config = merge_dicts(self.plan.space.constants, struct_to_dict(trial.config))
        return config.get("train_loop_config", {}) if self.tune.request.function_trainable else config

    def _trial_ended(self, trial: tune_pb2.Trial) -> None:
        st = self.sched_trials.get(trial.index)
        if self.sched is not None and st is not None and not st.is_finished():
            try:
                if trial.state == common_pb2.FAILED:
                    st.status = ERROR
                    self.sched.on_trial_error(self, st)
                else:
                    self.sched.on_trial_complete(self, st, st.last_result)
                    st.status = TERMINATED
            except Exception as exc:
                self._library_failed(library_error(self.sched.display_name, exc, SCHEDULER_FIELD, started=True), True)
            self.wake.set()  # a bracket may have been processed: paused trials may run now
        stop = self.stops.get(trial.index)
        if stop is not None and trial.state == common_pb2.CANCELLED:
            trial.state_reason = stop.reason
            trial.early_stopped = stop.early
            if not stop.early:  # stopped at max_t: it ran as far as it was meant to
                trial.state = common_pb2.SUCCEEDED
        self.tell_searcher(trial)
        self._update_best()
        if trial.state == common_pb2.FAILED and not self.ending and self._fails_fast():
            # Ray's fail_fast: the first trial error ends the search; the other trials stop where they are.
            reason = f"trial {trial.index} failed and the search fails fast (FailureConfig(fail_fast=True))"
            self._spawn(self.stop_all(reason))

    def _fails_fast(self) -> bool:
        return self.tune.request.trainer.run_config.failure_config.fail_fast

    def last_value(self, trial: tune_pb2.Trial) -> float | None:
        """The search metric in the trial's last result (None: none, or not a finite number)."""
        field = trial.last_result.fields.get(self.plan.metric) if self.plan.metric else None
        return _number(field.number_value) if field is not None and field.HasField("number_value") else None

    def tell_searcher(self, trial: tune_pb2.Trial) -> None:
        """Tells the search algorithm how an ended trial did (a failed one: no value)."""
        failed = trial.state == common_pb2.FAILED
        value = self.last_value(trial) if not failed else None
        # Only a multi-objective searcher reads the whole result (a conversion per ended trial otherwise spared).
        wants = bool(self.tune.request.tune_config.search_alg.metrics)
        result = struct_to_dict(trial.last_result) if wants and not failed else None
        try:
            self.plan.searcher.on_complete(
                trial.index, flatten(struct_to_dict(trial.config)), value, result=result, error=failed
            )
        except Exception as exc:  # called from the run's event stream: it must not raise into it
            error = library_error(self.plan.searcher.display_name, exc, SEARCHER_FIELD, started=True)
            self._library_failed(error, act=True)

    def _library_failed(self, error: TrainwireError, act: bool) -> None:
        """Fails the search for what a searcher or scheduler raised (not while replaying: logged only)."""
        logger.warning("search %s: %s", self.tune.tune_id, error.message)
        if act:
            self._spawn(self.fail(error.message, error.field))

    def _update_best(self) -> None:
        """The best trial by its last result, as ResultGrid.get_best_result's default scope."""
        if not self.plan.metric:
            return
        best, best_value = -1, None
        for trial in self.tune.trials:
            value = self.last_value(trial)
            if value is None:
                continue
            if best_value is None or (value > best_value if self.plan.mode == "max" else value < best_value):
                best, best_value = trial.index, value
        self.tune.best_trial = best

    async def _serve_best(self) -> None:
        """Names the best trial's run after the search: the predictor serves model <search name> from it."""
        if self.tune.best_trial < 0:
            return
        trial = self.tune.trials[self.tune.best_trial]
        if not trial.run_id:
            return
        run = await asyncio.to_thread(self.runs.get_run, trial.run_id)
        if not run.HasField("latest_checkpoint"):
            return
        store = await asyncio.to_thread(self.runs._run_store, run.request.run_config.storage_path)
        entry = {"run_id": run.run_id, "updated_at": time.time(), "tune_id": self.tune.tune_id}
        await asyncio.to_thread(store.write_json, store.name_path(self.tune.name), entry)

    # --- records -------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        asyncio.get_running_loop().create_task(coro)

    def _changed(self) -> None:
        self.version += 1

    def _save_soon(self) -> None:
        self._changed()
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.get_running_loop().create_task(self._save_later())

    async def _save_later(self) -> None:
        await asyncio.sleep(SAVE_EVERY_S)
        await self.save()

    async def save(self) -> None:
        """Records the search and wakes its watchers."""
        self._changed()
        self.tune.updated_at.CopyFrom(now())
        await self.manager.save(self.tune)
        async with self.changed:
            self.changed.notify_all()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _num(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else f"{value:g}"


def _resources(values: dict[str, float], only: dict[str, float] | None = None) -> str:
    keys = sorted(only or values)
    return ", ".join(f"{values.get(k, 0.0):g} {k}" for k in keys) or "nothing"
