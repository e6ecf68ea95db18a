"""Aliases and traffic policies on the predictor: resolution, weighted and sticky routing, shadow traffic.

Models are committed in process (no Fit) and scored by fake Predictors through the
real data plane, so ten thousand requests take a second or two.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import commit_checkpoint
from prometheus_client import CollectorRegistry, generate_latest

from trainwire.predictor import Predictor
from trainwire_coordinator.integrations.model_registry import ModelRegistry
from trainwire_core.errors import NotFoundError
from trainwire_core.storage import Store
from trainwire_core.store_documents import RouteWeight, TrafficPolicy
from trainwire_predictor import routing
from trainwire_predictor.batching import Batcher
from trainwire_predictor.dataplane import DataPlane
from trainwire_predictor.inference import InferenceRequest, InputTensor
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.routing import Router, Split

pytestmark = pytest.mark.timeout(60)


class Scaler(Predictor):
    """Multiplies column "a" by ``factor``; ``sleep_s`` or ``fail`` make a slow or broken shadow."""

    batch_invariant = True

    def __init__(self, factor: float, sleep_s: float = 0.0, fail: bool = False) -> None:
        super().__init__(None, ["a"])
        self.factor, self.sleep_s, self.fail = factor, sleep_s, fail

    def _predict_numpy(self, data: np.ndarray, **kwargs) -> np.ndarray:
        if data.any():  # the load's probe scores a zero row: answer it at once
            if self.sleep_s:
                time.sleep(self.sleep_s)
            if self.fail:
                raise RuntimeError("shadow model broke")
        return data[:, 0] * self.factor


# Version -> its model: v1 and v2 double; v3 agrees within float tolerance; slow and broken are shadows.
MODELS = {
    "v1": lambda: Scaler(2.0),
    "v2": lambda: Scaler(2.0),
    "v3": lambda: Scaler(2.0 + 1e-9),
    "v4": lambda: Scaler(3.0),
    "slow": lambda: Scaler(2.0, sleep_s=2.0),
    "broken": lambda: Scaler(2.0, fail=True),
}


def fake_loader(store, run_id, checkpoint_id):
    return "fake", MODELS[checkpoint_id]()


@pytest.fixture
def model_store(tmp_path) -> Store:
    """A store with run "run-m" named "m", one committed checkpoint per entry of MODELS."""
    store = Store(str(tmp_path / "store"))
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "model.bin").write_bytes(b"fake")
    manager = None
    for i, version in enumerate(MODELS, 1):
        manager = commit_checkpoint(store, "run-m", "m", version, str(src), i, manager=manager)
    return store


@pytest.fixture
def registry(model_store) -> ModelRegistry:
    return ModelRegistry(model_store)


def make_dataplane(store: Store, refresh_s: float = 0.2, **router_kwargs) -> tuple[DataPlane, ThreadPoolExecutor]:
    models = ModelRepository(store, index_refresh_s=refresh_s, loader=fake_loader)
    pool = ThreadPoolExecutor(2)
    return DataPlane(models, Batcher(pool), router=Router(models, **router_kwargs)), pool


def request(value: float = 1.0, version: str = "", key: str = "") -> InferenceRequest:
    tensor = InputTensor("a", "FP64", [1], np.asarray([value]).tobytes())
    return InferenceRequest("m", version, "", [tensor], routing_key=key)


def answer(response):
    return response.model_version, float(response.outputs[0][1][0])


async def infer_all(dp: DataPlane, requests: list[InferenceRequest], window: int = 64) -> list[tuple[str, float]]:
    out = []
    for i in range(0, len(requests), window):
        out += await asyncio.gather(*(dp.infer(r, answer) for r in requests[i : i + window]))
    return out


def test_an_alias_resolves_moves_within_the_refresh_interval_and_rolls_back(registry, model_store):
    registry.set_alias("m", "production", "v1")
    replicas = [ModelRepository(model_store, index_refresh_s=0.3, loader=fake_loader) for _ in range(2)]

    async def go():
        for repo in replicas:
            assert (await repo.resolve("m", "production")).checkpoint_id == "v1"
        registry.set_alias("m", "production", "v2")
        moved = time.monotonic()
        waits = []
        for repo in replicas:
            while (await repo.resolve("m", "production")).checkpoint_id != "v2":
                await asyncio.sleep(0.01)
            waits.append(time.monotonic() - moved)
        assert max(waits) < 0.3 + 0.2  # the refresh interval, and some slack for a loaded machine
        registry.set_alias("m", "production", "v1")  # a rollback is a move back
        await asyncio.sleep(0.35)
        assert {(await repo.resolve("m", "production")).checkpoint_id for repo in replicas} == {"v1"}

    asyncio.run(go())
    history = registry.get("m").state.history
    assert [(h.version, h.previous_version) for h in history] == [("v1", ""), ("v2", "v1"), ("v1", "v2")]


def test_a_response_names_the_version_an_alias_served_and_an_unknown_alias_is_not_found(registry, model_store):
    registry.set_alias("m", "production", "v4")
    dp, pool = make_dataplane(model_store)

    async def go():
        assert await dp.infer(request(1.0, "production"), answer) == ("v4", 3.0)
        with pytest.raises(NotFoundError, match="no alias 'canary'") as err:
            await dp.infer(request(1.0, "canary"), answer)
        assert err.value.field == "model_version"

    with pool:
        asyncio.run(go())


def test_a_90_10_split_over_10000_requests(registry, model_store):
    registry.set_alias("m", "stable", "v1")
    registry.set_route("m", [("stable", 90), ("v2", 10)])
    dp, pool = make_dataplane(model_store)

    async def go():
        started = time.perf_counter()
        served = await infer_all(dp, [request(float(i % 7 + 1)) for i in range(10_000)])
        seconds = time.perf_counter() - started
        # An explicit version or alias is served as asked, whatever the weights.
        explicit = await infer_all(dp, [request(1.0, "v4") for _ in range(50)] + [request(1.0, "stable")])
        return served, seconds, explicit

    with pool:
        served, seconds, explicit = asyncio.run(go())
    share = sum(v == "v1" for v, _ in served) / len(served)
    print(f"90/10 split: v1 served {share:.2%} of 10000 requests in {seconds:.2f} s")
    assert abs(share - 0.90) <= 0.03
    assert {v for v, _ in served} == {"v1", "v2"}
    assert explicit == [("v4", 3.0)] * 50 + [("v1", 2.0)]


def test_a_sticky_key_never_switches_version(registry, model_store):
    registry.set_route("m", [("v1", 50), ("v2", 30), ("v4", 20)])
    dp, pool = make_dataplane(model_store)
    keys = [f"user-{i}" for i in range(300)]

    async def go():
        seen: dict[str, set[str]] = {k: set() for k in keys}
        for _ in range(5):
            for (version, _), key in zip(await infer_all(dp, [request(key=k) for k in keys]), keys, strict=True):
                seen[key].add(version)
        return seen

    with pool:
        seen = asyncio.run(go())
    assert all(len(versions) == 1 for versions in seen.values())
    # The keys still spread over the weights.
    counts = {v: sum(s == {v} for s in seen.values()) for v in ("v1", "v2", "v4")}
    assert all(n > 20 for n in counts.values()), counts


def test_split_picks_by_key_hash_and_never_a_zero_weight():
    split = Split.of(TrafficPolicy(weights=(RouteWeight("a", 90), RouteWeight("z", 0), RouteWeight("b", 10))))
    picks = [split.pick(f"k{i}") for i in range(2000)]
    assert "z" not in picks and picks == [split.pick(f"k{i}") for i in range(2000)]
    assert 0.85 < picks.count("a") / len(picks) < 0.95


def p99(samples: list[float]) -> float:
    return float(np.percentile(samples, 99))


@pytest.mark.parametrize("shadow", ["slow", "broken"])
def test_a_slow_or_broken_shadow_changes_neither_the_answers_nor_their_p99(registry, model_store, shadow):
    registry.set_alias("m", "production", "v1")
    registry.set_route("m", [("production", 100)])
    registry_metrics = CollectorRegistry()
    dp, pool = make_dataplane(model_store, max_shadow_inflight=8, registry=registry_metrics)
    values = [float(i % 11 + 1) for i in range(600)]

    async def timed(reqs):
        latencies, answers = [], []
        for i in range(0, len(reqs), 4):

            async def one(r):
                started = time.perf_counter()
                result = await dp.infer(r, answer)
                latencies.append(time.perf_counter() - started)
                return result

            answers += await asyncio.gather(*(one(r) for r in reqs[i : i + 4]))
        return answers, latencies

    async def go():
        await infer_all(dp, [request(1.0)] * 20)  # load v1
        plain, plain_lat = await timed([request(v) for v in values])
        registry.set_route("m", [("production", 100)], shadow=shadow)
        await dp.models.registry("run-m", refresh=True)
        await dp.models.get("m", shadow)  # loaded ahead, as a shadow version is once it has had traffic
        shadowed, shadow_lat = await timed([request(v) for v in values])
        inflight = dp.router.shadow_inflight
        dp.router.close()
        return plain, plain_lat, shadowed, shadow_lat, inflight

    with pool:
        plain, plain_lat, shadowed, shadow_lat, inflight = asyncio.run(go())
    print(f"shadow {shadow}: p99 {p99(plain_lat) * 1e3:.2f} ms without, {p99(shadow_lat) * 1e3:.2f} ms with")
    assert shadowed == plain == [("v1", 2 * v) for v in values]
    assert p99(shadow_lat) < 2 * p99(plain_lat) + 0.005
    assert inflight <= 8
    counts = dp.router.counts
    if shadow == "broken":
        assert counts[("m", "v1", "broken", "error")] > 0
    else:
        assert counts[("m", "v1", "slow", "dropped")] > 0  # bounded: a 2 s shadow cannot pile up
    text = generate_latest(registry_metrics).decode()
    assert "trainwire_shadow_requests_total" in text


def test_a_shadow_that_keeps_failing_pauses_longer_each_time_and_resumes_once_answered(
    registry, model_store, monkeypatch
):
    monkeypatch.setattr(routing, "SHADOW_PAUSE_S", 0.4)
    registry.set_route("m", [("v1", 100)], shadow="broken")
    dp, pool = make_dataplane(model_store)
    counts = dp.router.counts

    def outcomes() -> tuple[int, int, int]:
        return tuple(counts[("m", "v1", "broken", outcome)] for outcome in ("error", "paused", "agree"))

    async def one_by_one(n: int) -> None:
        for i in range(n):
            assert await dp.infer(request(float(i + 1)), answer) == ("v1", 2.0 * (i + 1))
            await dp.router.drain()

    async def go() -> list[tuple[int, int, int]]:
        seen = []
        await one_by_one(8)  # five errors in a row, then paused
        seen.append(outcomes())
        await asyncio.sleep(0.45)
        await one_by_one(3)  # after 0.4 s one copy tries; it fails: paused for 0.8 s
        seen.append(outcomes())
        await asyncio.sleep(0.45)
        await one_by_one(1)  # still paused
        seen.append(outcomes())
        (await dp.models.get("m", "broken")).predictor.fail = False
        await asyncio.sleep(0.6)
        await one_by_one(3)  # the try is answered: the pause ends
        seen.append(outcomes())
        return seen

    with pool:
        seen = asyncio.run(go())
    assert seen == [(5, 3, 0), (6, 5, 0), (6, 6, 0), (6, 6, 3)]


def test_a_shadow_copy_is_compared_and_its_agreement_and_latency_recorded(registry, model_store):
    registry.set_route("m", [("v1", 100)], shadow="v3")  # v3 answers within float tolerance
    metrics = CollectorRegistry()
    dp, pool = make_dataplane(model_store, max_shadow_inflight=64, registry=metrics)

    async def go():
        served = await infer_all(dp, [request(float(i)) for i in range(1, 41)])
        await dp.router.drain()
        registry.set_route("m", [("v1", 100)], shadow="v4")  # v4 answers otherwise
        await dp.models.registry("run-m", refresh=True)
        await infer_all(dp, [request(float(i)) for i in range(1, 11)])
        await dp.router.drain()
        return served

    with pool:
        served = asyncio.run(go())
    assert served == [("v1", 2.0 * i) for i in range(1, 41)]
    assert dp.router.agreement("m", "v1", "v3") == 1.0
    assert dp.router.agreement("m", "v1", "v4") == 0.0
    text = generate_latest(metrics).decode()
    # Every copy timed: 40 to v3, 10 to v4.
    assert 'trainwire_shadow_duration_seconds_count{model="m",shadow_version="v3"} 40.0' in text
    assert 'trainwire_shadow_duration_seconds_count{model="m",shadow_version="v4"} 10.0' in text
    assert 'trainwire_shadow_agreement_ratio{model="m",shadow_version="v3",version="v1"} 1.0' in text
    assert "trainwire_shadow_duration_seconds_bucket" in text


def test_the_routing_key_comes_from_parameters_or_the_header_on_both_protocols():
    from trainwire_core.errors import InvalidArgumentError
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_predictor.grpc.codec import request_from_proto
    from trainwire_predictor.rest.codec import parse_infer_request

    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="a", datatype="FP64", shape=[1]).contents.fp64_contents.append(1.0)
    assert request_from_proto(message, "from-metadata").routing_key == "from-metadata"
    message.parameters["routing_key"].string_param = "user-7"
    assert request_from_proto(message, "from-metadata").routing_key == "user-7"
    message.parameters["routing_key"].int64_param = 42
    assert request_from_proto(message).routing_key == "42"

    body = b'{"inputs": [{"name": "a", "datatype": "FP64", "shape": [1], "data": [1.0]}]%s}'
    assert parse_infer_request(body % b"", None, "m", "", "from-header")[0].routing_key == "from-header"
    with_key = body % b', "parameters": {"routing_key": "user-7"}'
    assert parse_infer_request(with_key, None, "m", "", "from-header")[0].routing_key == "user-7"
    with pytest.raises(InvalidArgumentError) as err:
        parse_infer_request(body % b', "parameters": {"routing_key": [1]}', None, "m", "")
    assert err.value.field == "parameters.routing_key"


@pytest.fixture
def live_predictor(tmp_path, local_booster):
    """A predictor (gRPC and REST) on a store holding one booster as versions c1 and c2 of model "live"."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path / "live"))
    path = XGBoostCheckpoint.from_model(local_booster).path
    manager = commit_checkpoint(store, "run-live", "live", "c1", path, 1)
    commit_checkpoint(store, "run-live", "live", "c2", path, 2, manager=manager)
    thread = PredictorThread(
        PredictorSettings(port=0, http_port=0, store=store.uri, index_refresh_s=0.2, compile_tree_models=False)
    )
    thread.start()
    yield store, thread.server
    thread.stop()


