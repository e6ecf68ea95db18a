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
from trainwire_predictor.batching import (
    FRAMEWORK_BATCHING,
    Batcher,
    DynamicBatching,
    parse_batching,
    prepare_batched,
)
from trainwire_predictor.batching.pressure import GATHER_LOOP_BUSY
from trainwire_predictor.grpc.codec import request_from_proto
from trainwire_predictor.inference import InferenceRequest
from trainwire_predictor.model_repository import describe
from trainwire_predictor.models import LoadedModel, ModelRef

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


def test_requests_queued_behind_a_call_on_a_thread_go_on_the_loop_once_the_call_is_measured_short():
    """Under load as when idle, a call within the inline budget runs on the loop: no hop to a thread and back."""
    predictor = ThreadNoter()
    inputs, outputs = describe(predictor)
    model = LoadedModel(ModelRef("run", "doubler", "c1"), "fake", predictor, inputs, outputs)
    predictor.calls.clear()
    predictor.threads.clear()

    async def go():
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, max_inflight=1, inline_budget_ns=10**9)
            # The first finds the model unmeasured (a thread); the others queue behind its call.
            results = await asyncio.gather(*(batcher.infer(request([float(i)], str(i)), model) for i in range(5)))
            return results, threading.get_ident()

    results, loop_thread = asyncio.run(go())
    assert [r.outputs[0][1].tolist() for r in results] == [[2.0 * i] for i in range(5)]
    assert predictor.threads[0] != loop_thread and predictor.calls[0] == 1
    assert predictor.threads[1:] == [loop_thread] and predictor.calls[1:] == [4]  # one call, on the loop


@pytest.mark.parametrize("busy", [True, False])
def test_a_busy_loop_holds_an_inline_call_for_requests_arriving_turns_later_an_idle_one_does_not(busy: bool):
    import time

    predictor = Doubler()
    inputs, outputs = describe(predictor)
    model = LoadedModel(ModelRef("run", "doubler", "c1"), "fake", predictor, inputs, outputs)

    async def staggered(batcher: Batcher, turns: int, rid: str):
        for _ in range(turns):  # reach the batcher this many loop turns after the first request
            await asyncio.sleep(0)
        return await batcher.infer(request([float(turns)], rid), model)

    async def go():
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, max_inflight=1, inline_budget_ns=10**9)
            await batcher.infer(request([1.0], "warm-up"), model)
            # Loop windows (50 ms) spent working, as under load, or waiting, as between lone callers
            # (working until the batcher sees it: on a loaded machine the thread may not get a core).
            started = time.perf_counter()
            while time.perf_counter() - started < 0.08 or (
                busy and batcher._loop_load.update() < GATHER_LOOP_BUSY and time.perf_counter() - started < 5
            ):
                if not busy:
                    await asyncio.sleep(0.01)
            predictor.calls.clear()
            return await asyncio.gather(*(staggered(batcher, turns, str(turns)) for turns in range(4)))

    results = asyncio.run(go())
    assert [r.outputs[0][1].tolist() for r in results] == [[2.0 * t] for t in range(4)]
    # Busy: the first call waited (1 ms) for the three that came in the next turns. Idle: each
    # request went in the loop turn after it came, as a lone caller's does.
    assert predictor.calls == ([4] if busy else [1, 1, 1, 1])


def test_a_model_whose_waits_bring_no_company_stops_waiting_and_tries_again_later():
    from trainwire_predictor.batching.pressure import GATHER_PROBE_EVERY, GATHER_PROBE_MAX, _Gather

    gather = _Gather()
    assert gather.should_wait()
    for _ in range(3):
        gather.result(False)
    decisions = [gather.should_wait() for _ in range(2 * GATHER_PROBE_EVERY)]
    assert 1 <= sum(decisions) <= 2  # one probe per GATHER_PROBE_EVERY calls
    # Each probe that brings no company doubles the calls to the next (a lone caller on a busy machine).
    gather.result(False)
    assert sum(gather.should_wait() for _ in range(4 * GATHER_PROBE_EVERY)) == 2
    for _ in range(20):
        gather.result(False)
    assert gather.probe_every == GATHER_PROBE_MAX
    gather.result(True)  # the probe found company: wait again
    assert sum(gather.should_wait() for _ in range(32)) >= 30  # all but the average's samples
    for _ in range(40):
        gather.went(4)  # calls that find company without waiting (a REST front end's)
    assert not any(gather.should_wait() for _ in range(2 * GATHER_PROBE_EVERY))


