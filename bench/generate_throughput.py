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

The peer is MLServer's HuggingFace runtime (``mlserver-huggingface``, a ``text-generation``
pipeline) on the same weights, in its own virtualenv (created on first use under
~/.cache/trainwire-bench): it answers unary OIP ``infer`` requests only, so its time to
first token is the whole answer's. Its pins are 2024's: transformers 4.41 (it imports
``Conversation``), a tokenizer in GPT-2's vocab/merges files (tokenizers 0.19 reads no
newer ``tokenizer.json``), and a stand-in for ``optimum.pipelines`` (optimum 1.x's ONNX
exporter does not import on torch 2.13; the runtime needs optimum only for ONNX models).

Targets (issue 28): tokens/s >= 0.8 of the ceiling at concurrency 1, >= 3x at 8.

Run: .venv/bin/python bench/generate_throughput.py [--seconds 8] [--max-tokens 32] [--skip-mlserver]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import predictor_throughput as pt  # noqa: E402 - the sibling bench's store, ports and servers

MLSERVER_HF_VENV = pt.MLSERVER_VENV.with_name("mlserver-hf-venv")
MLSERVER_HF_PACKAGES = ("mlserver==1.7.1", "mlserver-huggingface==1.7.1", "torch==2.13.0", "transformers==4.41.2")
# Loaded by MLServer's interpreter (sitecustomize): optimum.pipelines without optimum's ONNX exporter.
OPTIMUM_STAND_IN = """
import sys, types
stand_in = types.ModuleType("optimum.pipelines")
stand_in.ORT_SUPPORTED_TASKS = stand_in.SUPPORTED_TASKS = {}
def pipeline(*args, **kwargs):
    raise RuntimeError("optimum pipelines are not installed")
stand_in.pipeline = pipeline
sys.modules["optimum.pipelines"] = stand_in
"""
PROMPTS = [f"request {i}: the quick brown fox jumps over the lazy dog" for i in range(64)]
MODEL = "bench-gpt2"


def build(workdir: Path) -> None:
    """A GPT-2 (4 layers, 256 wide, 2,000 tokens) and a byte-level BPE tokenizer, committed as MODEL."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from trainwire.config import CheckpointConfig
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
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


def checkpoint_path(workdir: Path) -> Path:
    """Where ``build`` committed the model's files."""
    return workdir / "store" / "runs" / MODEL / "checkpoints" / "c1" / "checkpoint"


def ceiling(workdir: Path, max_tokens: int, seconds: float) -> dict[str, float]:
    """Tokens/s and time to first token of in-process greedy generate, one request at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = checkpoint_path(workdir)
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


def mlserver_dir(workdir: Path, http_port: int, max_tokens: int) -> Path:
    """MLServer's settings and model folder: the checkpoint's weights, its tokenizer as vocab/merges."""
    root = workdir / "mlserver"
    model_dir = root / MODEL / "hf"
    shutil.copytree(checkpoint_path(workdir), model_dir)
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    (model_dir / "tokenizer.json").unlink()
    (model_dir / "vocab.json").write_text(json.dumps(tokenizer["model"]["vocab"]))
    merges = ["#version: 0.2", *(" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"])]
    (model_dir / "merges.txt").write_text("\n".join(merges) + "\n")
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "GPT2TokenizerFast"
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    settings = {
        "http_port": http_port,
        "grpc_port": pt.free_port(),
        "metrics_port": pt.free_port(),
        "metrics_endpoint": None,
        "parallel_workers": 0,
        "debug": False,
        "host": "127.0.0.1",
    }
    (root / "settings.json").write_text(json.dumps(settings))
    extra = {"task": "text-generation", "pretrained_model": str(model_dir)}
    model = {"name": MODEL, "implementation": "mlserver_huggingface.HuggingFaceRuntime", "parameters": {"extra": extra}}
    (root / MODEL / "model-settings.json").write_text(json.dumps(model))
    (root / "stand_in").mkdir()
    (root / "stand_in" / "sitecustomize.py").write_text(OPTIMUM_STAND_IN)
    return root


def mlserver_body(prompt: str, max_tokens: int) -> dict[str, Any]:
    """One greedy text-generation request in MLServer's HuggingFace codec."""

    def kwarg(name: str, value: Any) -> dict[str, Any]:
        return {
            "name": name,
            "shape": [1],
            "datatype": "BYTES",
            "parameters": {"content_type": "hg_json"},
            "data": [json.dumps(value)],
        }

    args = {"name": "args", "shape": [1], "datatype": "BYTES", "parameters": {"content_type": "str"}, "data": [prompt]}
    return {
        "inputs": [
            args,
            kwarg("max_new_tokens", max_tokens),
            kwarg("min_new_tokens", max_tokens),
            kwarg("do_sample", False),
        ]
    }


