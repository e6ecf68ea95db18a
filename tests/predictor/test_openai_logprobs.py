"""The OpenAI API as LLM tools use it: log-probabilities, echo scoring, n, penalties and logit_bias.

A real predictor (REST on loopback) serves a tiny GPT-2 committed to a store of its own;
the ``openai`` client and plain HTTP (lm-eval's exact payloads) call it, and every number is
checked against the same weights run in-process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from language_model import make_tokenizer, tiny_gpt2

pytestmark = pytest.mark.timeout(300)

MODEL = "logprobs-lm"
TOKEN = "logprobs-predict"
PROMPT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return make_tokenizer()


@pytest.fixture(scope="module")
def lm(tokenizer) -> Any:
    return tiny_gpt2(tokenizer, n_positions=256, seed=3)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer, lm) -> Iterator[Any]:
    """A predictor serving ``lm`` from a store of its own."""
    from trainwire.config import CheckpointConfig
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(tmp_path_factory.mktemp("logprobs-store").as_uri())
    ckpt = HuggingFaceCheckpoint.from_model(lm, tokenizer)
    manager = CheckpointManager(store, "logprobs-run", MODEL, CheckpointConfig())
    manager.commit("c1", 1, {"index": 1}, store.upload_dir(ckpt.path, store.checkpoint_dir("logprobs-run", "c1")))
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            tokens=json.dumps({"tool": {"token": TOKEN, "scopes": ["predict"]}}),
            generate_max_batch=8,
        )
    )
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key=TOKEN, max_retries=0)


def _post(server: Any, path: str, doc: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"http://{server.http_address}{path}", json=doc, headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
    )


def _ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _logprobs(lm: Any, ids: list[int]) -> torch.Tensor:
    """Row i: the model's log-probabilities of the token after ``ids[: i + 1]``."""
    with torch.no_grad():
        return torch.log_softmax(lm(torch.tensor([ids])).logits[0].float(), dim=-1)


def _greedy(lm: Any, ids: list[int], steps: int, presence: float = 0.0, frequency: float = 0.0) -> list[int]:
    """Greedy decoding in-process, with OpenAI's penalties over the generated tokens."""
    out: list[int] = []
    for _ in range(steps):
        with torch.no_grad():
            logits = lm(torch.tensor([ids + out])).logits[0, -1].float()
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=logits.shape[0]).float()
        logits = logits - counts * frequency - (counts > 0).float() * presence
        out.append(int(torch.argmax(logits)))
    return out


def test_completion_logprobs_are_the_models(client, tokenizer, lm) -> None:
    answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
    choice = answer.choices[0]
    lp = choice.logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    prompt = _ids(tokenizer, PROMPT)
    generated = _ids(tokenizer, choice.text)
    table = _logprobs(lm, prompt + generated)
    for i, token_id in enumerate(generated[:5]):
        expected = float(table[len(prompt) - 1 + i, token_id])
        assert lp.token_logprobs[i] == pytest.approx(expected, abs=1e-4)
        # greedy: the picked token is the most likely, and the alternatives are the model's top 3
        assert max(lp.top_logprobs[i].values()) == pytest.approx(expected, abs=1e-4)
        top3 = torch.topk(table[len(prompt) - 1 + i], 3).values.tolist()
        # (two byte-level tokens may share a text, so the dict may hold fewer than 3)
        assert all(min(abs(v - t) for t in top3) < 1e-4 for v in lp.top_logprobs[i].values())
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]


def test_echo_scores_the_prompt(server, client, tokenizer, lm) -> None:
    """echo + logprobs + max_tokens 0: the prompt's log-likelihood, its first token null (lm-eval reads this)."""
    text = "the dog ran in the park and found a red ball"
    answer = client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True, logprobs=1)
    lp = answer.choices[0].logprobs
    ids = _ids(tokenizer, text)
    assert answer.choices[0].text == text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert len(lp.token_logprobs) == len(ids)
    table = _logprobs(lm, ids)
    expected = sum(float(table[i - 1, ids[i]]) for i in range(1, len(ids)))
    assert sum(lp.token_logprobs[1:]) == pytest.approx(expected, abs=1e-4)
    assert answer.usage.completion_tokens == 0 and answer.usage.prompt_tokens == len(ids)


