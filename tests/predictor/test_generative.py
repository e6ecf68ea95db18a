"""A causal language model trained by a real Fit, served with token streaming over OIP, OpenAI and gRPC.

A GPT-2-shaped model built from a config (no download) is trained data-parallel on
text this module writes, with a byte-level BPE tokenizer trained on the same text.
The real ``openai`` client and the real ``tritonclient`` stream its tokens; every
answer equals an in-process greedy ``generate`` on the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from language_model import SENTENCES, make_tokenizer

pytestmark = pytest.mark.timeout(300)

MODEL = "pred-tiny-gpt2"
TOKENS = {
    "caller": {"token": "gen-predict", "scopes": ["predict"]},
    "reader": {"token": "gen-read", "scopes": ["read"]},
}
MAX_TOKENS = 64
PROBE = os.path.join(os.path.dirname(__file__), "triton_generate_probe.py")


def lm_loop(config: dict[str, Any]) -> None:
    """Trains a tiny GPT-2 on the sentences (DDP); rank 0 reports the model and tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from trainwire import train
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire.torch import prepare_model

    torch.manual_seed(0)
    tokenizer = config["tokenizer"]
    eos = tokenizer.eos_token_id
    rows = [tokenizer(s)["input_ids"] + [eos] for s in config["sentences"]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=128,
            n_embd=64,
            n_layer=2,
            n_head=2,
            bos_token_id=eos,
            eos_token_id=eos,
        )
    )
    ddp = prepare_model(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    for _ in range(config["steps"]):
        opt.zero_grad()
        loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
    checkpoint = (
        HuggingFaceCheckpoint.from_model(model, tokenizer) if train.get_context().get_world_rank() == 0 else None
    )
    train.report({"loss": float(loss)}, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def lm_result(coordinator):
    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.torch import TorchTrainer

    return TorchTrainer(
        lm_loop,
        train_loop_config={"tokenizer": make_tokenizer(), "sentences": SENTENCES, "steps": 120},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=MODEL, verbose=0),
    ).fit()


@pytest.fixture(scope="module")
def local_lm(lm_result):
    """The checkpoint's model and tokenizer, loaded in this process."""
    from transformers import AutoModelForCausalLM

    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint

    ckpt = HuggingFaceCheckpoint(lm_result.checkpoint.uri)
    return ckpt.get_model(AutoModelForCausalLM).eval(), ckpt.get_tokenizer()


def greedy(local_lm, prompt: str, max_tokens: int) -> str:
    """What an in-process greedy ``generate`` continues ``prompt`` with."""
    import torch

    model, tokenizer = local_lm
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


@pytest.fixture(scope="module")
def gen_predictor(store, lm_result):
    """A predictor with gRPC and REST on the coordinator's store, with named tokens."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            tokens=json.dumps(TOKENS),
            generate_max_tokens=MAX_TOKENS,
            index_refresh_s=0.2,
        )
    )
    thread.start()
    yield thread.server
    thread.stop()


@pytest.fixture(scope="module")
def base_url(gen_predictor) -> str:
    return f"http://{gen_predictor.http_address}"


AUTH = {"authorization": "Bearer gen-predict"}


def engine_of(server):
    # The only model this predictor serves is the language model.
    return next((m.generation_engine for m in server.models._cache.values() if m.generation_engine), None)


def test_openai_client_streams_the_greedy_tokens(base_url, local_lm):
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="gen-predict", max_retries=0)
    prompt = "the dog ran"
    expected = greedy(local_lm, prompt, 20)
    assert len(expected.split()) >= 3  # the model learned something to say
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0, stream=True))
    pieces = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert "".join(pieces) == expected
    assert len(pieces) >= 5  # token by token, not one piece
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0)
    assert whole.choices[0].text == expected
    assert whole.usage.completion_tokens >= len(pieces)

    messages = [{"role": "user", "content": "the cat sat"}]
    chat = list(
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0, stream=True)
    )
    assert chat[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    assert text == greedy(local_lm, "user: the cat sat\nassistant:", 12)
    assert [m.id for m in client.models.list().data].count(MODEL) == 1


def test_oip_generate_and_generate_stream(base_url, local_lm):
    prompt = "a bird sang"
    expected = greedy(local_lm, prompt, 16)
    body = {"text_input": prompt, "parameters": {"max_tokens": 16}}
    whole = httpx.post(f"{base_url}/v2/models/{MODEL}/generate", json=body, headers=AUTH, timeout=30)
    assert whole.status_code == 200, whole.text
    assert whole.json()["text_output"] == expected
    events = []
    with httpx.stream(
        "POST", f"{base_url}/v2/models/{MODEL}/generate_stream", json=body, headers=AUTH, timeout=30
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert "".join(e["text_output"] for e in events) == expected
    assert [e["index"] for e in events if e["text_output"]] == list(range(len([e for e in events if e["text_output"]])))
    assert events[-1]["finish_reason"] in ("stop", "length")


def test_tritonclient_streams_tokens_over_grpc(gen_predictor, local_lm, tmp_path):
    prompt = "my friend made"
    proc = subprocess.run(
        [sys.executable, PROBE, gen_predictor.address, MODEL, prompt, "14", "gen-predict"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    assert "".join(report["tokens"]) == greedy(local_lm, prompt, 14)
    assert len(report["tokens"]) >= 5 and report["final"] == [False] * (len(report["final"]) - 1) + [True]
    assert report["unary"] == greedy(local_lm, prompt, 14)


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/completions", {"model": MODEL, "prompt": ""}, 400, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": "the", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "the", "max_tokens": MAX_TOKENS + 1}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "the", "n": 0}, 400, "n"),
        ("/v1/completions", {"model": "no-such-model", "prompt": "the"}, 404, "model_name"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"content": "hi"}]}, 400, "messages[0].role"),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/v1/completions", {"model": MODEL, "prompt": "the", "temperature": "hot"}, 400, "temperature"),
    ],
)
def test_bad_openai_requests_name_the_field(base_url, path, body, status, field):
    r = httpx.post(f"{base_url}{path}", json=body, headers=AUTH, timeout=30)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == field


def test_bad_generate_requests_name_the_field(base_url, gen_predictor):
    cases = [
        ({"text_input": ""}, 400, "text_input"),
        ({"text_input": "the", "parameters": {"max_tokens": 0}}, 400, "parameters.max_tokens"),
        ({"text_input": "the", "max_tokens": MAX_TOKENS + 1}, 400, "max_tokens"),
    ]
    for body, status, field in cases:
        r = httpx.post(f"{base_url}/v2/models/{MODEL}/generate_stream", json=body, headers=AUTH, timeout=30)
        assert r.status_code == status and field in r.json()["error"], (body, r.text)
    r = httpx.post(f"{base_url}/v2/models/nope/generate", json={"text_input": "the"}, headers=AUTH, timeout=30)
    assert r.status_code == 404


def test_tokens_and_scopes_apply(base_url):
    import openai

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).completions.create(
            model=MODEL, prompt="the", max_tokens=2
        )
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="gen-read", max_retries=0).completions.create(
            model=MODEL, prompt="the", max_tokens=2
        )
    r = httpx.post(f"{base_url}/v2/models/{MODEL}/generate", json={"text_input": "the"}, timeout=30)
    assert r.status_code == 401


def test_concurrent_generations_share_decode_steps(base_url, gen_predictor, local_lm):
    prompts = [SENTENCES[i % 4].split()[0] + " " + SENTENCES[i % 4].split()[1] for i in range(8)]
    # The model is loaded and its engine started by the earlier tests.
    engine = engine_of(gen_predictor)
    before = engine.steps

    async def one(http: httpx.AsyncClient, prompt: str) -> str:
        body = {"text_input": prompt, "parameters": {"max_tokens": 24}}
        r = await http.post(f"{base_url}/v2/models/{MODEL}/generate", json=body, headers=AUTH)
        assert r.status_code == 200, r.text
        return r.json()["text_output"]

    async def all_at_once() -> list[str]:
        async with httpx.AsyncClient(timeout=60) as http:
            return await asyncio.gather(*(one(http, p) for p in prompts))

    texts = asyncio.run(all_at_once())
    assert texts == [greedy(local_lm, p, 24) for p in prompts]
    total_tokens = sum(len(local_lm[1](t, add_special_tokens=False)["input_ids"]) for t in texts)
    # One request at a time would take a step per token; batched, far fewer.
    assert engine.steps - before < total_tokens / 2


def test_a_deadline_ends_the_generation(base_url):
    body = {"text_input": "the cat", "parameters": {"max_tokens": MAX_TOKENS, "timeout_s": 0.001, "temperature": 1.0}}
    r = httpx.post(f"{base_url}/v2/models/{MODEL}/generate", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["finish_reason"] == "deadline"
    assert r.json()["usage"]["completion_tokens"] < MAX_TOKENS


def lora_loop(config: dict[str, Any]) -> None:
    """Fine-tunes the trained model's attention with LoRA (peft), DDP; rank 0 reports it merged."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainwire import train
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire.torch import prepare_model

    torch.manual_seed(0)
    tokenizer = config["tokenizer"]
    base = HuggingFaceCheckpoint(config["base_uri"]).get_model(AutoModelForCausalLM)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True))
    trainable = sorted(n for n, p in lora.named_parameters() if p.requires_grad)
    eos = tokenizer.eos_token_id
    ids = torch.tensor([tokenizer(config["sentence"])["input_ids"] + [eos]])
    ddp = prepare_model(lora)
    opt = torch.optim.AdamW([p for p in ddp.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(config["steps"]):
        opt.zero_grad()
        loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
    lora.eval()
    prompt = tokenizer(config["prompt"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = lora.generate(input_ids=prompt, max_new_tokens=12, do_sample=False, pad_token_id=eos)
    metrics = {
        "loss": float(loss),
        "trainable": len(trainable),
        "only_lora": all("lora_" in n for n in trainable),
        "greedy": tokenizer.decode(out[0, prompt.shape[1] :], skip_special_tokens=True),
    }
    rank0 = train.get_context().get_world_rank() == 0
    train.report(metrics, checkpoint=HuggingFaceCheckpoint.from_model(lora, tokenizer) if rank0 else None)


def test_a_lora_fine_tune_serves_its_merged_model(lm_result, base_url, local_lm):
    import openai

    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.torch import TorchTrainer

    name = f"{MODEL}-lora"
    sentence = "the cat sat on the mat and ate a green apple"
    result = TorchTrainer(
        lora_loop,
        train_loop_config={
            "tokenizer": make_tokenizer(),
            "base_uri": lm_result.checkpoint.uri,
            "sentence": sentence,
            "prompt": "the cat sat on the mat",
            "steps": 60,
        },
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=name, verbose=0),
    ).fit()
    assert result.error is None, result.error
    # Two layers' c_attn, each with lora_A and lora_B: the base weights stay frozen.
    assert result.metrics["trainable"] == 4 and result.metrics["only_lora"]
    tuned = result.metrics["greedy"]
    assert tuned != greedy(local_lm, "the cat sat on the mat", 12)  # the adapters changed what it says
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="gen-predict", max_retries=0)
    deadline = time.monotonic() + 30
    while True:  # the predictor's index refreshes every 0.2 s
        try:
            answer = client.completions.create(
                model=name, prompt="the cat sat on the mat", max_tokens=12, temperature=0
            )
            break
        except openai.NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert answer.choices[0].text == tuned