def mlserver_load(port: int, concurrency: int, seconds: float, max_tokens: int) -> dict[str, float]:
    """Unary text generation at ``concurrency`` for ``seconds``: every answer holds ``max_tokens`` new tokens."""
    import httpx

    async def main() -> dict[str, float]:
        url = f"http://127.0.0.1:{port}/v2/models/{MODEL}/infer"
        answers, latencies, errors = 0, [], 0
        stop_at = time.perf_counter() + seconds
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=concurrency + 4)) as http:

            async def caller(k: int) -> None:
                nonlocal answers, errors
                i = k
                while time.perf_counter() < stop_at:
                    sent = time.perf_counter()
                    r = await http.post(url, json=mlserver_body(PROMPTS[i % len(PROMPTS)], max_tokens))
                    if r.status_code == 200:
                        answers += 1
                        latencies.append(time.perf_counter() - sent)
                    else:
                        errors += 1
                    i += concurrency

            started = time.perf_counter()
            await asyncio.gather(*(caller(k) for k in range(concurrency)))
            elapsed = time.perf_counter() - started
        return {
            "tokens_per_s": answers * max_tokens / elapsed,
            "ttft_s": statistics.median(latencies),
            "errors": errors,
        }

    return asyncio.run(main())


def run_mlserver(workdir: Path, concurrency: list[int], seconds: float, max_tokens: int) -> dict[int, dict]:
    """MLServer's figures per concurrency, from its own process group."""
    import httpx

    mlserver = pt.ensure_mlserver(MLSERVER_HF_VENV, MLSERVER_HF_PACKAGES)
    port = pt.free_port()
    root = mlserver_dir(workdir, port, max_tokens)
    log = open(workdir / "mlserver.log", "w")  # noqa: SIM115 - open while the server runs
    env = {**os.environ, "PYTHONPATH": str(root / "stand_in"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    server = subprocess.Popen(
        [str(mlserver), "start", str(root)], stdout=log, stderr=log, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/v2/models/{MODEL}/infer", json=mlserver_body(PROMPTS[0], 2), timeout=60
                )
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"MLServer did not answer; see {workdir / 'mlserver.log'}")
            time.sleep(0.5)
        return {c: in_subprocess("mlserver_load", port, c, seconds, max_tokens) for c in concurrency}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)
        log.close()


def in_subprocess(function: str, port: int, concurrency: int, seconds: float, max_tokens: int) -> dict[str, float]:
    """``function``'s load from a process of its own (the server keeps its cores to itself)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import generate_throughput as g; "
        f"print(json.dumps(g.{function}(*map(int, sys.argv[2:4]), float(sys.argv[4]), int(sys.argv[5]))))"
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
    parser.add_argument("--skip-mlserver", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainwire-gen-bench-") as tmp:
        workdir = Path(tmp)
        build(workdir)
        top = ceiling(workdir, args.max_tokens, args.seconds)
        http_port = pt.free_port()
        server = pt.start_predictor(workdir, pt.free_port(), "predictor", http_port=http_port)
        try:
            wait_ready(http_port)
            served = {c: in_subprocess("load", http_port, c, args.seconds, args.max_tokens) for c in args.concurrency}
        finally:
            server.terminate()
            server.wait(30)
        peer = {} if args.skip_mlserver else run_mlserver(workdir, args.concurrency, args.seconds, args.max_tokens)
    rows: list[dict[str, Any]] = []
    for c in args.concurrency:
        # The ceiling serves one request at a time: the c-th caller waits for c - 1 before it.
        ceiling_ttft = top["ttft_s"] + (c - 1) * top["request_s"]
        row = {
            "concurrency": c,
            "predictor_tokens_per_s": round(served[c]["tokens_per_s"], 1),
            "in_process_tokens_per_s": round(top["tokens_per_s"], 1),
            "ratio": round(served[c]["tokens_per_s"] / top["tokens_per_s"], 2),
            "predictor_ttft_ms": round(served[c]["ttft_s"] * 1000, 1),
            "in_process_ttft_ms": round(ceiling_ttft * 1000, 1),
            "errors": served[c]["errors"],
        }
        if c in peer:
            row["mlserver_tokens_per_s"] = round(peer[c]["tokens_per_s"], 1)
            row["vs_mlserver"] = round(served[c]["tokens_per_s"] / peer[c]["tokens_per_s"], 2)
            row["mlserver_answer_ms"] = round(peer[c]["ttft_s"] * 1000, 1)
            row["mlserver_errors"] = peer[c]["errors"]
        rows.append(row)
        print(json.dumps(row), flush=True)
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