class Shaped(Doubler):
    """A Doubler that is not batch invariant (as a torch or Transformers model): batched only under a policy."""

    batch_invariant = False


def shaped_model() -> tuple[Shaped, LoadedModel]:
    predictor = Shaped()
    inputs, outputs = describe(predictor)
    predictor.calls.clear()
    return predictor, LoadedModel(ModelRef("run", "shaped", "c1"), "fake", predictor, inputs, outputs)


def typed_request(values: list[float], rid: str, dtype: str) -> InferenceRequest:
    arr = np.asarray(values, dtype=dtype)
    req = pb.ModelInferRequest(model_name="shaped", id=rid)
    req.inputs.add(name="a", datatype={"<f8": "FP64", "<f4": "FP32"}[dtype], shape=arr.shape)
    req.raw_input_contents.append(to_raw(arr))
    return request_from_proto(req)


def run_batched(model: LoadedModel, requests: list[InferenceRequest], policy: DynamicBatching | None) -> list:
    async def go():
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, batching=lambda m: policy)
            return await asyncio.gather(*(batcher.infer(r, model) for r in requests), return_exceptions=True)

    return asyncio.run(go())


def test_dynamic_batching_joins_only_like_inputs_splits_answers_and_a_bad_row_fails_alone():
    predictor, model = shaped_model()
    values = [[float(i), i + 0.5] for i in range(10)]
    values[3] = [1.0, -1.0]
    requests = [typed_request(v, str(i), "<f8") for i, v in enumerate(values)]
    requests += [typed_request([7.0], "f32-a", "<f4"), typed_request([8.0, 9.0], "f32-b", "<f4")]
    results = run_batched(model, requests, DynamicBatching(max_batch_size=64, max_queue_delay_us=50_000))
    for i, (v, result) in enumerate(zip(values, results)):
        if i == 3:
            assert isinstance(result, InvalidArgumentError) and "negative input" in str(result)
        else:
            assert result.id == str(i)
            np.testing.assert_array_equal(result.outputs[0][1], np.array(v) * 2)
    assert [r.outputs[0][1].tolist() for r in results[10:]] == [[14.0], [16.0, 18.0]]
    # One call for the 20 FP64 rows (it failed on the bad row), one for the 3 FP32 rows, then
    # the FP64 requests one by one to find the culprit.
    assert sorted(predictor.calls) == sorted([20, 3] + [2] * 10)


def test_a_full_or_preferred_batch_starts_at_once_and_a_lone_request_waits_out_the_delay():
    import time

    for policy, count in [
        (DynamicBatching(max_batch_size=4, max_queue_delay_us=2_000_000), 4),
        (DynamicBatching(max_batch_size=8, max_queue_delay_us=2_000_000, preferred_batch_sizes=(3,)), 3),
    ]:
        predictor, model = shaped_model()
        started = time.perf_counter()
        results = run_batched(model, [typed_request([1.0], str(i), "<f8") for i in range(count)], policy)
        assert time.perf_counter() - started < 1.0 and predictor.calls == [count]
        assert all(r.outputs[0][1].tolist() == [2.0] for r in results)
    predictor, model = shaped_model()
    started = time.perf_counter()
    run_batched(model, [typed_request([1.0], "lone", "<f8")], DynamicBatching(max_queue_delay_us=200_000))
    assert 0.2 <= time.perf_counter() - started < 1.5 and predictor.calls == [1]


def test_an_adaptive_policy_gathers_a_closed_loop_of_callers_and_never_holds_a_lone_one():
    import time

    policy = DynamicBatching(max_batch_size=64, max_queue_delay_us=5_000_000, adaptive=True)
    predictor, model = shaped_model()
    started = time.perf_counter()
    assert run_batched(model, [typed_request([1.0], "lone", "<f8")], policy)[0].outputs[0][1].tolist() == [2.0]
    # Nothing came before it: scored at once, not after the 5 s delay.
    assert time.perf_counter() - started < 1.0 and predictor.calls == [1]

    predictor, model = shaped_model()

    async def callers() -> list[list[float]]:
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, batching=lambda m: policy)

            async def caller(k: int) -> list[float]:
                answers = []
                for i in range(7 if k == 0 else 6):
                    response = await batcher.infer(typed_request([float(10 * k + i)], f"{k}-{i}", "<f8"), model)
                    answers.append(response.outputs[0][1].tolist()[0])
                return answers

            return await asyncio.gather(*(caller(k) for k in range(4)))

    started = time.perf_counter()
    answers = asyncio.run(callers())
    assert answers == [[2.0 * (10 * k + i) for i in range(7 if k == 0 else 6)] for k in range(4)]
    # The first caller finds the model idle and goes alone; the other three wait for its next
    # request (four were held at once), and from then on every call gathers all four callers
    # as soon as they come, never waiting out the delay.
    assert predictor.calls == [1] + [4] * 6
    assert time.perf_counter() - started < 3.0
    with pytest.raises(InvalidArgumentError, match="adaptive"):
        parse_batching('{"torch": {"adaptive": "yes"}}')