def test_lm_eval_payload_on_token_ids(server, tokenizer, lm) -> None:
    """lm-eval's local-completions log-likelihood request, batched token ids, parsed as lm-eval parses it."""
    contexts = ["the cat sat on", "a bird sang in the"]
    continuations = [" the mat", " tree"]
    batch = [_ids(tokenizer, c) + _ids(tokenizer, x) for c, x in zip(contexts, continuations, strict=True)]
    doc = {
        "model": MODEL,
        "prompt": batch,
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": 1,
        "seed": 1234,
        "echo": True,
    }
    r = _post(server, "/v1/completions", doc)
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in choices] == [0, 1]
    for choice, context, ids in zip(choices, contexts, batch, strict=True):
        ctxlen = len(_ids(tokenizer, context))
        scored = choice["logprobs"]["token_logprobs"][ctxlen:-1]  # lm-eval's slice: the continuation
        table = _logprobs(lm, ids)
        expected = sum(float(table[i - 1, ids[i]]) for i in range(ctxlen, len(ids)))
        assert len(scored) == len(ids) - ctxlen
        assert sum(scored) == pytest.approx(expected, abs=1e-4)
        for tok, top in zip(scored, choice["logprobs"]["top_logprobs"][ctxlen:-1], strict=True):
            assert max(top.values()) >= tok - 1e-6


def test_chat_logprobs_whole_and_streamed(client, tokenizer, lm) -> None:
    messages = [{"role": "user", "content": "the cat"}]
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens or whole.choices[0].finish_reason == "stop"
    assert all(len(entry.top_logprobs) == 2 for entry in content)
    assert all(entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5) for entry in content)  # greedy
    assert b"".join(bytes(entry.bytes) for entry in content).decode() == whole.choices[0].message.content
    streamed = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2, stream=True
    )
    entries = [e for chunk in streamed for c in chunk.choices if c.logprobs for e in c.logprobs.content]
    assert [(e.token, round(e.logprob, 5)) for e in entries] == [(e.token, round(e.logprob, 5)) for e in content]
    # the model's own numbers: the rendered chat's prompt, then the tokens
    prompt = _ids(tokenizer, "user: the cat\nassistant:")
    table = _logprobs(lm, prompt + _ids(tokenizer, whole.choices[0].message.content))
    for i, entry in enumerate(content):  # greedy: each token is the model's most likely at its position
        assert entry.logprob == pytest.approx(float(table[len(prompt) - 1 + i].max()), abs=1e-4)


def test_n_choices(client) -> None:
    one = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)
    three = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, n=3)
    assert sorted(c.index for c in three.choices) == [0, 1, 2]
    assert {c.text for c in three.choices} == {one.choices[0].text}
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    sampled = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a"}], max_tokens=12, temperature=2, n=4, seed=7
    )
    again = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a"}], max_tokens=12, temperature=2, n=4, seed=7
    )
    texts = [c.message.content for c in sorted(sampled.choices, key=lambda c: c.index)]
    assert texts == [c.message.content for c in sorted(again.choices, key=lambda c: c.index)]  # seeded
    assert len(set(texts)) > 1  # each choice its own draw
    streamed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, n=2, stream=True)
    parts: dict[int, str] = {}
    for chunk in streamed:
        for c in chunk.choices:
            parts[c.index] = parts.get(c.index, "") + c.text
    assert parts == {0: one.choices[0].text, 1: one.choices[0].text}


def test_logit_bias_forces_a_token(client, tokenizer) -> None:
    forced = _ids(tokenizer, " ball")[0]
    answer = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, temperature=1, seed=1, logit_bias={str(forced): 100}
    )
    assert answer.choices[0].text == tokenizer.decode([forced] * 4)


def test_oip_generate_takes_bias_and_penalties(server, tokenizer) -> None:
    """The generate extension shares the checks and the engine: logit_bias forces, a bad penalty is named."""
    forced = _ids(tokenizer, " ball")[0]
    doc = {"text_input": PROMPT, "parameters": {"max_tokens": 3, "logit_bias": {str(forced): 100}}}
    r = _post(server, f"/v2/models/{MODEL}/generate", doc)
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == tokenizer.decode([forced] * 3)
    doc = {"text_input": PROMPT, "parameters": {"max_tokens": 3, "presence_penalty": 9}}
    r = _post(server, f"/v2/models/{MODEL}/generate", doc)
    assert r.status_code == 400 and "parameters.presence_penalty" in r.text, r.text


