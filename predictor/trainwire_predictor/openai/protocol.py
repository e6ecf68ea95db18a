"""The OpenAI API's messages as typed models (as vLLM's ``entrypoints/openai/protocol.py``).

Requests are checked for their types here, each error naming the field as OpenAI
spells it (``messages[0].role``); the values' ranges are checked where every
protocol's are (``generative.requests``). Fields OpenAI defines that trainwire does
not act on are accepted and left alone, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from trainwire_core.errors import InvalidArgumentError

Role = Literal["system", "user", "assistant", "developer", "tool"]


class _Request(BaseModel):
    # Strict: "hot" is no temperature and true no token count; unknown fields pass (OpenAI adds them often).
    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    # {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}
    response_format: dict[str, Any] | None = None
    # trainwire's own: the longest this generation may run (at most the operator's limit).
    timeout_s: float | None = None

    def sampling_fields(self) -> dict[str, Any]:
        """The sampling fields as ``generative.requests.sampling_params`` takes them."""
        keys = (
            "max_tokens",
            "temperature",
            "top_p",
            "seed",
            "stop",
            "timeout_s",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
        )
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(_Request):
    """``POST /v1/completions``.

    ``prompt`` is a text, texts (one choice each, ``n`` apiece), token ids or lists of token ids
    (what ``lm-eval`` sends). ``logprobs`` asks each token's log-probability with that many
    alternatives; with ``echo`` the prompt is returned before the text and, with ``logprobs``,
    scored (``max_tokens`` 0: scored only).
    """

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    name: str
    arguments: str  # a JSON text, as OpenAI gives it


class MessageToolCall(BaseModel):
    """A tool call of an earlier assistant message, sent back with the conversation."""

    model_config = ConfigDict(strict=True, extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: Role
    # None only on an assistant message that called tools (checked with the request).
    content: str | list[TextPart] | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text (OpenAI's content parts joined)."""
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    # Checked field by field in ``generative.tools`` (each error names its field as OpenAI does).
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    def sampling_fields(self) -> dict[str, Any]:
        fields = super().sampling_fields()
        if self.max_completion_tokens is not None:
            fields["max_tokens"] = self.max_completion_tokens
        return fields


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``: ``input`` is a text, texts, token ids or lists of token ids."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def parse(kind: type[BaseModel], doc: dict[str, Any]) -> Any:
    """``doc`` as a ``kind`` request.

    Raises:
        InvalidArgumentError: A field of the wrong type, or missing, named as OpenAI spells it.
    """
    try:
        return kind.model_validate(doc)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = field_name(first["loc"])
        raise InvalidArgumentError(f"{field or 'the request'}: {first['msg']}", field=field) from None


def field_name(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as OpenAI names fields: ``messages[0].content``."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part == "str" or "[" in str(part):
            break  # which member of a union failed: the field is named already
        else:
            name += f".{part}" if name else str(part)
    return name


# --- responses ------------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    """The completions API's (legacy) log-probabilities: parallel lists, one entry per token."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ToolCallFunction(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None

    @model_serializer(mode="wrap")
    def _present(self, handler: Any) -> dict[str, Any]:
        # tool_calls only when the model called tools (OpenAI's answers leave it out otherwise).
        doc = handler(self)
        if doc.get("tool_calls") is None:
            doc.pop("tool_calls", None)
        return doc


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatLogprob(TopLogprob):
    """One generated token's log-probability and its most likely alternatives (chat's shape)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatLogprob] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call: the first has its id, type and name, the others arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta

    @model_serializer(mode="wrap")
    def _present(self, handler: Any) -> dict[str, Any]:
        doc = handler(self)
        doc["function"] = {k: v for k, v in doc["function"].items() if v is not None}
        return {k: v for k, v in doc.items() if v is not None}


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None

    @model_serializer(mode="wrap")
    def _present(self, handler: Any) -> dict[str, Any]:
        # A delta carries only what changed: no null role, content or tool calls.
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "trainwire"
    # A LoRA adapter's base model (as vLLM lists its adapters); None for a model of its own.
    parent: str | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    # A list of floats, or (encoding_format base64) their little-endian float32 bytes in base64.
    embedding: list[float] | str
    index: int


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo
