"""The batcher: concurrent requests share one model call; a bad one fails alone."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from trainwire.predictor import Predictor
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference.codec import to_raw
from trainwire_predictor.batching import Batcher
from trainwire_predictor.grpc_codec import request_from_proto
from trainwire_predictor.inference import InferenceRequest
from trainwire_predictor.model_repository import LoadedModel, ModelRef, describe

pytestmark = pytest.mark.timeout(30)


class Doubler(Predictor):
    """Doubles column "a"; refuses negative values, like a model with a domain."""

    batch_invariant = True

    def __init__(self) -> None:
        super().__init__(None, ["a"])
        self.calls: list[int] = []

    def _predict_numpy(self, data: np.ndarray, **kwargs) -> np.ndarray:
        self.calls.append(len(data))
        if (data < 0).any():
            raise ValueError("negative input")
        return data[:, 0] * 2


def request(values: list[float], rid: str) -> InferenceRequest:
    arr = np.asarray(values, dtype=np.float64)
    req = pb.ModelInferRequest(model_name="doubler", id=rid)
    req.inputs.add(name="a", datatype="FP64", shape=arr.shape)
    req.raw_input_contents.append(to_raw(arr))
    return request_from_proto(req)


def test_concurrent_requests_share_calls_and_a_bad_one_fails_alone():
    predictor = Doubler()
    inputs, outputs = describe(predictor)
    predictor.calls.clear()
    model = LoadedModel(ModelRef("run", "doubler", "c1"), "fake", predictor, inputs, outputs)
    values = [[float(i), float(i) + 0.5] for i in range(20)]
    values[7] = [-1.0]

    async def go():
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, max_inflight=1)
            return await asyncio.gather(
                *(batcher.infer(request(v, str(i)), model) for i, v in enumerate(values)), return_exceptions=True
            )

    results = asyncio.run(go())
    for i, (v, result) in enumerate(zip(values, results)):
        if i == 7:
            assert isinstance(result, InvalidArgumentError) and "negative input" in str(result)
            continue
        assert result.id == str(i)
        np.testing.assert_array_equal(result.outputs[0][1], np.array(v) * 2)
    assert max(predictor.calls) > 2  # rows of several requests went in one call


class ThreadNoter(Doubler):
    """A Doubler that notes the thread of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def _predict_numpy(self, data: np.ndarray, **kwargs) -> np.ndarray:
        self.threads.append(threading.get_ident())
        return super()._predict_numpy(data, **kwargs)


@pytest.mark.parametrize("budget_ns", [10**9, 1])
def test_calls_measured_as_short_run_on_the_loop_and_batch_what_one_iteration_queued(budget_ns: int):
    predictor = ThreadNoter()
    inputs, outputs = describe(predictor)
    model = LoadedModel(ModelRef("run", "doubler", "c1"), "fake", predictor, inputs, outputs)
    predictor.calls.clear()
    predictor.threads.clear()
    values = [[float(i)] for i in range(12)]
    values[5] = [-1.0]

    async def go():
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, max_inflight=1, inline_budget_ns=budget_ns)
            first = await batcher.infer(request([1.0], "warm-up"), model)  # measured on a thread
            results = await asyncio.gather(
                *(batcher.infer(request(v, str(i)), model) for i, v in enumerate(values)), return_exceptions=True
            )
            return first, results, threading.get_ident()

    first, results, loop_thread = asyncio.run(go())
    assert first.id == "warm-up" and model.ns_per_row is not None
    assert predictor.threads[0] != loop_thread
    for i, (v, result) in enumerate(zip(values, results)):
        if i == 5:
            assert isinstance(result, InvalidArgumentError) and "negative input" in str(result)
        else:
            np.testing.assert_array_equal(result.outputs[0][1], np.array(v) * 2)
    if budget_ns > 1:
        # All 12 were queued in one loop iteration: one call (the bad row sends it one by one after).
        assert set(predictor.threads[1:]) == {loop_thread}
        assert predictor.calls[1] == 12
    else:
        assert loop_thread not in predictor.threads