def test_penalties_follow_openais_formula(client, tokenizer, lm) -> None:
    prompt = _ids(tokenizer, PROMPT)
    plain = _greedy(lm, prompt, 10)
    assert len(set(plain)) < len(plain)  # the untrained model repeats itself: penalties must change that
    for presence, frequency in ((0.0, 1.5), (2.0, 0.0), (0.5, 0.7)):
        answer = client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=10,
            temperature=0,
            presence_penalty=presence,
            frequency_penalty=frequency,
        )
        expected = _greedy(lm, prompt, 10, presence, frequency)
        assert answer.choices[0].text == tokenizer.decode(expected)
        assert expected != plain


@pytest.mark.parametrize(
    ("path", "extra", "field"),
    [
        ("/v1/completions", {"logprobs": 21}, "logprobs"),
        ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"presence_penalty": 2.5}, "presence_penalty"),
        ("/v1/completions", {"frequency_penalty": -3}, "frequency_penalty"),
        ("/v1/completions", {"logit_bias": {"5": 101}}, "logit_bias.5"),
        ("/v1/completions", {"logit_bias": {"x": 1}}, "logit_bias"),
        ("/v1/completions", {"logit_bias": {"999999": 1}}, "logit_bias"),
        ("/v1/completions", {"n": 0}, "n"),
        ("/v1/completions", {"n": 1000}, "n"),
        ("/v1/completions", {"prompt": [[1, 2], [999999]]}, "prompt"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 30}, "top_logprobs"),
        ("/v1/chat/completions", {"logit_bias": {"1": "up"}}, "logit_bias.1"),
    ],
)
def test_bad_values_name_their_field(server, path, extra, field) -> None:
    doc: dict[str, Any] = {"model": MODEL, "max_tokens": 2}
    doc.update({"prompt": PROMPT} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "a"}]})
    doc.update(extra)
    r = _post(server, path, doc)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == field, error
    assert math.isfinite(len(error["message"]))


LM_EVAL_TASKS = Path(__file__).parent / "lm_eval_tasks"


@pytest.mark.skipif(not os.environ.get("LM_EVAL_PYTHON"), reason="LM_EVAL_PYTHON (scripts/peer_venvs.sh) is not set")
def test_lm_eval_local_completions_scores_as_the_model(server, tokenizer, lm, tmp_path) -> None:
    """The real lm-eval (its own virtualenv) runs a log-likelihood and a generation task against the predictor."""
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    out = tmp_path / "out"
    args = ",".join(
        [
            f"base_url=http://{server.http_address}/v1/completions",
            f"model={MODEL}",
            f"tokenizer={tokenizer_dir}",
            "tokenizer_backend=huggingface",
            "num_concurrent=1",
            "max_retries=1",
        ]
    )
    env = {**os.environ, "OPENAI_API_KEY": TOKEN, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    command = [os.environ["LM_EVAL_PYTHON"], "-m", "lm_eval", "--model", "local-completions", "--model_args", args]
    command += ["--tasks", "trainwire_tiny_choice,trainwire_tiny_generate", "--include_path", str(LM_EVAL_TASKS)]
    command += ["--output_path", str(out), "--log_samples", "--batch_size", "2"]
    run = subprocess.run(command, cwd=LM_EVAL_TASKS, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]

    def samples(task: str) -> list[dict[str, Any]]:
        (path,) = out.rglob(f"samples_{task}_*.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()]

    choice_samples = samples("trainwire_tiny_choice")
    assert len(choice_samples) == 4
    for sample in choice_samples:
        doc = sample["doc"]
        for option, resp in zip(doc["choices"], sample["resps"], strict=True):
            # lm-eval's own split: the whole text tokenized, the context's tokens first
            whole, context = _ids(tokenizer, doc["context"] + option), _ids(tokenizer, doc["context"])
            table = _logprobs(lm, whole)
            expected = sum(float(table[i - 1, whole[i]]) for i in range(len(context), len(whole)))
            assert float(resp[0][0]) == pytest.approx(expected, abs=1e-4)  # the log writes numbers as text
    generate_samples = samples("trainwire_tiny_generate")
    assert len(generate_samples) == 4
    for sample in generate_samples:
        ids = _greedy(lm, _ids(tokenizer, sample["doc"]["context"]), 6)
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id)]
        assert sample["resps"][0][0] == tokenizer.decode(ids).split("\n")[0]
