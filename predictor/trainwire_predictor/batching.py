"""Scores concurrent requests for one model in one model call ("batch while busy").

A request that finds its model idle is scored at once, so a lone caller waits
for nothing; requests that arrive while the model is busy queue up and go
together in the next call. Only models whose answer for a row does not depend
on the other rows of the batch (``Predictor.batch_invariant``, e.g. tree
ensembles) are batched, so every answer equals the in-process one. Requests
batch only with requests of the same input form and dtypes.

Requests that find the model idle, where its call is measured to take at
most ``inline_budget_ns`` for their rows (a compiled tree model on a few small
requests), are scored on the event loop at the end of the loop iteration that
queued them, together: for a call that short, handing it to a thread and back
costs more than the call. Under load the threads score, beside the loop.

A busy gRPC server hands its requests to the data plane about one at a time
(each handler runs to its await before the next one starts), so an inline call
rarely finds company in its own loop turn. When the event loop itself is what
limits (its thread wanting a core at least ``GATHER_LOOP_BUSY`` of the last window), an
inline call waits ``GATHER_WAIT_S`` for the requests coming in behind it: a call
for several requests costs the loop far less than a call each, and the wait is
shorter than the queue it drains. A loop with time to spare never holds a call,
so a lone caller waits for nothing; and a model whose waits bring no company
(``_Gather``) stops waiting, trying again every ``GATHER_PROBE_EVERY`` calls.

Any other model is batched only under a ``DynamicBatching`` policy (Triton's
``dynamic_batching``): a request waits up to ``max_queue_delay_us`` for others
of the same input form, and their rows go in one call of at most
``max_batch_size`` rows, at once when the queue reaches that or a preferred
batch size. An ``adaptive`` policy also starts a call as soon as its queue holds as
many rows as the model has held at once lately (queued and in calls, within the last
second or two): a closed loop of N callers gathers its N rows without waiting out
the delay, and a lone caller is scored at once. Its delay counts from when the model
was last free, so callers that a slow call split into two groups join again. Such a
model's answer for a row may differ from its answer alone in the last bits (other
kernels for other batch shapes), which is why each framework chooses
(``FRAMEWORK_BATCHING``) and each model may choose again. A model that is batched is
prepared for multi-row calls when it loads (``prepare_batched``).
Whatever batches, answers are split back to their requests, and a call that
fails is retried request by request, so a bad row fails only its own request.

Each request's Timing gets its queue, input, infer and output times, and each
model call is reported to the recorder as one execution (the statistics and
metrics).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_predictor.codec import select_outputs, to_batch
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, decode_inputs
from trainwire_predictor.models import LoadedModel
from trainwire_predictor.statistics import Recorder, Timing, now_ns

# Errors a model raises on input it cannot score (wrong width, bad values): the caller's fault.
SCORING_ERRORS = (ValueError, TypeError, KeyError, IndexError, RuntimeError)

Batch = dict[str, np.ndarray] | np.ndarray


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DynamicBatching:
    """How requests for a model that is not batch invariant are batched (Triton's ``dynamic_batching``).

    Attributes:
        max_batch_size: Most rows in one model call.
        max_queue_delay_us: Longest a request waits for others before its call starts.
        preferred_batch_sizes: Row counts at which a call starts at once, without waiting out the delay.
        instances: Calls of the model at once (Triton's instance group count): the next batch forms
            while one is scored, and the calls share the cores.
        adaptive: Start a call once the queue holds as many rows as the model has held at once
            lately (its recent peak, less the rows in calls), without waiting out the delay: the
            delay then bounds the wait only when fewer requests come than came before, and it
            counts from when the model was last free to take a call.
    """

    max_batch_size: int = 64
    max_queue_delay_us: int = 500
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1
    adaptive: bool = False

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise InvalidArgumentError("max_batch_size must be at least 1", field="max_batch_size")
        if self.max_queue_delay_us < 0:
            raise InvalidArgumentError("max_queue_delay_us may not be negative", field="max_queue_delay_us")
        if self.instances < 1:
            raise InvalidArgumentError("instances must be at least 1", field="instances")
        if not isinstance(self.adaptive, bool):
            raise InvalidArgumentError("adaptive must be true or false", field="adaptive")
        if any(not 1 <= size <= self.max_batch_size for size in self.preferred_batch_sizes):
            raise InvalidArgumentError(
                f"preferred_batch_sizes must lie within 1..max_batch_size ({self.max_batch_size})",
                field="preferred_batch_sizes",
            )


# Each framework's default; tree models (batch invariant) batch while busy whatever this says, and
# a framework not named here is called once per request unless a model's own policy says otherwise.
# Adaptive, one call at a time: a call's rows cost far less each than one-row calls side by side
# (a dense layer's weights are read once per call), so concurrent callers wait for one another,
# but only for as many as came at once lately, and at most 2 ms.
# Not Transformers: its pipeline scores a list one text at a time, so a joined call costs as much
# as its requests one by one, run one after another instead of side by side on the threads.
_DENSE = DynamicBatching(max_batch_size=64, max_queue_delay_us=2000, instances=1, adaptive=True)
FRAMEWORK_BATCHING: dict[str, DynamicBatching] = {"torch": _DENSE, "horovod": _DENSE, "tensorflow": _DENSE}

# Waiting for more requests to join an inline call: how long; how busy the event loop must be
# (the share of time its thread wanted a core, measured over windows of LOOP_WINDOW_NS); the waits in a row that
# bring no company before a model stops waiting, and how often it then tries again.
GATHER_WAIT_S = 0.001  # uvloop's timers count whole milliseconds
GATHER_LOOP_BUSY = 0.75
GATHER_MISSES = 3
GATHER_PROBE_EVERY = 64
# Calls that find this many requests on average without waiting do not wait; every so many calls
# go without waiting, to keep that average current.
GATHER_NATURAL = 1.5
GATHER_SAMPLE_EVERY = 16
LOOP_WINDOW_NS = 50_000_000


class _LoopLoad:
    """How busy the event loop thread is: the share of the last window it wanted a core.

    On Linux that is the time it ran plus the time it waited in the run queue (the thread's
    ``schedstat``), so a loop on a machine short of cores still counts as busy; elsewhere its
    CPU time alone.
    """

    __slots__ = ("since_ns", "used_ns", "busy")

    def __init__(self) -> None:
        self.since_ns, self.used_ns, self.busy = time.perf_counter_ns(), self._used_ns(), 0.0

    @staticmethod
    def _used_ns() -> int:
        try:
            with open("/proc/thread-self/schedstat", "rb") as f:
                ran, waited = f.read().split()[:2]
            return int(ran) + int(waited)
        except (OSError, ValueError):
            return time.thread_time_ns()

    def update(self) -> float:
        """The last window's share of time the loop wanted a core (called on the loop thread)."""
        now = time.perf_counter_ns()
        if now - self.since_ns >= LOOP_WINDOW_NS:
            used = self._used_ns()
            self.busy = (used - self.used_ns) / (now - self.since_ns)
            self.since_ns, self.used_ns = now, used
        return self.busy


class _Gather:
    """Whether waiting for more requests would pay for one model's inline calls.

    It would not where calls already find company without waiting (a REST front end reads
    several connections' requests in one loop turn), nor where waits bring none.
    """

    __slots__ = ("misses", "calls", "natural")

    def __init__(self) -> None:
        self.misses = 0
        self.calls = 0
        self.natural = 1.0  # requests per call of the calls that did not wait (a moving average)

    def should_wait(self) -> bool:
        """Called once per inline call of a busy loop; every ``GATHER_SAMPLE_EVERY``-th call goes as it is."""
        self.calls += 1
        if self.calls % GATHER_SAMPLE_EVERY == 0 or self.natural >= GATHER_NATURAL:
            return False
        # (a probe is never a sample call: GATHER_PROBE_EVERY is a multiple of GATHER_SAMPLE_EVERY)
        return self.misses < GATHER_MISSES or self.calls % GATHER_PROBE_EVERY == 1

    def went(self, requests: int) -> None:
        """A call that did not wait went with this many requests."""
        self.natural = 0.9 * self.natural + 0.1 * requests

    def result(self, company: bool) -> None:
        """After a wait: whether other requests joined the call."""
        self.misses = 0 if company else self.misses + 1


# How long a model's peak of rows held at once is remembered (two windows of this).
PEAK_WINDOW_NS = 1_000_000_000


class _Peak:
    """The most rows a model has held at once (queued and in calls) within the last one to two windows."""

    __slots__ = ("held", "current", "previous", "since_ns", "freed_ns")

    def __init__(self) -> None:
        self.held = 0
        self.current = self.previous = 0
        self.since_ns = 0
        self.freed_ns = 0  # when the last call ended

    def add(self, rows: int, now: int) -> None:
        self.held += rows
        if now - self.since_ns >= PEAK_WINDOW_NS:
            self.previous = self.current if now - self.since_ns < 2 * PEAK_WINDOW_NS else 0
            self.current, self.since_ns = 0, now
        self.current = max(self.current, self.held)

    @property
    def peak(self) -> int:
        return max(self.current, self.previous)


def batching_by_framework(model: LoadedModel) -> DynamicBatching | None:
    """The framework's default policy of a model (None: one call per request)."""
    return FRAMEWORK_BATCHING.get(model.framework)


def parse_batching(text: str) -> Callable[[LoadedModel], DynamicBatching | None]:
    """The policy lookup of the ``dynamic_batching`` setting.

    Args:
        text: A JSON object naming models (run names or ids) or frameworks, each mapped to
            ``{"max_batch_size": ..., "max_queue_delay_us": ..., "preferred_batch_sizes": [...]}``
            or to null (one call per request): ``{"torch": null, "my-bert": {"max_batch_size": 8}}``.
            A model's entry wins over its framework's, which wins over ``FRAMEWORK_BATCHING``.

    Raises:
        InvalidArgumentError: Not such an object (field ``dynamic_batching``).
    """
    import json

    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"dynamic_batching: not JSON ({exc})", field="dynamic_batching") from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError("dynamic_batching must be a JSON object", field="dynamic_batching")
    table: dict[str, DynamicBatching | None] = {}
    for name, entry in raw.items():
        if entry is None:
            table[name] = None
            continue
        if not isinstance(entry, dict):
            raise InvalidArgumentError(
                f"dynamic_batching[{name!r}] must be an object or null", field="dynamic_batching"
            )
        try:
            sizes = tuple(int(n) for n in entry.pop("preferred_batch_sizes", ()))
            table[name] = DynamicBatching(**entry, preferred_batch_sizes=sizes)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"dynamic_batching[{name!r}]: {exc}", field="dynamic_batching") from None

    def lookup(model: LoadedModel) -> DynamicBatching | None:
        for name in (model.ref.run_name, model.ref.run_id, model.framework):
            if name and name in table:
                return table[name]
        return FRAMEWORK_BATCHING.get(model.framework)

    return lookup


