"""Many LoRA adapters on one base model: two adapters trained by two Fits, served in one batch.

The base is a tiny GPT-2 committed to the coordinator's store; two Fits train LoRA adapters
on it (different ranks and layers) and save them alone (``merge_adapters=False``). The
predictor serves both on the base it has loaded: requests for the base and for each adapter
share decode steps, and each answers exactly (greedy) what its merged model answers alone.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
from typing import Any

import httpx
import openai
import pytest
import torch
from conftest import commit_checkpoint
from language_model import make_tokenizer, tiny_gpt2

pytestmark = pytest.mark.timeout(300)

BASE = "lora-base"
TOKEN = "lora-predict"
PROMPTS = ["the cat sat on", "a bird sang", "my friend made"]
NEW_TOKENS = 12


def adapter_loop(config: dict[str, Any]) -> None:
    """Trains LoRA adapters on the base for a few steps; reports them saved alone, naming their base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainwire import train
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint

    torch.manual_seed(config["seed"])
    tokenizer = config["tokenizer"]
    base = HuggingFaceCheckpoint(config["base_uri"]).get_model(AutoModelForCausalLM)
    lora = get_peft_model(
        base,
        LoraConfig(r=config["rank"], lora_alpha=8, target_modules=config["targets"], fan_in_fan_out=True),
    )
    ids = torch.tensor([tokenizer(config["sentence"])["input_ids"] + [tokenizer.eos_token_id]])
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=2e-2)
    for _ in range(config["steps"]):
        opt.zero_grad()
        loss = lora(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
    checkpoint = HuggingFaceCheckpoint.from_model(lora.eval(), tokenizer, merge_adapters=False, base_model=BASE)
    train.report({"loss": float(loss)}, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def base(store) -> tuple[Any, Any]:
    """The base model, committed as run ``lora-base``, and its tokenizer."""
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint

    tokenizer = make_tokenizer()
    lm = tiny_gpt2(tokenizer, n_positions=128, seed=21)
    commit_checkpoint(store, "run-lora-base", BASE, "c1", HuggingFaceCheckpoint.from_model(lm, tokenizer).path)
    return lm, tokenizer


@pytest.fixture(scope="module")
def adapters(store, base) -> dict[str, Any]:
    """Two adapter runs by two Fits: name -> its checkpoint."""
    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.torch import TorchTrainer

    _, tokenizer = base
    base_uri = store.uri_of(store.checkpoint_dir("run-lora-base", "c1"))
    out = {}
    for name, rank, targets, sentence, seed in (
        ("lora-cat", 4, ["c_attn"], "the cat sat on the mat and ate a green apple", 1),
        ("lora-bird", 2, ["c_attn", "c_proj"], "a bird sang in the rain while my friend made tea", 2),
    ):
        result = TorchTrainer(
            adapter_loop,
            train_loop_config={
                "tokenizer": tokenizer,
                "base_uri": base_uri,
                "rank": rank,
                "targets": targets,
                "sentence": sentence,
                "steps": 30,
                "seed": seed,
            },
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name=name, verbose=0),
        ).fit()
        assert result.error is None, result.error
        out[name] = result.checkpoint
    return out


@pytest.fixture(scope="module")
def server(store, adapters) -> Any:
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            tokens=json.dumps({"lora": {"token": TOKEN, "scopes": ["predict"]}}),
            generate_max_batch=16,
        )
    )
    thread.start()
    yield thread.server
    thread.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key=TOKEN, max_retries=0)


def _greedy(model: Any, tokenizer: Any, prompt: str) -> str:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def _merged(base_lm: Any, checkpoint: Any) -> Any:
    """The adapter's merged model, in this process (peft's own merge)."""
    from peft import PeftModel

    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint, model_dir

    with HuggingFaceCheckpoint(checkpoint.uri).as_directory() as d:
        return PeftModel.from_pretrained(copy.deepcopy(base_lm), model_dir(d)).merge_and_unload().eval()