def test_both_protocols_serve_aliases_and_sticky_routes(live_predictor, valid_x):
    import json
    import urllib.error
    import urllib.request

    import grpc

    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc

    store, server = live_predictor
    registry = ModelRegistry(store)
    row = valid_x.to_numpy(np.float64)[:1]

    def grpc_infer(version: str = "", key: str = "") -> str:
        message = pb.ModelInferRequest(model_name="live", model_version=version)
        message.inputs.add(name="input", datatype="FP64", shape=row.shape)
        message.raw_input_contents.append(row.tobytes())
        return stub.ModelInfer(message, metadata=[("routing-key", key)] if key else None).model_version

    def rest_infer(version: str = "", key: str = "") -> str:
        path = f"/v2/models/live/versions/{version}/infer" if version else "/v2/models/live/infer"
        body = {"inputs": [{"name": "input", "datatype": "FP64", "shape": list(row.shape), "data": row.tolist()}]}
        req = urllib.request.Request(f"http://{server.http_address}{path}", json.dumps(body).encode())
        if key:
            req.add_header("routing-key", key)
        with urllib.request.urlopen(req, timeout=10) as answer:
            return json.loads(answer.read())["model_version"]

    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        registry.set_alias("live", "production", "c1")
        assert grpc_infer("production") == rest_infer("production") == "c1"
        registry.set_alias("live", "production", "c2")
        time.sleep(0.3)  # the predictor's index refresh interval (0.2 s), and a little
        assert grpc_infer("production") == rest_infer("production") == "c2"
        with pytest.raises(grpc.RpcError) as err:
            grpc_infer("nope")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "'nope'" in err.value.details()
        with pytest.raises(urllib.error.HTTPError) as http_err:
            rest_infer("nope")
        assert http_err.value.code == 404

        registry.set_route("live", [("c1", 50), ("production", 50)])
        time.sleep(0.3)
        for key in ("user-1", "user-2", "user-3", "user-4"):
            # One key, one version, whichever protocol carries it.
            assert len({grpc_infer(key=key) for _ in range(5)} | {rest_infer(key=key) for _ in range(5)}) == 1
        assert {grpc_infer() for _ in range(40)} == {"c1", "c2"}


