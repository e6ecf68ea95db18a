"""Prefix reuse: time to first token with a shared 512-token prefix, the prefix cache on against off.

One GPT-2-shaped model built from a config (random weights; GPT-2 small's body by default: 12
layers, 768 wide, 124M parameters) serves two decode engines side by side in one process, one
with ``prefix_cache_bytes`` set and one without. Every request is the same ``--prefix`` tokens
(a system prompt) followed by ``--tail`` tokens of its own; requests go one at a time, in turns
between the two engines, and time to first token is from ``submit`` to the first streamed token.
The cached engine's first request fills its cache (counted apart, as "cold"); its greedy tokens
are checked against the plain engine's for every request.

Run: .venv/bin/python bench/generate_prefix.py [--requests 8] [--prefix 512] [--tail 32] [--size small|tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

SIZES = {
    "small": {"n_layer": 12, "n_embd": 768, "n_head": 12},  # GPT-2 small's body (124M with its vocabulary)
    "tiny": {"n_layer": 4, "n_embd": 128, "n_head": 4},
}


class _Tokenizer:
    eos_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def build(size: str, context: int) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_positions=context, **SIZES[size])).eval()
    model.generation_config.eos_token_id = None  # every request runs its max_tokens
    return model


async def first_token(engine: Any, prompt: list[int], max_tokens: int) -> tuple[float, list[int]]:
    from trainwire_predictor.generative.engine import SamplingParams

    started = time.perf_counter()
    ttft, tokens = 0.0, []
    async for event in engine.submit(prompt, SamplingParams(max_tokens=max_tokens)):
        if not tokens:
            ttft = time.perf_counter() - started
        if event.token_id is not None:
            tokens.append(event.token_id)
    return ttft, tokens


async def run(args: argparse.Namespace) -> None:
    import torch

    from trainwire_predictor.generative.engine import GenerationEngine

    model = build(args.size, args.prefix + args.tail + args.max_tokens)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prefix = [rng.randrange(vocab) for _ in range(args.prefix)]
    prompts = [prefix + [rng.randrange(vocab) for _ in range(args.tail)] for _ in range(args.requests + 1)]
    threads = args.threads or torch.get_num_threads()
    cached = GenerationEngine(model, _Tokenizer(), threads=threads, prefix_cache_bytes=args.cache_mib << 20)
    plain = GenerationEngine(model, _Tokenizer(), threads=threads)
    try:
        cold, _ = await first_token(cached, prompts[0], args.max_tokens)
        await first_token(plain, prompts[0], args.max_tokens)  # warm-up, as the cached engine had
        on, off = [], []
        for prompt in prompts[1:]:
            t_on, tokens_on = await first_token(cached, prompt, args.max_tokens)
            t_off, tokens_off = await first_token(plain, prompt, args.max_tokens)
            assert tokens_on == tokens_off, "the cached engine's greedy tokens differ"
            on.append(t_on)
            off.append(t_off)
    finally:
        cached.close(5)
        plain.close(5)
    cache = cached.prefix_cache
    assert cache is not None
    print(
        f"model {args.size} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M), prompt {args.prefix} shared + "
        f"{args.tail} own tokens, {args.requests} requests, {threads} threads"
    )
    print(f"{'':14}{'median ms':>10}{'min ms':>9}")
    print(f"{'cache off':14}{statistics.median(off) * 1e3:10.1f}{min(off) * 1e3:9.1f}")
    print(f"{'cache on':14}{statistics.median(on) * 1e3:10.1f}{min(on) * 1e3:9.1f}")
    print(f"{'cache cold':14}{cold * 1e3:10.1f}")
    print(
        f"speed-up {statistics.median(off) / statistics.median(on):.1f}x; cache {cache.bytes / 2**20:.1f} MiB, "
        f"{cache.hit_tokens} of {cache.lookup_tokens} prompt tokens found; greedy tokens identical"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=512)
    parser.add_argument("--tail", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--cache-mib", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0, help="torch threads of each engine (0: torch's default)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