def test_an_adaptive_policy_joins_callers_again_that_a_busy_call_split():
    class Slow(Shaped):
        def _predict_numpy(self, data: np.ndarray, **kwargs) -> np.ndarray:
            import time

            time.sleep(0.1)
            return super()._predict_numpy(data, **kwargs)

    predictor = Slow()
    inputs, outputs = describe(predictor)
    predictor.calls.clear()  # describe's probe
    model = LoadedModel(ModelRef("run-slow", "slow", "c1"), "fake", predictor, inputs, outputs)
    policy = DynamicBatching(max_batch_size=64, max_queue_delay_us=50_000, adaptive=True)

    async def callers() -> list[list[float]]:
        with ThreadPoolExecutor(2) as pool:
            batcher = Batcher(pool, batching=lambda m: policy)

            async def caller(k: int) -> list[float]:
                answers = []
                for i in range(4):
                    response = await batcher.infer(typed_request([float(10 * k + i)], f"{k}-{i}", "<f8"), model)
                    answers.append(response.outputs[0][1].tolist()[0])
                return answers

            return await asyncio.gather(*(caller(k) for k in range(4)))

    answers = asyncio.run(callers())
    assert answers == [[2.0 * (10 * k + i) for i in range(4)] for k in range(4)]
    # The first caller goes alone; the three queued behind its 100 ms call have waited longer
    # than the 50 ms delay, but the delay counts from when the model is free: they wait for the
    # first caller's next request, and all four go together from then on (counted from their
    # arrival, the calls would go 1, 3, 1, 3, ...).
    assert predictor.calls[:4] == [1, 4, 4, 4]


def test_without_a_policy_each_request_is_its_own_call():
    predictor, model = shaped_model()
    results = run_batched(model, [typed_request([float(i)], str(i), "<f8") for i in range(6)], None)
    assert [r.outputs[0][1].tolist() for r in results] == [[2.0 * i] for i in range(6)]
    assert predictor.calls == [1] * 6


def test_only_a_model_that_is_batched_is_prepared_for_batches_and_a_failure_leaves_it_serving():
    class Recording(Shaped):
        def __init__(self, fail: bool = False) -> None:
            super().__init__()
            self.prepared, self.fail = 0, fail

        def prepare_for_batches(self) -> None:
            self.prepared += 1
            if self.fail:
                raise RuntimeError("cannot lay out")

    prepare = prepare_batched(parse_batching('{"tensorflow": null}'))
    models = {
        framework: LoadedModel(ModelRef(f"run-{framework}", framework, "c1"), framework, Recording(), [], [])
        for framework in ("torch", "tensorflow", "xgboost")
    }
    for model in models.values():
        prepare(model)
    assert {name: model.predictor.prepared for name, model in models.items()} == {
        "torch": 1,
        "tensorflow": 0,
        "xgboost": 0,
    }
    prepare(LoadedModel(ModelRef("run-t2", "t2", "c1"), "torch", Recording(fail=True), [], []))  # logged, no raise


def test_a_models_policy_beats_its_frameworks_which_beats_the_default():
    lookup = parse_batching('{"torch": null, "special": {"max_batch_size": 8, "preferred_batch_sizes": [4]}}')

    def model(name: str, framework: str) -> LoadedModel:
        return LoadedModel(ModelRef(f"run-{name}", name, "c1"), framework, Shaped(), [], [])

    assert lookup(model("special", "torch")) == DynamicBatching(max_batch_size=8, preferred_batch_sizes=(4,))
    assert lookup(model("plain", "torch")) is None
    assert lookup(model("mlp", "tensorflow")) == FRAMEWORK_BATCHING["tensorflow"]
    assert lookup(model("bert", "huggingface")) is None
    assert lookup(model("forest", "xgboost")) is None
    for bad, says in [("[1]", "JSON object"), ('{"m": {"max_batch_size": 0}}', "at least 1"), ("{", "not JSON")]:
        with pytest.raises(InvalidArgumentError, match=says):
            parse_batching(bad)
