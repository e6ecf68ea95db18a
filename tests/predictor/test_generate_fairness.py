"""Fair shares of the decode engine: slots and the waiting queue by weighted fair queueing over tenants.

Counts, not times: the test holds the engine's lock while it queues (the engine cannot admit
anything meanwhile), so every admission decision is made with the whole burst in view, and the
order in which tenants were admitted (``GenerationEngine.admitted``) is the engine's own.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from trainwire_core.auth import ANYONE, Caller, TokenTable, current_caller, parse_tokens
from trainwire_core.errors import InvalidArgumentError, ResourceExhaustedError

pytestmark = pytest.mark.timeout(120)


class _Tokenizer:
    eos_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def model() -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    lm = GPT2LMHeadModel(config).eval()
    lm.generation_config.eos_token_id = None  # every generation runs its max_tokens: counts are exact
    return lm


def _run(engine: Any, burst: list[tuple[str, float]], max_tokens: int = 3) -> list[list[int]]:
    """Queues ``burst`` ((tenant, weight) per request, in order) at once, then reads every answer."""
    from trainwire_predictor.generative.engine import SamplingParams

    async def go() -> list[list[int]]:
        with engine._wake:  # the engine admits nothing until the whole burst is queued
            generations = [
                engine.submit([1, 2, 3, i % 50 + 4], SamplingParams(max_tokens=max_tokens), tenant, weight)
                for i, (tenant, weight) in enumerate(burst)
            ]
        return [[e.token_id async for e in g if e.token_id is not None] for g in generations]

    return asyncio.run(go())


def test_a_burst_from_one_tenant_leaves_the_other_its_share(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine

    engine = GenerationEngine(model, _Tokenizer(), max_batch=2, threads=1)
    try:
        answers = _run(engine, [("alice", 1.0)] * 20 + [("bob", 1.0)] * 4)
        assert all(len(a) == 3 for a in answers)
        order = list(engine.admitted)
        assert len(order) == 24
        # First come, first served would admit all 20 of alice's first; bob's first request joins
        # before alice's third, and while both wait the slots alternate.
        assert order.index("bob") < [i for i, t in enumerate(order) if t == "alice"][2]
        assert order[:8] == ["alice", "bob"] * 4
        assert engine.tokens_by_tenant == {"alice": 60, "bob": 12}
    finally:
        engine.close(5)


def test_weights_share_the_slots_in_proportion(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine

    engine = GenerationEngine(model, _Tokenizer(), max_batch=3, threads=1)
    try:
        _run(engine, [("small", 1.0)] * 12 + [("big", 2.0)] * 12)
        order = list(engine.admitted)
        # While both wait, each batch of 3 holds 2 of the weight-2 tenant's and 1 of the other's.
        first = order[:12]
        assert first.count("big") == 8 and first.count("small") == 4
        assert sorted(order) == sorted(["small"] * 12 + ["big"] * 12)
    finally:
        engine.close(5)


def test_one_tenant_past_its_waiting_limit_is_refused_naming_the_limit(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine, SamplingParams

    engine = GenerationEngine(model, _Tokenizer(), max_batch=1, max_waiting_per_tenant=3, threads=1)

    async def go() -> list[Any]:
        with engine._wake:
            queued = [engine.submit([1, 2], SamplingParams(max_tokens=1), "alice") for _ in range(3)]
            with pytest.raises(ResourceExhaustedError, match="generate_max_waiting_per_tenant 3") as err:
                engine.submit([1, 2], SamplingParams(max_tokens=1), "alice")
            assert "'alice'" in str(err.value)
            queued.append(engine.submit([1, 2], SamplingParams(max_tokens=1), "bob"))  # another tenant still queues
            assert engine.tenants() == {"alice": (3, 0, 0), "bob": (1, 0, 0)}
        return [[e async for e in g] for g in queued]

    try:
        answers = asyncio.run(go())
        assert [len(a) for a in answers] == [1, 1, 1, 1]
        assert engine.tenants() == {"alice": (0, 0, 3), "bob": (0, 0, 1)}
    finally:
        engine.close(5)


def test_token_weights_in_the_table() -> None:
    table = parse_tokens(
        json.dumps(
            {
                "alice": {"token": "ta", "scopes": ["predict"], "weight": 2},
                "bob": {"token": "tb", "scopes": ["predict"]},
            }
        )
    )
    assert table["ta"] == Caller("alice", frozenset({"predict"}), 2.0)
    assert table["tb"].weight == 1.0
    for bad in (0, -1, "2", True, None):
        with pytest.raises(InvalidArgumentError, match="weight"):
            parse_tokens(json.dumps({"alice": {"token": "ta", "scopes": ["predict"], "weight": bad}}))


def test_the_tenant_reaches_the_generate_request_from_rest_and_grpc() -> None:
    """REST: the route's token names the tenant; gRPC: the interceptor's caller does."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from trainwire_core.auth import reset_caller, set_caller
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_predictor.generative.requests import GenerateLimits, GenerateRequest
    from trainwire_predictor.grpc.generate import parse_generate
    from trainwire_predictor.rest.endpoints import RestFrontEnd
    from trainwire_predictor.rest.errors import json_response
    from trainwire_predictor.rest.generate import GenerateEndpoints

    seen: list[GenerateRequest] = []

    class Generator:
        limits = GenerateLimits()

        async def open(self, request: GenerateRequest) -> Any:
            seen.append(request)
            raise ResourceExhaustedError("full (generate_max_waiting_per_tenant 1)")

    tokens = TokenTable.from_settings(tokens=json.dumps({"alice": {"token": "ta", "scopes": ["predict"], "weight": 3}}))
    front = RestFrontEnd(None, tokens)  # type: ignore[arg-type]
    app = Starlette(
        routes=GenerateEndpoints(Generator(), front._json_body).routes(front._route),  # type: ignore[arg-type]
        exception_handlers={ResourceExhaustedError: lambda r, e: json_response({"error": e.message}, 429)},
    )
    with TestClient(app) as client:
        answer = client.post("/v2/models/m/generate", json={"text_input": "hi"}, headers={"authorization": "Bearer ta"})
    assert answer.status_code == 429 and "generate_max_waiting_per_tenant" in answer.json()["error"]
    assert (seen[0].tenant, seen[0].weight) == ("alice", 3.0)
    assert current_caller() is ANYONE  # the route reset it

    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(len(b"hi").to_bytes(4, "little") + b"hi")
    token = set_caller(Caller("bob", frozenset({"predict"}), 0.5))
    try:
        parsed, _ = parse_generate(request, Generator(), "", None)  # type: ignore[arg-type]
    finally:
        reset_caller(token)
    assert (parsed.tenant, parsed.weight) == ("bob", 0.5)
    anonymous, _ = parse_generate(request, Generator(), "", None)  # type: ignore[arg-type]
    assert (anonymous.tenant, anonymous.weight) == ("", 1.0)


