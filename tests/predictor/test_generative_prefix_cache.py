"""Prefix reuse in the decode engine: a prompt's cached leading blocks are not prefilled again.

Exactness: greedy generations (tokens and their log-probabilities) with the cache equal those
without it, for prompts sharing a system prompt, prompts ending on a block boundary and a
prompt that is a cached prefix itself; the byte budget holds, least recently used out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from language_model import ID_VOCAB, IdTokenizer, wide_random_gpt2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def model() -> Any:
    return wide_random_gpt2(n_positions=256)


def _generate(engine: Any, prompts: list[list[int]], max_tokens: int = 16) -> list[list[tuple[int, float]]]:
    """Each prompt's greedy tokens with their log-probabilities, one request after another."""
    from trainwire_predictor.generative.engine import SamplingParams

    async def go() -> list[list[tuple[int, float]]]:
        out = []
        for prompt in prompts:
            generation = engine.submit(prompt, SamplingParams(max_tokens=max_tokens, logprobs=0))
            out.append([(e.token_id, e.logprob.logprob) async for e in generation if e.token_id is not None])
        return out

    return asyncio.run(go())


def _prompts() -> list[list[int]]:
    import random

    rng = random.Random(7)
    system = [rng.randrange(1, ID_VOCAB) for _ in range(70)]
    tails = [[rng.randrange(1, ID_VOCAB) for _ in range(n)] for n in (5, 1, 26, 10)]
    return [
        system + tails[0],
        system + tails[1],
        system[:64],  # the prefix itself, on a block boundary: its last block is prefilled again
        system + tails[2],
        system[:48] + tails[3],  # shares three blocks only
        system + tails[0],  # seen before in full
    ]


def test_greedy_output_is_the_same_with_and_without_the_cache(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine

    prompts = _prompts()
    cached = GenerationEngine(model, IdTokenizer(), max_batch=4, threads=1, prefix_cache_bytes=64 << 20)
    plain = GenerationEngine(model, IdTokenizer(), max_batch=4, threads=1)
    try:
        with_cache = _generate(cached, prompts)
        without = _generate(plain, prompts)
        assert len({tuple(t for t, _ in out) for out in without}) > 1  # the prompts' answers differ
        assert all(len(set(t for t, _ in out)) > 2 for out in without)  # and vary within themselves
        for got, expected in zip(with_cache, without, strict=True):
            assert [t for t, _ in got] == [t for t, _ in expected]
            assert [lp for _, lp in got] == pytest.approx([lp for _, lp in expected], abs=1e-4)
        cache = cached.prefix_cache
        assert plain.prefix_cache is None and cache is not None
        # Found: 4 blocks for each of the 2nd, 4th and 6th prompts (64 of their 70+ tokens), 3 for
        # the 3rd (64 tokens: the last token is prefilled), 3 for the 5th.
        assert cache.hit_tokens == 16 * (4 + 3 + 4 + 3 + 4)
        assert cache.lookup_tokens == sum(map(len, prompts))
    finally:
        cached.close(5)
        plain.close(5)


def test_a_scored_prompt_is_prefilled_whole_and_still_cached(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine, SamplingParams

    engine = GenerationEngine(model, IdTokenizer(), threads=1, prefix_cache_bytes=64 << 20)
    prompt = _prompts()[0]

    async def go() -> Any:
        scored = engine.submit(prompt, SamplingParams(max_tokens=0, prompt_logprobs=0))
        return [e async for e in scored]

    try:
        events = asyncio.run(go())
        assert len(events[0].prompt_logprobs) == len(prompt)
        assert engine.prefix_cache.hit_tokens == 0 and len(engine.prefix_cache) == len(prompt) // 16
        _generate(engine, [prompt])
        assert engine.prefix_cache.hit_tokens == 64
    finally:
        engine.close(5)


def test_the_byte_budget_holds_least_recently_used_out() -> None:
    import torch

    from trainwire_predictor.generative.engine import PrefixCache

    block_bytes = 2 * 2 * (1 * 2 * 4 * 8) * 4  # 2 layers of keys and values, (1, 2, 4, 8) float32 each
    cache = PrefixCache(budget_bytes=3 * block_bytes, block=4)
    a, b = list(range(1, 13)), list(range(20, 32))  # three blocks each

    def caches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)) for _ in range(2)]

    cache.store(cache.keys(a), caches(12), 0)
    assert len(cache) == 3 and cache.bytes == 3 * block_bytes
    assert cache.lookup(a + [99], cache.keys(a + [99]))[0] == 12
    cache.store(cache.keys(b[:4]), caches(4), 0)  # a's least recently used block goes: its last one
    assert len(cache) == 3 and cache.bytes == 3 * block_bytes
    assert cache.lookup(a + [99], cache.keys(a + [99]))[0] == 8
    assert cache.lookup(b[:4] + [99], cache.keys(b[:4] + [99]))[0] == 4
    assert cache.keys(a)[1] != cache.keys([0] + a[1:])[1]  # a key names the whole prefix, not its block alone
    too_big = PrefixCache(budget_bytes=block_bytes - 1, block=4)
    too_big.store(too_big.keys(a), caches(12), 0)
    assert len(too_big) == 0 and too_big.bytes == 0


def test_one_tenant_never_reuses_another_tenants_prefix(model: Any) -> None:
    """Blocks are kept per tenant: another token's caller cannot time whether a prefix was seen."""
    from trainwire_predictor.generative.engine import GenerationEngine, SamplingParams

    engine = GenerationEngine(model, IdTokenizer(), threads=1, prefix_cache_bytes=64 << 20)
    prompt = _prompts()[0]

    async def one(tenant: str) -> None:
        async for _ in engine.submit(prompt, SamplingParams(max_tokens=2), tenant=tenant):
            pass

    try:
        asyncio.run(one("alice"))
        asyncio.run(one("bob"))
        assert engine.prefix_cache.hit_tokens == 0  # bob found none of alice's blocks
        asyncio.run(one("alice"))
        assert engine.prefix_cache.hit_tokens == 64  # alice finds her own
    finally:
        engine.close(5)