@pytest.fixture(scope="module")
def expected(base, adapters) -> dict[tuple[str, str], str]:
    """(model, prompt) -> what the base, or the adapter's merged model, answers alone (greedy)."""
    base_lm, tokenizer = base
    models = {BASE: base_lm, **{name: _merged(base_lm, ckpt) for name, ckpt in adapters.items()}}
    return {(name, p): _greedy(model, tokenizer, p) for name, model in models.items() for p in PROMPTS}


def test_adapters_share_a_batch_and_answer_as_merged(server, client, expected) -> None:
    # Each adapter changed what the model says.
    assert len({expected[(name, PROMPTS[0])] for name in (BASE, "lora-cat", "lora-bird")}) == 3

    # The adapter run by its name, and by base:adapter.
    asked = {BASE: BASE, "lora-cat": "lora-cat", "lora-bird": f"{BASE}:lora-bird"}
    client.completions.create(model=BASE, prompt="warm", max_tokens=1)  # the base loads once, first
    engine = next(m.generation_engine for m in server.models._cache.values() if m.generation_engine)
    steps = engine.steps

    def ask(name: str, prompt: str) -> str:
        answer = client.completions.create(model=asked[name], prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
        return answer.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        futures = {key: pool.submit(ask, *key) for key in expected}
        answers = {key: future.result() for key, future in futures.items()}
    assert answers == expected
    # Nine generations of up to 12 tokens: one at a time would take a step per token.
    assert engine.steps - steps < 9 * NEW_TOKENS / 2
    assert len(engine.adapters.keys()) == 2 and engine.adapters.loads == 2  # each loaded once, on the base
    assert len(server.models._cache) == 1  # no copy of the base: only the base is a loaded model

    listed = {m.id: m.model_extra.get("parent") for m in client.models.list().data}
    assert listed["lora-cat"] == BASE and listed["lora-bird"] == BASE and listed[BASE] is None


def test_oip_generate_names_adapters_too(server, expected) -> None:
    """The OIP generate extension takes the same names: the adapter run, or the base with the adapter as version."""
    for path, name in (
        ("/v2/models/lora-cat/generate", "lora-cat"),
        (f"/v2/models/{BASE}/versions/lora-bird/generate", "lora-bird"),
    ):
        answer = httpx.post(
            f"http://{server.http_address}{path}",
            json={"text_input": PROMPTS[1], "parameters": {"max_tokens": NEW_TOKENS}},
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["text_output"] == expected[(name, PROMPTS[1])]


def test_unknown_adapter_names_the_version(server) -> None:
    answer = httpx.post(
        f"http://{server.http_address}/v1/completions",
        json={"model": f"{BASE}:lora-nothing", "prompt": "the cat", "max_tokens": 2},
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["param"] == "model_version"


def test_adapter_set_drops_the_least_recently_used_past_its_budget() -> None:
    from trainwire_core.errors import ResourceExhaustedError
    from trainwire_predictor.generative.adapters import Adapter, AdapterSet

    lm = tiny_gpt2(make_tokenizer(), n_positions=32, seed=0)
    width = lm.config.n_embd

    def adapter(key: str) -> Adapter:
        layers = {"transformer.h.0.attn.c_attn": (torch.randn(2, width), torch.randn(3 * width, 2))}
        return Adapter(key, layers, 1.0, nbytes=1000)

    adapters = AdapterSet(lm, budget_bytes=2000)
    for key in ("a", "b"):
        adapters.add(adapter(key))
        adapters.release(key)
    assert adapters.take("a")  # "a" is the most recently used now
    adapters.add(adapter("c"))  # over the budget: "b", unused and least recent, goes
    assert sorted(adapters.keys()) == ["a", "c"] and adapters.drops == 1
    with pytest.raises(ResourceExhaustedError):
        adapters.add(adapter("d"))  # "a" and "c" are in use: nothing can go
    adapters.release("a")
    adapters.add(adapter("d"))
    assert sorted(adapters.keys()) == ["c", "d"]
    with pytest.raises(Exception, match="trained on another base"):
        adapters.add(Adapter("e", {"transformer.h.0.attn.c_attn": (torch.randn(2, 7), torch.randn(5, 2))}, 1.0, 10))