def test_metrics_per_tenant(model: Any) -> None:
    from prometheus_client import generate_latest

    from trainwire_predictor.generative.engine import GenerationEngine
    from trainwire_predictor.metrics import PredictorMetrics
    from trainwire_predictor.models import ModelRef

    engine = GenerationEngine(model, _Tokenizer(), max_batch=2, threads=1, prefix_cache_bytes=1 << 20)
    try:
        _run(engine, [("alice", 1.0)] * 3 + [("bob", 1.0)])
        # The last token reaches the caller just before its sequence leaves the batch.
        for _ in range(500):
            if not engine.active:
                break
            time.sleep(0.01)
        metrics = PredictorMetrics()
        ref = ModelRef(run_id="run1", checkpoint_id="ck1", run_name="lm")
        metrics.watch_generation(lambda: [(ref, engine)])
        text = generate_latest(metrics.registry).decode()
        assert 'trainwire_generate_tokens_total{model="lm",tenant="alice",version="ck1"} 9.0' in text
        assert 'trainwire_generate_tokens_total{model="lm",tenant="bob",version="ck1"} 3.0' in text
        assert 'trainwire_generate_waiting{model="lm",tenant="bob",version="ck1"} 0.0' in text
        assert 'trainwire_generate_running{model="lm",tenant="alice",version="ck1"} 0.0' in text
        assert 'trainwire_generate_prefix_tokens_total{model="lm",version="ck1"} 16.0' in text
    finally:
        engine.close(5)
