"""Token generation: tokens/s and time to first token through the predictor, against in-process ``generate``.

One GPT-2-shaped model (built from a config, random weights, no end-of-text token so
every request runs to ``--max-tokens``) is committed to a fresh store and served by
``python -m trainwire_predictor`` in its own process. A load generator in another
process streams ``POST /v1/completions`` (``stream: true``, greedy) at concurrency 1, 8
and 32: each caller sends its next request when its last one ends. Time to first token
is from sending a request to its first streamed token.

The ceiling is a plain ``transformers`` loop in one process on the same model and
prompts: ``model.generate(max_new_tokens=..., do_sample=False)`` one request after the
other (what a process without a server does); its time to first token is one
``generate(max_new_tokens=1)``, waited for behind the requests before it at concurrency
above 1.

Targets (issue 28): tokens/s >= 0.8 of the ceiling at concurrency 1, >= 3x at 8.

Run: .venv/bin/python bench/generate_throughput.py [--seconds 8] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import predictor_throughput as pt  # noqa: E402 - the sibling bench's store, ports and servers

PROMPTS = [f"request {i}: the quick brown fox jumps over the lazy dog" for i in range(64)]
MODEL = "bench-gpt2"


def build(workdir: Path) -> None:
    """A GPT-2 (4 layers, 256 wide, 2,000 tokens) and a byte-level BPE tokenizer, committed as MODEL."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from trainwire.config import CheckpointConfig
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_coordinator.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store

    torch.manual_seed(0)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(PROMPTS * 8, vocab_size=2000, min_frequency=1)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe)
    config = GPT2Config(
        vocab_size=max(len(tokenizer), 300), n_positions=256, n_embd=256, n_layer=4, n_head=4, eos_token_id=None
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None
    store = Store(str(workdir / "store"))
    checkpoint = HuggingFaceCheckpoint.from_model(model, tokenizer)
    manager = CheckpointManager(store, MODEL, MODEL, CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(checkpoint.path, store.checkpoint_dir(MODEL, "c1")))


def ceiling(workdir: Path, max_tokens: int, seconds: float) -> dict[str, float]:
    """Tokens/s and time to first token of in-process greedy generate, one request at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = workdir / "store" / "runs" / MODEL / "checkpoints" / "c1" / "checkpoint"
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    encoded = [tokenizer(p, return_tensors="pt")["input_ids"] for p in PROMPTS]
    with torch.no_grad():
        model.generate(encoded[0], max_new_tokens=2, do_sample=False)  # warm-up
        first = []
        for ids in encoded[:8]:
            started = time.perf_counter()
            model.generate(ids, max_new_tokens=1, do_sample=False)
            first.append(time.perf_counter() - started)
        tokens, started, i = 0, time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            out = model.generate(
                encoded[i % len(encoded)], max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False
            )
            tokens += out.shape[1] - encoded[i % len(encoded)].shape[1]
            i += 1
        elapsed = time.perf_counter() - started
    return {"tokens_per_s": tokens / elapsed, "ttft_s": statistics.median(first), "request_s": elapsed / i}


def load(port: int, concurrency: int, seconds: float, max_tokens: int) -> dict[str, float]:
    """Streams completions at ``concurrency`` for ``seconds`` (run in its own process)."""
    import httpx

    async def main() -> dict[str, float]:
        url = f"http://127.0.0.1:{port}/v1/completions"
        tokens, first, errors = 0, [], 0
        stop_at = time.perf_counter() + seconds
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:

            async def caller(k: int) -> None:
                nonlocal tokens, errors
                i = k
                while time.perf_counter() < stop_at:
                    body = {"model": MODEL, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens}
                    body.update(temperature=0, stream=True, stream_options={"include_usage": True})
                    sent, got_first = time.perf_counter(), False
                    async with http.stream("POST", url, json=body) as r:
                        if r.status_code != 200:
                            errors += 1
                            await r.aread()
                            continue
                        async for line in r.aiter_lines():
                            if not line.startswith("data: {"):
                                continue
                            chunk = json.loads(line[6:])
                            if chunk.get("usage"):
                                tokens += chunk["usage"]["completion_tokens"]
                            elif not got_first and chunk["choices"][0]["text"]:
                                first.append(time.perf_counter() - sent)
                                got_first = True
                    i += concurrency

            started = time.perf_counter()
            await asyncio.gather(*(caller(k) for k in range(concurrency)))
            elapsed = time.perf_counter() - started
        return {"tokens_per_s": tokens / elapsed, "ttft_s": statistics.median(first), "errors": errors}

    return asyncio.run(main())


def load_in_subprocess(port: int, concurrency: int, seconds: float, max_tokens: int) -> dict[str, float]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import generate_throughput as g; "
        "print(json.dumps(g.load(*map(int, sys.argv[2:4]), float(sys.argv[4]), int(sys.argv[5]))))"
    )
    args = [os.path.dirname(__file__), str(port), str(concurrency), str(seconds), str(max_tokens)]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def wait_ready(port: int, timeout_s: float = 180.0) -> None:
    import httpx

    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 2, "temperature": 0}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=30).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the predictor did not answer a completion")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainwire-gen-bench-") as tmp:
        workdir = Path(tmp)
        build(workdir)
        top = ceiling(workdir, args.max_tokens, args.seconds)
        http_port = pt.free_port()
        server = pt.start_predictor(workdir, pt.free_port(), "predictor", http_port=http_port)
        try:
            wait_ready(http_port)
            rows: list[dict[str, Any]] = []
            for c in args.concurrency:
                served = load_in_subprocess(http_port, c, args.seconds, args.max_tokens)
                # The ceiling serves one request at a time: the c-th caller waits for c - 1 before it.
                ceiling_ttft = top["ttft_s"] + (c - 1) * top["request_s"]
                rows.append(
                    {
                        "concurrency": c,
                        "predictor_tokens_per_s": round(served["tokens_per_s"], 1),
                        "in_process_tokens_per_s": round(top["tokens_per_s"], 1),
                        "ratio": round(served["tokens_per_s"] / top["tokens_per_s"], 2),
                        "predictor_ttft_ms": round(served["ttft_s"] * 1000, 1),
                        "in_process_ttft_ms": round(ceiling_ttft * 1000, 1),
                        "errors": served["errors"],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.terminate()
            server.wait(30)
    targets = {1: 0.8, 8: 3.0}
    for row in rows:
        if row["concurrency"] in targets:
            met = row["ratio"] >= targets[row["concurrency"]]
            print(
                f"concurrency {row['concurrency']}: {row['ratio']}x the ceiling, "
                f"target {targets[row['concurrency']]}x: {'met' if met else 'MISSED'}"
            )


if __name__ == "__main__":
    main()