def prepare_batched(lookup: Callable[[LoadedModel], DynamicBatching | None]) -> Callable[[LoadedModel], None]:
    """What the model repository runs on each model it loads (in its loading thread).

    A model that ``lookup`` batches is readied for multi-row calls (``Predictor.prepare_for_batches``);
    a failure there is logged, and the model serves as it loaded.
    """

    def prepare(model: LoadedModel) -> None:
        if lookup(model) is None:
            return
        try:
            model.predictor.prepare_for_batches()
        except Exception:  # noqa: BLE001 - the model serves as loaded
            logger.warning("cannot prepare model %s for batched calls", model.ref.run_id, exc_info=True)

    return prepare


def score(request: InferenceRequest, model: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
    """Runs the model's Predictor on one decoded batch; input it cannot score is INVALID_ARGUMENT."""
    try:
        return model.predictor.predict_columns(batch)
    except TrainwireError:
        raise
    except SCORING_ERRORS as exc:
        raise InvalidArgumentError(
            f"model {request.model_name!r} cannot score this input: {type(exc).__name__}: {exc}", field="inputs"
        ) from exc


def infer_sync(
    request: InferenceRequest,
    model: LoadedModel,
    timing: Timing | None = None,
    recorder: Recorder | None = None,
) -> InferenceResponse:
    """Decodes, scores and picks the outputs of one request (on a worker thread)."""
    t0 = now_ns()
    batch = to_batch(decode_inputs(request), model)
    t1 = now_ns()
    out = score(request, model, batch)
    t2 = now_ns()
    response = select_outputs(request, model, out)
    t3 = now_ns()
    if timing is not None:
        timing.queue_ns = t0 - timing.enqueued_ns
        timing.input_ns, timing.infer_ns, timing.output_ns = t1 - t0, t2 - t1, t3 - t2
        timing.rows = _rows(batch)
    if recorder is not None:
        recorder.execution(model.ref, _rows(batch), t1 - t0, t2 - t1, t3 - t2)
    return response


def _signature(batch: Batch) -> tuple[Any, ...]:
    if isinstance(batch, dict):
        return ("columns", tuple((name, arr.dtype.str) for name, arr in batch.items()))
    return ("matrix", batch.dtype.str, batch.shape[1:])


def _rows(batch: Batch) -> int:
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def _concat(batches: list[Batch]) -> Batch:
    if isinstance(batches[0], dict):
        return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}  # type: ignore[index]
    return np.concatenate(batches)  # type: ignore[arg-type]


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
            inline: Run it on the loop if it is short enough. Only requests that found the
                model idle do: under load the loop is what limits, and a thread scores
                alongside it while the next requests queue up.
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
        if key in self._queues:
            policy = self._policies.get(key)
            if policy is not None:
                self._schedule(key, model, policy)
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
