"""The Batcher: runs inference off the event loop, batching concurrent requests where it may (see the package)."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from trainwire_predictor.batching.policy import DynamicBatching, batching_by_framework
from trainwire_predictor.batching.pressure import (
    GATHER_LOOP_BUSY,
    GATHER_WAIT_S,
    PEAK_WINDOW_NS,
    _Gather,
    _LoopLoad,
    _Peak,
)
from trainwire_predictor.batching.scoring import Batch, _concat, _rows, _signature, infer_sync, score
from trainwire_predictor.codec import select_outputs, to_batch
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, decode_inputs
from trainwire_predictor.models import LoadedModel
from trainwire_predictor.statistics import Recorder, Timing, now_ns

logger = logging.getLogger(__name__)


class _Item:
    __slots__ = ("request", "batch", "future", "timing")

    def __init__(self, request: InferenceRequest, batch: Batch, future: asyncio.Future, timing: Timing) -> None:
        self.request, self.batch, self.future, self.timing = request, batch, future, timing


class Batcher:
    """Runs inference off the event loop, batching concurrent requests where it may.

    Args:
        executor: The worker threads that run model compute.
        max_inflight: Model calls at once per model and input form.
        max_rows: Most rows in one batched call of a batch-invariant model.
        recorder: Told of every model call (an execution), for statistics and metrics.
        inline_budget_ns: Longest expected model call run on the event loop (0: none).
        batching: The dynamic batching policy of a model that is not batch invariant (None: one
            call per request); default: its framework's (``FRAMEWORK_BATCHING``).
    """

    def __init__(
        self,
        executor: Executor,
        max_inflight: int = 1,
        max_rows: int = 8192,
        recorder: Recorder | None = None,
        inline_budget_ns: int = 0,
        batching: Callable[[LoadedModel], DynamicBatching | None] = batching_by_framework,
    ) -> None:
        self.executor = executor
        # Model calls that may run at once: the executor's threads (what the config reports).
        self.threads = int(getattr(executor, "_max_workers", 1))
        self.recorder = recorder
        self.max_inflight = max(1, max_inflight)
        self.max_rows = max_rows
        self.inline_budget_ns = inline_budget_ns
        self._queues: dict[Any, collections.deque[_Item]] = collections.defaultdict(collections.deque)
        self._inflight: collections.Counter[Any] = collections.Counter()
        self.batching = batching
        # Keys batched under a DynamicBatching policy, and the timer that ends each one's wait.
        self._policies: dict[Any, DynamicBatching] = {}
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        # Keys under an adaptive policy: the rows each holds and its recent peak.
        self._peaks: dict[Any, _Peak] = {}
        # Keys scored inline: whether their calls wait for more requests, when the loop is busy.
        self._gathers: dict[Any, _Gather] = {}
        self._loop_load = _LoopLoad()

    async def infer(
        self, request: InferenceRequest, model: LoadedModel, timing: Timing | None = None
    ) -> InferenceResponse:
        """Scores one request; ``timing`` (when given) gets where its time went."""
        loop = asyncio.get_running_loop()
        timing = timing if timing is not None else Timing()
        policy = None if model.predictor.batch_invariant else self.batching(model)
        if not model.predictor.batch_invariant and (policy is None or policy.max_batch_size <= 1):
            timing.enqueued_ns = now_ns()
            return await loop.run_in_executor(self.executor, infer_sync, request, model, timing, self.recorder)
        # Decoding raw tensors is cheap (frombuffer); a bad request fails here, alone.
        t0 = now_ns()
        batch = to_batch(decode_inputs(request), model)
        timing.enqueued_ns = now_ns()
        timing.input_ns = timing.enqueued_ns - t0
        timing.rows = _rows(batch)
        key = (model.ref.key, _signature(batch))
        item = _Item(request, batch, loop.create_future(), timing)
        self._queues[key].append(item)
        if policy is not None:
            self._policies[key] = policy
            if policy.adaptive:
                self._peak(key).add(timing.rows, timing.enqueued_ns)
            self._schedule(key, model, policy)
        elif self._inflight[key] < self.max_inflight:
            if self._inline(model, timing.rows):
                # Held as in flight until the loop has run the rest of this iteration's requests.
                self._inflight[key] += 1
                loop.call_soon(self._launch_deferred, key, model, False)
            else:
                self._launch(key, model)
        return await item.future

    def _schedule(self, key: Any, model: LoadedModel, policy: DynamicBatching) -> None:
        """Starts a call on ``key``'s queue once it is full enough or its oldest request has waited enough."""
        queue = self._queues.get(key)
        if not queue or self._inflight[key] >= policy.instances:
            return  # a call in flight schedules the next when it ends
        rows = sum(_rows(item.batch) for item in queue)
        since_ns = queue[0].timing.enqueued_ns
        delay_ns = policy.max_queue_delay_us * 1000
        target = policy.max_batch_size
        if policy.adaptive:
            peak = self._peaks[key]
            # As many as were held at once lately, less those in calls now (they come back later).
            target = min(target, max(1, peak.peak - (peak.held - rows)))
            # The delay counts from when the model was free to take a call: requests that queued
            # behind a call wait for the others it answers, so callers split across two calls
            # (a slow turn of the machine) join again instead of staying split.
            since_ns = max(since_ns, peak.freed_ns)
        waited_ns = now_ns() - since_ns
        if rows >= target or rows in policy.preferred_batch_sizes or waited_ns >= delay_ns:
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self._launch(key, model)
        elif key not in self._timers:
            self._timers[key] = asyncio.get_running_loop().call_later(
                (delay_ns - waited_ns) / 1e9, self._timer_fired, key, model, policy
            )

    def _peak(self, key: Any) -> _Peak:
        peak = self._peaks.get(key)
        if peak is None:
            if len(self._peaks) >= 1024:  # forget idle input forms, which any caller can make up
                stale = now_ns() - 2 * PEAK_WINDOW_NS
                self._peaks = {k: p for k, p in self._peaks.items() if p.held or p.since_ns > stale}
            peak = self._peaks[key] = _Peak()
        return peak

    def _timer_fired(self, key: Any, model: LoadedModel, policy: DynamicBatching) -> None:
        self._timers.pop(key, None)
        self._schedule(key, model, policy)

    def _inline(self, model: LoadedModel, rows: int) -> bool:
        return model.ns_per_row is not None and rows * model.ns_per_row <= self.inline_budget_ns

    def _launch_deferred(self, key: Any, model: LoadedModel, waited: bool) -> None:
        """Runs a deferred inline call, unless it is worth waiting for more requests first.

        Args:
            waited: Whether this call has waited already.
        """
        queue = self._queues.get(key)
        if queue:
            gather = self._gathers.get(key)
            if gather is None:
                gather = self._gathers[key] = self._new_gather()
            if waited:
                gather.result(len(queue) > 1)
            elif (
                self._loop_load.update() >= GATHER_LOOP_BUSY
                and gather.should_wait()
                and self._inline(model, sum(_rows(item.batch) for item in queue) * 2)
            ):
                asyncio.get_running_loop().call_later(GATHER_WAIT_S, self._launch_deferred, key, model, True)
                return
            else:
                gather.went(len(queue))
        self._done_one(key)
        self._launch(key, model, inline=True)

    def _new_gather(self) -> _Gather:
        if len(self._gathers) >= 1024:  # input forms come from callers: start over rather than grow
            self._gathers.clear()
        return _Gather()

    def _done_one(self, key: Any) -> None:
        self._inflight[key] -= 1
        if self._inflight[key] <= 0:
            del self._inflight[key]

    def _launch(self, key: Any, model: LoadedModel, *, inline: bool = False) -> None:
        """Starts a model call on the items queued for ``key``.

        Args:
            key: The model and input form.
            model: The loaded model.
            inline: Run it on the loop if it is short enough (``inline_budget_ns``), idle or
                under load: for such a call, the hop to a thread and back (a wake-up each way,
                and the GIL passed between them) costs the loop more than the call itself.
        """
        queue = self._queues[key]
        policy = self._policies.get(key)
        limit = policy.max_batch_size if policy is not None else self.max_rows
        items, rows = [], 0
        while queue and (not items or rows + _rows(queue[0].batch) <= limit):
            item = queue.popleft()
            items.append(item)
            rows += _rows(item.batch)
        if not queue:
            del self._queues[key]
            self._policies.pop(key, None)
        if not items:
            return
        self._inflight[key] += 1
        if inline and self._inline(model, rows):
            self._settle(key, model, items, rows, self._score_timed(model, items, rows))
            return
        # One hop each way: the thread hands its results straight to the loop (run_in_executor's
        # futures would take two more loop turns before the callers' futures are set).
        loop = asyncio.get_running_loop()
        try:
            self.executor.submit(self._score_and_settle, loop, key, model, items, rows)
        except RuntimeError as exc:  # the executor is shut down
            self._settle(key, model, items, rows, [exc] * len(items))

    def _score_and_settle(
        self, loop: asyncio.AbstractEventLoop, key: Any, model: LoadedModel, items: list[_Item], rows: int
    ) -> None:
        """On a worker thread: scores the items, then settles them on the loop."""
        try:
            results = self._score_timed(model, items, rows)
        except BaseException as exc:  # noqa: BLE001 - answered to every caller of the call
            results = [exc] * len(items)
        try:
            loop.call_soon_threadsafe(self._settle, key, model, items, rows, results)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _score_timed(self, model: LoadedModel, items: list[_Item], rows: int) -> list[Any]:
        """Scores the items and updates the model's measured cost per row.

        The cost is the scoring thread's CPU time: on a worker thread the wall time would also
        count its waits for the GIL while the loop runs, and a model once measured slow there
        would never be scored on the loop again.
        """
        started = time.thread_time_ns()
        results = self._score_items(model, items, rows, self.recorder)
        per_row = (time.thread_time_ns() - started) / max(rows, 1)
        model.ns_per_row = per_row if model.ns_per_row is None else 0.8 * model.ns_per_row + 0.2 * per_row
        return results

    def _settle(self, key: Any, model: LoadedModel, items: list[_Item], rows: int, results: list[Any]) -> None:
        self._done_one(key)
        peak = self._peaks.get(key)
        if peak is not None:
            peak.held -= rows
            peak.freed_ns = now_ns()
        for item, result in zip(items, results):
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)
        queue = self._queues.get(key)
        if queue:
            policy = self._policies.get(key)
            if policy is not None:
                self._schedule(key, model, policy)
            elif self._inline(model, _rows(queue[0].batch)):
                # Under load too, a short call goes on the loop (at the end of this iteration, with
                # what it queues): a hop to a thread and back costs the loop more than such a call.
                self._inflight[key] += 1
                asyncio.get_running_loop().call_soon(self._launch_deferred, key, model, False)
            else:
                self._launch(key, model)

    @staticmethod
    def _score_items(
        model: LoadedModel, items: list[_Item], total: int, recorder: Recorder | None = None
    ) -> list[InferenceResponse | BaseException]:
        """One model call for all items (``total`` rows); if it fails, each alone, so only the bad one errs."""
        started = now_ns()
        for item in items:
            item.timing.queue_ns = started - item.timing.enqueued_ns
        if len(items) > 1:
            try:
                batch = _concat([i.batch for i in items])
                t0 = now_ns()
                out = model.predictor.predict_columns(batch)
                t1 = now_ns()
                if all(len(v) == total for v in out.values()):
                    results: list[InferenceResponse | BaseException] = []
                    start = 0
                    for item in items:
                        end = start + _rows(item.batch)
                        e0 = now_ns()
                        try:
                            part = {name: arr[start:end] for name, arr in out.items()}
                            results.append(select_outputs(item.request, model, part))
                        except Exception as exc:  # noqa: BLE001 - answered to its own caller
                            results.append(exc)
                        # Each batched request waited for the whole call, as in Triton's statistics.
                        item.timing.infer_ns, item.timing.output_ns = t1 - t0, now_ns() - e0
                        start = end
                    if recorder is not None:
                        input_ns = t0 - started + sum(i.timing.input_ns for i in items)
                        recorder.execution(model.ref, total, input_ns, t1 - t0, now_ns() - t1)
                    return results
            except Exception:  # noqa: BLE001, S110 - scored one by one below to find the culprit
                pass
        results = []
        for item in items:
            try:
                t0 = now_ns()
                part = score(item.request, model, item.batch)
                t1 = now_ns()
                results.append(select_outputs(item.request, model, part))
                t2 = now_ns()
                item.timing.infer_ns, item.timing.output_ns = t1 - t0, t2 - t1
                if recorder is not None:
                    recorder.execution(model.ref, _rows(item.batch), item.timing.input_ns, t1 - t0, t2 - t1)
            except Exception as exc:  # noqa: BLE001 - answered to its own caller
                results.append(exc)
        return results