def test_the_request_path_without_reads_follows_moves_and_unloads_as_get_does(registry, model_store):
    registry.set_alias("m", "production", "v1")
    dp, pool = make_dataplane(model_store, refresh_s=0.2)
    repo = dp.models

    def served_now(version: str = "") -> str | None:
        target = dp.router.target_now(request(version=version))
        return None if target is None else target[2].ref.checkpoint_id

    async def go():
        # Nothing read yet: the request path says "await target" rather than guess.
        assert repo.resolution_now("m") is None and served_now("production") is None
        assert (await dp.infer(request(version="production"), answer))[0] == "v1"
        resolution = repo.resolution_now("m")
        assert resolution is not None and resolution.checkpoints["production"] == "v1"
        assert served_now("production") == "v1" and served_now("v1") == "v1"
        assert dp.router.target_now(request(version="production"))[2] is await repo.get("m", "production")
        assert served_now() is None  # the default version (the latest, "broken") is not loaded
        assert (await dp.router.target(request()))[:2] == (request(), "")  # no policy: served as asked
        registry.set_alias("m", "production", "v2")
        moved = time.monotonic()
        while (await dp.infer(request(version="production"), answer))[0] != "v2":
            await asyncio.sleep(0.01)
        assert time.monotonic() - moved < 0.2 + 0.2  # the refresh interval, and slack for a loaded machine
        await asyncio.sleep(0.25)
        assert repo.resolution_now("m") is None and served_now("production") is None  # stale: target reads
        assert (await dp.infer(request(version="production"), answer))[0] == "v2"
        assert served_now("production") == "v2"
        await repo.unload("m", "v2")
        assert served_now("production") is None  # unloaded: target loads it again
        assert (await dp.infer(request(version="production"), answer))[0] == "v2"
        assert repo.loads[("run-m", "v2")] == 2
        # A caller that only ever names checkpoint ids also reaches the path without reads.
        ids_only, ids_pool = make_dataplane(model_store, refresh_s=30)
        try:
            assert (await ids_only.infer(request(version="v1"), answer))[0] == "v1"
            target = ids_only.router.target_now(request(version="v1"))
            assert target is not None and target[2].ref.checkpoint_id == "v1"
        finally:
            ids_pool.shutdown()

    try:
        asyncio.run(go())
    finally:
        pool.shutdown()


