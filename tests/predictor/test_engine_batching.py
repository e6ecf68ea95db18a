"""The decode engine's batch: prefills batched, keys and values kept in place, rows joining and leaving.

Exactness: every greedy answer of a burst (prompts of different lengths and lengths of answer,
more requests than slots, so rows leave and join mid-stream and the buffers grow) equals
``transformers``' ``generate`` on that prompt alone. A burst sharing a system prompt nobody has
sent before prefills it once: the others wait for its blocks and reuse them.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from language_model import ID_VOCAB, IdTokenizer, wide_random_gpt2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def model() -> Any:
    return wide_random_gpt2(n_positions=512)


def _expected(model: Any, prompt: list[int], max_tokens: int) -> list[int]:
    import torch

    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def _burst(engine: Any, requests: list[tuple[list[int], int]], hold: bool = True) -> list[list[int]]:
    """Submits every (prompt, max_tokens) at once (the engine admits none until all are queued)."""
    from trainwire_predictor.generative.engine import SamplingParams

    async def go() -> list[list[int]]:
        with engine._wake:
            generations = [engine.submit(p, SamplingParams(max_tokens=n)) for p, n in requests]
        return [[e.token_id async for e in g if e.token_id is not None] for g in generations]

    return asyncio.run(go())


def test_a_burst_batched_and_mixed_answers_as_generate_alone(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine, SamplingParams
    from trainwire_predictor.generative.packed import available

    rng = random.Random(3)
    requests = [([rng.randrange(1, ID_VOCAB) for _ in range(n)], m) for n, m in [(5, 12), (1, 3), (40, 20), (9, 7)]]
    requests += [([rng.randrange(1, ID_VOCAB) for _ in range(n)], m) for n, m in [(90, 6), (2, 30), (17, 9), (70, 80)]]
    # transformers' own answers, before the engine packs the model's weights.
    expected = [_expected(model, prompt, max_tokens) for prompt, max_tokens in requests]
    expected += [_expected(model, requests[1][0], 40), _expected(model, requests[4][0], 10)]
    engine = GenerationEngine(model, IdTokenizer(), max_batch=3, threads=1)
    try:
        got = _burst(engine, requests)
        assert got == expected[: len(requests)]
        if available():  # the answers came from the packed layers
            assert "forward" in vars(model.lm_head) and "forward" in vars(model.transformer.h[0].mlp.c_fc)
        assert len({tuple(a) for a in got}) == len(got)

        # A long prompt joining a batch of short running rows widens it to the left.
        async def staggered() -> list[list[int]]:
            first = engine.submit(requests[1][0], SamplingParams(max_tokens=40))
            stream = first.__aiter__()
            head = [(await stream.__anext__()).token_id for _ in range(3)]
            second = engine.submit(requests[4][0], SamplingParams(max_tokens=10))
            rest = [e.token_id async for e in stream if e.token_id is not None]
            return [head + rest, [e.token_id async for e in second if e.token_id is not None]]

        short, long = asyncio.run(staggered())
        assert [short, long] == expected[len(requests) :]
    finally:
        engine.close(5)
    # All 8 admitted at once: 234 prompt tokens, prefilled in passes of at most PREFILL_TOKENS.
    wide = GenerationEngine(model, IdTokenizer(), max_batch=8, threads=1)
    try:
        assert sum(len(p) for p, _ in requests) > 128
        assert _burst(wide, requests) == expected[: len(requests)]
    finally:
        wide.close(5)


def test_a_burst_sharing_a_new_prefix_prefills_it_once(model: Any) -> None:
    from trainwire_predictor.generative.engine import GenerationEngine

    rng = random.Random(5)
    system = [rng.randrange(1, ID_VOCAB) for _ in range(80)]  # 5 blocks of 16
    requests = [(system + [rng.randrange(1, ID_VOCAB) for _ in range(n)], 8) for n in (3, 7, 1, 12, 5)]
    expected = [_expected(model, prompt, max_tokens) for prompt, max_tokens in requests]
    cached = GenerationEngine(model, IdTokenizer(), max_batch=8, threads=1, prefix_cache_bytes=64 << 20)
    try:
        got = _burst(cached, requests)
        # The first prompt computes the 5 blocks; the other 4 find them (same round, after its pass).
        assert cached.prefix_cache.hit_tokens == 4 * 80
        assert got == expected
    finally:
        cached.close(5)


def test_the_batch_cache_writes_in_place_and_keeps_rows_apart() -> None:
    import torch

    from trainwire_predictor.generative.kvcache import BatchCache

    def rows(n: int, width: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.full((n, 2, width, 4), fill), torch.full((n, 2, width, 4), -fill)) for _ in range(3)]

    batch = BatchCache(rows(2, 5, 1.0), torch.ones(2, 5, dtype=torch.long), torch.tensor([5, 5]))
    batch.add(rows(1, 9, 2.0), torch.ones(1, 9, dtype=torch.long), torch.tensor([9]))  # wider: pads the first two
    assert batch.rows == 3 and batch.width == 9
    for _ in range(70):  # past the first buffer's columns: it grows, the rows stay as they were
        mask, positions, cache = batch.step_inputs()
        assert mask.shape == (3, batch.width + 1)
        for i, layer in enumerate(cache.layers):
            layer.update(torch.full((3, 2, 1, 4), 3.0 + i), torch.full((3, 2, 1, 4), -3.0))
        batch.stepped()
    assert positions.flatten().tolist() == [5 + 69, 5 + 69, 9 + 69]
    keys, values = batch.layer(1)
    assert keys.shape == (3, 2, 79, 4)
    assert mask[:2, :4].sum() == 0 and bool(mask[2].all()) and bool(mask[:2, 4:].all())
    assert bool((keys[2, :, :9] == 2.0).all()) and bool((keys[0, :, 4:9] == 1.0).all())
    assert bool((keys[:, :, 9:] == 4.0).all()) and bool((values[:, :, 9:] == -3.0).all())
    order = batch.drop([0])  # the last row takes the first one's place
    assert order == [2, 1] and batch.rows == 2 and batch.width == 79
    assert bool((batch.layer(0)[0][0, :, :9] == 2.0).all())
    batch.drop([0])  # the wide row leaves: the columns only it used leave the attention
    assert batch.rows == 1 and batch.width == 75
    assert bool((batch.layer(0)[0][0, :, :5] == 1.0).all())
