"""Scores concurrent requests for one model in one model call ("batch while busy").

A request that finds its model idle is scored at once, so a lone caller waits
for nothing; requests that arrive while the model is busy queue up and go
together in the next call. Only models whose answer for a row does not depend
on the other rows of the batch (``Predictor.batch_invariant``, e.g. tree
ensembles) are batched, so every answer equals the in-process one. Requests
batch only with requests of the same input form and dtypes.
"""

from __future__ import annotations

import asyncio
import collections
from concurrent.futures import Executor
from typing import Any

import numpy as np

from trainwire.errors import InvalidArgumentError, TrainwireError
from trainwire.inference import grpc_service_pb2 as pb
from trainwire_predictor.codec import decode_inputs, encode_response, to_batch
from trainwire_predictor.model_repository import LoadedModel

# Errors a model raises on input it cannot score (wrong width, bad values): the caller's fault.
SCORING_ERRORS = (ValueError, TypeError, KeyError, IndexError, RuntimeError)

Batch = dict[str, np.ndarray] | np.ndarray


def score(request: pb.ModelInferRequest, model: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
    """Runs the model's Predictor on one decoded batch; input it cannot score is INVALID_ARGUMENT."""
    try:
        return model.predictor.predict_columns(batch)
    except TrainwireError:
        raise
    except SCORING_ERRORS as exc:
        raise InvalidArgumentError(
            f"model {request.model_name!r} cannot score this input: {type(exc).__name__}: {exc}", field="inputs"
        ) from exc


def infer_sync(request: pb.ModelInferRequest, model: LoadedModel) -> pb.ModelInferResponse:
    """Decodes, scores and encodes one request (on a worker thread)."""
    arrays, raw = decode_inputs(request)
    return encode_response(request, model, score(request, model, to_batch(arrays, model)), raw)


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
    __slots__ = ("request", "batch", "raw", "future")

    def __init__(self, request: pb.ModelInferRequest, batch: Batch, raw: bool, future: asyncio.Future) -> None:
        self.request, self.batch, self.raw, self.future = request, batch, raw, future


class Batcher:
    """Runs inference off the event loop, batching concurrent requests of batch-invariant models.

    Args:
        executor: The worker threads that run model compute.
        max_inflight: Model calls at once per model and input form.
        max_rows: Most rows in one batched call.
    """

    def __init__(self, executor: Executor, max_inflight: int = 1, max_rows: int = 8192) -> None:
        self.executor = executor
        self.max_inflight = max(1, max_inflight)
        self.max_rows = max_rows
        self._queues: dict[Any, collections.deque[_Item]] = collections.defaultdict(collections.deque)
        self._inflight: collections.Counter[Any] = collections.Counter()

    async def infer(self, request: pb.ModelInferRequest, model: LoadedModel) -> pb.ModelInferResponse:
        loop = asyncio.get_running_loop()
        if not model.predictor.batch_invariant:
            return await loop.run_in_executor(self.executor, infer_sync, request, model)
        # Decoding raw tensors is cheap (frombuffer); a bad request fails here, alone.
        arrays, raw = decode_inputs(request)
        batch = to_batch(arrays, model)
        key = (model.ref.key, _signature(batch))
        item = _Item(request, batch, raw, loop.create_future())
        self._queues[key].append(item)
        if self._inflight[key] < self.max_inflight:
            self._launch(key, model)
        return await item.future

    def _launch(self, key: Any, model: LoadedModel) -> None:
        queue = self._queues[key]
        items, rows = [], 0
        while queue and (not items or rows + _rows(queue[0].batch) <= self.max_rows):
            item = queue.popleft()
            items.append(item)
            rows += _rows(item.batch)
        if not queue:
            del self._queues[key]
        if not items:
            return
        self._inflight[key] += 1
        task = asyncio.get_running_loop().run_in_executor(self.executor, self._score_items, model, items)
        task.add_done_callback(lambda done: self._finished(key, model, items, done))

    def _finished(self, key: Any, model: LoadedModel, items: list[_Item], done: asyncio.Future) -> None:
        self._inflight[key] -= 1
        if self._inflight[key] <= 0:
            del self._inflight[key]
        exc = done.exception() if not done.cancelled() else asyncio.CancelledError()
        results = done.result() if exc is None else [exc] * len(items)
        for item, result in zip(items, results):
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)
        if key in self._queues:
            self._launch(key, model)

    @staticmethod
    def _score_items(model: LoadedModel, items: list[_Item]) -> list[pb.ModelInferResponse | BaseException]:
        """One model call for all items; if it fails, each alone, so only the bad one errs."""
        if len(items) > 1:
            try:
                out = model.predictor.predict_columns(_concat([i.batch for i in items]))
                total = sum(_rows(i.batch) for i in items)
                if all(len(v) == total for v in out.values()):
                    results: list[pb.ModelInferResponse | BaseException] = []
                    start = 0
                    for item in items:
                        end = start + _rows(item.batch)
                        try:
                            part = {name: arr[start:end] for name, arr in out.items()}
                            results.append(encode_response(item.request, model, part, item.raw))
                        except Exception as exc:  # noqa: BLE001 - answered to its own caller
                            results.append(exc)
                        start = end
                    return results
            except Exception:  # noqa: BLE001, S110 - scored one by one below to find the culprit
                pass
        results = []
        for item in items:
            try:
                part = score(item.request, model, item.batch)
                results.append(encode_response(item.request, model, part, item.raw))
            except Exception as exc:  # noqa: BLE001 - answered to its own caller
                results.append(exc)
        return results