@contextlib.contextmanager
def room_entries(watched: dict[str, str]) -> Iterator[dict[str, int]]:
    """Counts the entries into each watched module (file -> room) while the block runs.

    An entry is a call into a watched module from code outside it; a coroutine resumed after
    an await is the same entry, not a new one.
    """
    entries = dict.fromkeys(watched.values(), 0)
    seen: list = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in watched and not any(f is frame for f in seen):
            caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
            if caller != frame.f_code.co_filename:
                entries[watched[frame.f_code.co_filename]] += 1
                seen.append(frame)

    sys.setprofile(profile)
    try:
        yield entries
    finally:
        sys.setprofile(None)


def test_one_model_infer_enters_each_room_once(tmp_path, local_booster, valid_x):
    """The request path (front end, data plane, router, repository) resolves (model, version, policy)
    once per refresh: no room entered twice, on gRPC and REST alike."""
    import grpc
    import httpx

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
    from trainwire_predictor import dataplane, model_repository
    from trainwire_predictor.grpc import servicer
    from trainwire_predictor.rest import endpoints
    from trainwire_predictor.server import PredictorServer
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path / "walk"))
    path = XGBoostCheckpoint.from_model(local_booster).path
    manager = commit_checkpoint(store, "run-walk", "walk", "c1", path, 1)
    commit_checkpoint(store, "run-walk", "walk", "c2", path, 2, manager=manager)
    registry = ModelRegistry(store)
    registry.set_alias("walk", "production", "c2")
    registry.set_route("walk", [("c1", 50), ("production", 50)])
    row = valid_x.to_numpy(np.float64)[:1]
    watched = {
        servicer.__file__: "front end",
        endpoints.__file__: "front end",
        dataplane.__file__: "dataplane",
        routing.__file__: "routing",
        model_repository.__file__: "model_repository",
    }

    def message(version: str) -> pb.ModelInferRequest:
        request = pb.ModelInferRequest(model_name="walk", model_version=version)
        request.inputs.add(name="input", datatype="FP64", shape=row.shape)
        request.raw_input_contents.append(row.tobytes())
        return request

    body = {"inputs": [{"name": "input", "datatype": "FP64", "shape": list(row.shape), "data": row.tolist()}]}

    async def walk(call) -> tuple[dict[str, int], str]:
        with room_entries(watched) as entries:
            served = await call()
        return entries, served

    async def go() -> None:
        server = PredictorServer(
            PredictorSettings(port=0, http_port=0, store=store.uri, index_refresh_s=30, compile_tree_models=False)
        )
        await server.start()
        try:
            async with grpc.aio.insecure_channel(server.address) as channel, httpx.AsyncClient() as http:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)

                async def grpc_infer(version: str = "") -> str:
                    return (await stub.ModelInfer(message(version))).model_version

                async def rest_infer(version: str = "") -> str:
                    url = f"http://{server.http_address}/v2/models/walk{'/versions/' + version if version else ''}"
                    answer = await http.post(f"{url}/infer", json=body)
                    assert answer.status_code == 200, answer.text
                    return answer.json()["model_version"]

                # The first requests read the store and load both versions.
                assert {await grpc_infer() for _ in range(40)} == {"c1", "c2"}
                for call in (grpc_infer, rest_infer):
                    for version, served in (("", {"c1", "c2"}), ("production", {"c2"}), ("c1", {"c1"})):
                        entries, answer = await walk(functools.partial(call, version))
                        assert answer in served, (call.__name__, version, answer)
                        expected = {"front end": 1, "dataplane": 1, "routing": 1, "model_repository": 1}
                        assert entries == expected, (call.__name__, version, entries)
        finally:
            await server.stop(0.5)

    asyncio.run(go())


