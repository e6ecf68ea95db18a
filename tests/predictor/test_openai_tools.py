"""Tools and tool_choice on chat completions, called with the ``openai`` client.

The model is a tiny untrained GPT-2 whose tokenizer carries a small Hermes-style chat template
that renders the tools. Random weights never call a tool of their own accord, so a call that
parses and validates against its function's schema is the forced call's grammar at work, and
the parser that reads calls out of a model's free text is tested on texts directly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from language_model import make_tokenizer, tiny_gpt2
from serving_fixtures import served_language_model

from trainwire_predictor.generative.tools import ToolCallParser

pytestmark = pytest.mark.timeout(300)

MODEL = "tools-lm"
TOKEN = "tools-predict"
# Hermes / Qwen's shape: the tools in the system turn, calls as <tool_call>{json}</tool_call>.
TEMPLATE = """{%- if tools %}<|system|>
You may call these functions:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}Call one as <tool_call>{"name": <name>, "arguments": <arguments>}</tool_call>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|assistant|>
{% for call in message.tool_calls %}<tool_call>{"name": {{ call.function.name | tojson }}, \
"arguments": {{ call.function.arguments | tojson }}}</tool_call>
{% endfor %}
{%- elif message.role == "tool" %}<|tool|>
<tool_response>{{ message.content }}</tool_response>
{% else %}<|{{ message.role }}|>
{{ message.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["utc", "cet", "pst"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "what is the weather in the park"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    tokenizer = make_tokenizer()
    tokenizer.chat_template = TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer) -> Iterator[Any]:
    lm = tiny_gpt2(tokenizer, n_positions=1024, seed=5)
    tokens = json.dumps({"tool": {"token": TOKEN, "scopes": ["predict"]}})
    folder = tmp_path_factory.mktemp("tools-store")
    with served_language_model(
        folder, "run-tools", MODEL, lm, tokenizer, tokens=tokens, generate_max_batch=8, generate_max_tokens=300
    ) as server:
        yield server


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key=TOKEN, max_retries=0)


def _streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[list[dict[str, Any]], str | None, list[Any]]:
    """A streamed answer's calls put back together as OpenAI's clients do, its content, and its chunks."""
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    calls: dict[int, dict[str, Any]] = {}
    content = ""
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or ():
            call = calls.setdefault(piece.index, {"id": None, "name": None, "arguments": "", "pieces": 0})
            if piece.id is not None:
                assert call["id"] is None, "only a call's first chunk carries its id"
                call.update(id=piece.id, name=piece.function.name, type=piece.type)
            call["arguments"] += piece.function.arguments or ""
            call["pieces"] += 1
    return [calls[i] for i in sorted(calls)], content or None, chunks


def test_named_call_validates_and_streams_as_unary(client, tokenizer) -> None:
    kwargs = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "tool_choice": NAMED, "max_tokens": 200}
    answer = client.chat.completions.create(temperature=0, **kwargs)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    # The tools reached the model through its chat template: the prompt is the template's rendering.
    rendered = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert '"get_time"' in rendered
    assert answer.usage.prompt_tokens == len(tokenizer(rendered, add_special_tokens=False)["input_ids"])

    calls, content, chunks = _streamed(client, temperature=0, **kwargs)
    assert content is None
    [streamed] = calls
    assert streamed["name"] == "get_weather" and streamed["type"] == "function" and streamed["id"].startswith("call_")
    assert streamed["arguments"] == call.function.arguments  # greedy: the same call, sent in pieces
    assert streamed["pieces"] > 2
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == ["tool_calls"]


def test_required_picks_a_tool_each_choice(client) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=1.0,
        seed=3,
        n=3,
        max_tokens=200,
    )
    assert len(answer.choices) == 3
    for choice in answer.choices:
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_conversation_with_calls_renders_through_the_template(client, tokenizer) -> None:
    """An earlier call (no content) and the tool's answer reach the model as the template writes them."""
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "utc"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=8
    )
    choice = answer.choices[0]
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    local = [
        *history[:1],
        {**history[1], "tool_calls": [{"function": {"name": "get_time", "arguments": {"zone": "utc"}}}]},
    ]
    rendered = tokenizer.apply_chat_template(
        [*local, history[2]], tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert '<tool_call>{"name": "get_time", "arguments": {"zone": "utc"}}</tool_call>' in rendered
    assert answer.usage.prompt_tokens == len(tokenizer(rendered, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, "tool_choice.function.name"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{**TOOLS[0], "type": "retrieval"}]}, "tools[0].type"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]},
            "tools[0].function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters",
        ),
        ({"response_format": {"type": "json_object"}}, "tool_choice"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
        ({"messages": [{"role": "tool", "content": "noon"}]}, "messages[0].tool_call_id"),
    ],
)
def test_errors_name_the_field(server, change, param) -> None:
    doc = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", **change}
    answer = httpx.post(
        f"http://{server.http_address}/v1/chat/completions",
        json=doc,
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"


def test_tool_choice_needs_tools(client) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, tool_choice="required")
    assert caught.value.body["param"] == "tool_choice"


# --- the parser, on texts a model writes of its own accord ("auto") ------------------------------
TEXTS = [
    (
        'Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "note": "a } b"}}'
        '</tool_call>\n<tool_call>{"arguments": {"zone": "utc"}, "name": "get_time"}</tool_call>\n',
        "Let me look. ",
        [("get_weather", '{"city": "Paris", "note": "a } b"}'), ("get_time", '{"zone": "utc"}')],
    ),
    ("a < b and <tool_c", "a < b and <tool_c", []),
    ("<tool_call>not a call</tool_call> done", "<tool_call>not a call</tool_call> done", []),
    ('<tool_call>{"name": "get_time", "arguments": {"zone": "u', "", [("get_time", '{"zone": "u')]),
]


@pytest.mark.parametrize(("text", "content", "calls"), TEXTS)
def test_parser_reads_the_same_calls_whatever_the_pieces(text, content, calls) -> None:
    rng = random.Random(0)
    for attempt in range(100):
        parser, deltas, at = ToolCallParser(), [], 0
        while at < len(text):
            size = len(text) if attempt == 0 else rng.randint(1, 5)
            deltas += parser.feed(text[at : at + size])
            at += size
        deltas += parser.finish()
        assert "".join(d.text for d in deltas if d.kind == "content") == content
        assert [(c.name, c.arguments) for c in parser.calls] == calls
        starts = [d for d in deltas if d.kind == "call"]
        assert [(d.index, d.name) for d in starts] == [(i, name) for i, (name, _) in enumerate(calls)]
        for i, (_, arguments) in enumerate(calls):  # the pieces of each call's arguments add up to them
            assert "".join(d.text for d in deltas if d.kind == "arguments" and d.index == i) == arguments
