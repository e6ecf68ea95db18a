"""Structured outputs (``response_format``) on chat and completions, called with the ``openai`` client.

The model is a tiny untrained GPT-2: greedy decoding on random weights writes JSON only
because the grammar masks every other token, so each answer parsing and validating
against its schema is the mask at work, and ``finish_reason`` "stop" is the grammar's end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from language_model import make_tokenizer, tiny_gpt2
from serving_fixtures import served_language_model

pytest.importorskip("llguidance")
pytestmark = pytest.mark.timeout(300)

MODEL = "structured-lm"
TOKEN = "structured-predict"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    },
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    tokenizer = make_tokenizer()
    lm = tiny_gpt2(tokenizer, n_positions=512, seed=11)
    tokens = json.dumps({"tool": {"token": TOKEN, "scopes": ["predict"]}})
    folder = tmp_path_factory.mktemp("structured-store")
    with served_language_model(
        folder, "run-structured", MODEL, lm, tokenizer, tokens=tokens, generate_max_batch=8, generate_max_tokens=400
    ) as server:
        yield server


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key=TOKEN, max_retries=0)


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


def test_chat_json_schema_validates(client) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "the cat sat on the mat"}],
        temperature=0,
        max_tokens=300,
        n=3,
        seed=1,
        response_format=_schema_format(PERSON),
    )
    for choice in answer.choices:
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        assert choice.finish_reason == "stop"  # the grammar ended it, not max_tokens
    assert answer.usage.completion_tokens < 3 * 300


def test_sampled_and_streamed_answers_validate(client) -> None:
    for seed in range(3):
        stream = client.completions.create(
            model=MODEL,
            prompt="a bird sang",
            temperature=1.0,
            seed=seed,
            max_tokens=300,
            stream=True,
            extra_body={"response_format": _schema_format(PERSON)},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        jsonschema.validate(json.loads(text), PERSON)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_json_object(client) -> None:
    schema = {"type": "object"}
    for content in ("the dog ran", "my friend made tea"):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": content}],
            temperature=0,
            max_tokens=300,
            response_format={"type": "json_object"},
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_free_rows_share_the_batch(client) -> None:
    """A row without a format beside rows with one: its text is the same as alone."""
    kwargs = {"model": MODEL, "prompt": "the cat", "temperature": 0, "max_tokens": 20}
    alone = client.completions.create(**kwargs).choices[0].text
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        constrained = [
            pool.submit(
                client.completions.create,
                **{**kwargs, "max_tokens": 300},
                extra_body={"response_format": _schema_format(PERSON)},
            )
            for _ in range(3)
        ]
        free = pool.submit(client.completions.create, **kwargs)
        assert free.result().choices[0].text == alone
        for future in constrained:
            jsonschema.validate(json.loads(future.result().choices[0].text), PERSON)


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": []}}, "response_format.json_schema.schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
            "response_format.json_schema.schema",
        ),
        ("json", "response_format"),
    ],
)
def test_bad_formats_name_the_field(server, response_format, param) -> None:
    answer = httpx.post(
        f"http://{server.http_address}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "response_format": response_format},
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
