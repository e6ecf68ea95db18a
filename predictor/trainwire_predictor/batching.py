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

Any other model is batched only under a ``DynamicBatching`` policy (Triton's
``dynamic_batching``): a request waits up to ``max_queue_delay_us`` for others
of the same input form, and their rows go in one call of at most
``max_batch_size`` rows, at once when the queue reaches that or a preferred
batch size. Such a model's answer for a row may differ from its answer alone
in the last bits (other kernels for other batch shapes), which is why each
framework chooses (``FRAMEWORK_BATCHING``) and each model may choose again.
Whatever batches, answers are split back to their requests, and a call that
fails is retried request by request, so a bad row fails only its own request.

Each request's Timing gets its queue, input, infer and output times, and each
model call is reported to the recorder as one execution (the statistics and
metrics).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_predictor.codec import select_outputs, to_batch
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, decode_inputs
from trainwire_predictor.model_repository import LoadedModel
from trainwire_predictor.statistics import Recorder, Timing, now_ns

# Errors a model raises on input it cannot score (wrong width, bad values): the caller's fault.
SCORING_ERRORS = (ValueError, TypeError, KeyError, IndexError, RuntimeError)

Batch = dict[str, np.ndarray] | np.ndarray


@dataclass(frozen=True)
class DynamicBatching:
    """How requests for a model that is not batch invariant are batched (Triton's ``dynamic_batching``).

    Attributes:
        max_batch_size: Most rows in one model call.
        max_queue_delay_us: Longest a request waits for others before its call starts.
        preferred_batch_sizes: Row counts at which a call starts at once, without waiting out the delay.
        instances: Calls of the model at once (Triton's instance group count): the next batch forms
            while one is scored, and the calls share the cores.
    """

    max_batch_size: int = 64
    max_queue_delay_us: int = 500
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise InvalidArgumentError("max_batch_size must be at least 1", field="max_batch_size")
        if self.max_queue_delay_us < 0:
            raise InvalidArgumentError("max_queue_delay_us may not be negative", field="max_queue_delay_us")
        if self.instances < 1:
            raise InvalidArgumentError("instances must be at least 1", field="instances")
        if any(not 1 <= size <= self.max_batch_size for size in self.preferred_batch_sizes):
            raise InvalidArgumentError(
                f"preferred_batch_sizes must lie within 1..max_batch_size ({self.max_batch_size})",
                field="preferred_batch_sizes",
            )


# Each framework's default; tree models (batch invariant) batch while busy whatever this says, and
# a framework not named here is called once per request unless a model's own policy says otherwise.
# Not Transformers: its pipeline scores a list one text at a time, so a joined call costs as much
# as its requests one by one, run one after another instead of side by side on the threads.
FRAMEWORK_BATCHING: dict[str, DynamicBatching] = {
    "torch": DynamicBatching(max_batch_size=64, max_queue_delay_us=200, instances=2),
    "horovod": DynamicBatching(max_batch_size=64, max_queue_delay_us=200, instances=2),
    "tensorflow": DynamicBatching(max_batch_size=64, max_queue_delay_us=200, instances=2),
}


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
            self._schedule(key, model, policy)
        elif self._inflight[key] < self.max_inflight:
            if self._inline(model, timing.rows):
                # Held as in flight until the loop has run the rest of this iteration's requests.
                self._inflight[key] += 1
                loop.call_soon(self._launch_deferred, key, model)
            else:
                self._launch(key, model)
        return await item.future

    def _schedule(self, key: Any, model: LoadedModel, policy: DynamicBatching) -> None:
        """Starts a call on ``key``'s queue once it is full enough or its oldest request has waited enough."""
        queue = self._queues.get(key)
        if not queue or self._inflight[key] >= policy.instances:
            return  # a call in flight schedules the next when it ends
        rows = sum(_rows(item.batch) for item in queue)
        waited_ns = now_ns() - queue[0].timing.enqueued_ns
        delay_ns = policy.max_queue_delay_us * 1000
        if rows >= policy.max_batch_size or rows in policy.preferred_batch_sizes or waited_ns >= delay_ns:
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self._launch(key, model)
        elif key not in self._timers:
            self._timers[key] = asyncio.get_running_loop().call_later(
                (delay_ns - waited_ns) / 1e9, self._timer_fired, key, model, policy
            )

    def _timer_fired(self, key: Any, model: LoadedModel, policy: DynamicBatching) -> None:
        self._timers.pop(key, None)
        self._schedule(key, model, policy)

    def _inline(self, model: LoadedModel, rows: int) -> bool:
        return model.ns_per_row is not None and rows * model.ns_per_row <= self.inline_budget_ns

    def _launch_deferred(self, key: Any, model: LoadedModel) -> None:
        self._done_one(key)
        self._launch(key, model, inline=True)

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
            self._settle(key, model, items, self._score_timed(model, items, rows))
            return
        # One hop each way: the thread hands its results straight to the loop (run_in_executor's
        # futures would take two more loop turns before the callers' futures are set).
        loop = asyncio.get_running_loop()
        try:
            self.executor.submit(self._score_and_settle, loop, key, model, items, rows)
        except RuntimeError as exc:  # the executor is shut down
            self._settle(key, model, items, [exc] * len(items))

    def _score_and_settle(
        self, loop: asyncio.AbstractEventLoop, key: Any, model: LoadedModel, items: list[_Item], rows: int
    ) -> None:
        """On a worker thread: scores the items, then settles them on the loop."""
        try:
            results = self._score_timed(model, items, rows)
        except BaseException as exc:  # noqa: BLE001 - answered to every caller of the call
            results = [exc] * len(items)
        try:
            loop.call_soon_threadsafe(self._settle, key, model, items, results)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _score_timed(self, model: LoadedModel, items: list[_Item], rows: int) -> list[Any]:
        """Scores the items and updates the model's measured cost per row."""
        started = now_ns()
        results = self._score_items(model, items, rows, self.recorder)
        per_row = (now_ns() - started) / max(rows, 1)
        model.ns_per_row = per_row if model.ns_per_row is None else 0.8 * model.ns_per_row + 0.2 * per_row
        return results

    def _settle(self, key: Any, model: LoadedModel, items: list[_Item], results: list[Any]) -> None:
        self._done_one(key)
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