def test_one_openai_chat_enters_each_room_once(tmp_path):
    """A chat completion: OpenAI front end, its data plane, router and repository, each entered once."""
    import httpx
    from language_model import make_tokenizer, tiny_gpt2

    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_predictor import model_repository
    from trainwire_predictor.openai import dataplane, endpoints
    from trainwire_predictor.server import PredictorServer
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path / "walk-lm"))
    tokenizer = make_tokenizer()
    path = HuggingFaceCheckpoint.from_model(tiny_gpt2(tokenizer), tokenizer).path
    commit_checkpoint(store, "run-walk-lm", "walk-lm", "c1", path, 1)
    watched = {
        endpoints.__file__: "front end",
        dataplane.__file__: "dataplane",
        routing.__file__: "routing",
        model_repository.__file__: "model_repository",
    }
    body = {"model": "walk-lm", "messages": [{"role": "user", "content": "the cat"}], "max_tokens": 3}

    async def go() -> dict[str, int]:
        server = PredictorServer(PredictorSettings(port=0, http_port=0, store=store.uri, index_refresh_s=30))
        await server.start()
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                url = f"http://{server.http_address}/v1/chat/completions"
                assert (await http.post(url, json=body)).status_code == 200  # reads the store, loads the model
                with room_entries(watched) as entries:
                    answer = await http.post(url, json=body)
                assert answer.status_code == 200, answer.text
                assert answer.json()["choices"][0]["message"]["role"] == "assistant"
                return entries
        finally:
            await server.stop(0.5)

    assert asyncio.run(go()) == {"front end": 1, "dataplane": 1, "routing": 1, "model_repository": 1}
