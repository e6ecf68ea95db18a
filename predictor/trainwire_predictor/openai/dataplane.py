"""The OpenAI data plane: typed requests in, generations on the shared ``TextGenerator``, typed answers out.

As KServe's ``protocol/rest/openai/dataplane.py`` sits under its OpenAI endpoints: the
endpoints parse and frame (JSON or server-sent events); this turns a request into
generations (one per prompt and choice: ``n`` of each) and their tokens into OpenAI's
completion objects, whole or as chunks.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainwire_core.auth import current_caller
from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.generative.embeddings import MAX_INPUTS, TextEmbedder
from trainwire_predictor.generative.engine import DEADLINE, STOP, TokenEvent, TokenLogprob
from trainwire_predictor.generative.grammar import Grammar, response_format_grammar, tool_call_grammar
from trainwire_predictor.generative.requests import ChatMessage as Message
from trainwire_predictor.generative.requests import (
    GenerateRequest,
    logprob_count,
    prompt_text,
    sampling_params,
    tenant_of,
)
from trainwire_predictor.generative.service import GenerationStream, TextGenerator
from trainwire_predictor.generative.tools import (
    NO_PARAMETERS,
    Tool,
    ToolCallParser,
    ToolChoice,
    parse_tool_choice,
    parse_tools,
)
from trainwire_predictor.generative.tools import ToolCallDelta as ParsedDelta
from trainwire_predictor.openai.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatLogprob,
    ChatLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    Delta,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    FunctionDelta,
    ModelCard,
    ModelList,
    ToolCall,
    ToolCallDelta,
    ToolCallFunction,
    TopLogprob,
    Usage,
)

# The most choices one request may ask for (n times its prompts): each holds a decode slot.
MAX_CHOICES = 128


def finish_reason(reason: str, called: bool = False) -> str:
    """OpenAI's finish_reason: ``stop`` and ``length`` as OpenAI's; ``deadline`` when the request's time ran out.

    ``tool_calls`` when the model stopped after calling tools (``called``).
    """
    if called and reason == STOP:
        return "tool_calls"
    return reason if reason in (STOP, DEADLINE) else "length"


@dataclass
class _Choice:
    """One choice's generation and what it has produced so far."""

    index: int
    stream: GenerationStream
    prompt_first: bool  # the first choice of its prompt: counts the prompt's tokens in usage
    text: str = ""
    events: list[TokenEvent] = field(default_factory=list)
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    # Reads tool calls out of the text (a chat with tools whose tool_choice is not "none").
    tools: ToolCallParser | None = None


def usage(choices: list[_Choice]) -> Usage:
    """OpenAI's usage: each prompt's tokens once, every choice's generated tokens."""
    prompt = sum(c.stream.prompt_tokens for c in choices if c.prompt_first)
    completion = sum(c.stream.completion_tokens for c in choices)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


class OpenAIDataPlane:
    """Completions and chat completions over the predictor's language models.

    Args:
        generator: Resolves, loads and checks each request's model and streams its tokens.
        model_names: Lists the served model names (``GET /v1/models``).
    """

    def __init__(self, generator: TextGenerator, model_names: Callable[[], Awaitable[list[str]]]) -> None:
        self.generator = generator
        self.model_names = model_names
        self.embedder = TextEmbedder(generator.router, generator.recorder)

    async def models(self) -> ModelList:
        created = int(time.time())
        names = await self.model_names()
        # Whether each is an adapter is read once per checkpoint (they are immutable), then cached.
        parents = [await self.generator.adapter_parent(name) for name in names]
        return ModelList(
            data=[
                ModelCard(id=name, created=created, parent=parent) for name, parent in zip(names, parents, strict=True)
            ]
        )

    async def _open(self, request: CompletionRequest | ChatCompletionRequest, routing_key: str) -> list[_Choice]:
        """Opens every choice's generation (``n`` per prompt); none is left running if one fails."""
        name, _, version = request.model.partition(":")  # "model:version" names a version or alias
        key = request.user or routing_key
        chat = isinstance(request, ChatCompletionRequest)
        if chat:
            if request.top_logprobs is not None and not request.logprobs:
                raise InvalidArgumentError("top_logprobs needs logprobs: true", field="top_logprobs")
            logprobs = (logprob_count(request.top_logprobs, "top_logprobs") or 0) if request.logprobs else None
            scoring = False
        else:
            logprobs = logprob_count(request.logprobs, "logprobs")
            scoring = request.echo
        params = sampling_params(request.sampling_fields(), self.generator.limits, temperature=1.0, scoring=scoring)
        tenant = tenant_of(current_caller())
        tools: tuple[Tool, ...] = ()
        choice = ToolChoice("none")
        if chat:
            tools = parse_tools(request.tools)
            choice = parse_tool_choice(request.tool_choice, tools)
        # Compiling a schema is the grammar library's work: off the event loop.
        grammar = await asyncio.to_thread(response_format_grammar, request.response_format)
        if choice.forced:
            if grammar is not None:
                raise InvalidArgumentError(
                    "tool_choice required or a function forces a tool call: response_format cannot shape it too",
                    field="tool_choice",
                )
            parallel = choice.mode == "required" and request.parallel_tool_calls is not False
            grammar = await asyncio.to_thread(_tool_grammar, tools, choice, parallel)
        params = dataclasses.replace(
            params,
            logprobs=logprobs,
            prompt_logprobs=logprobs if scoring and logprobs is not None else None,
            grammar=grammar,
        )
        if chat:
            messages = _messages(request)
            templated = tuple(t.template() for t in tools)
            prompts = [
                GenerateRequest(
                    name,
                    version,
                    messages=messages,
                    params=params,
                    routing_key=key,
                    tools=templated,
                    tools_chars=len(json.dumps(templated)) if templated else 0,
                    **tenant,
                )
            ]
        else:
            prompts = [
                GenerateRequest(name, version, prompt=text, prompt_ids=ids, params=params, routing_key=key, **tenant)
                for text, ids in _prompts(request.prompt)
            ]
        if not 1 <= request.n or len(prompts) * request.n > MAX_CHOICES:
            raise InvalidArgumentError(
                f"n must be at least 1, with n times the prompts at most {MAX_CHOICES}", field="n"
            )
        choices: list[_Choice] = []
        try:
            for prompt in prompts:
                for j in range(request.n):
                    seeded = prompt
                    if j and params.seed is not None:  # each choice its own draw, all reproducible
                        seed = (params.seed + j) % 2**64
                        seeded = dataclasses.replace(prompt, params=dataclasses.replace(params, seed=seed))
                    parser = ToolCallParser() if choice.mode != "none" else None
                    choices.append(_Choice(len(choices), await self.generator.open(seeded), j == 0, tools=parser))
        except BaseException:
            for choice in choices:
                choice.stream.cancel()
            raise
        return choices

    # --- embeddings -------------------------------------------------------------------------------
    async def embeddings(self, request: EmbeddingRequest, routing_key: str = "") -> EmbeddingList:
        """Each input's embedding (mean-pooled and normalised), as floats or base64 float32."""
        name, _, version = request.model.partition(":")
        texts, ids = _embedding_inputs(request.input)
        embedded = await self.embedder.embed(
            name, version, texts=texts, token_ids=ids, routing_key=request.user or routing_key
        )
        width = len(embedded.vectors[0])
        if request.dimensions is not None and request.dimensions != width:
            # Matryoshka truncation is only right for models trained for it: the model's own width only.
            raise InvalidArgumentError(
                f"dimensions must be the model's {width} (this model's embeddings are not shortened)",
                field="dimensions",
            )
        data = []
        for i, vector in enumerate(embedded.vectors):
            value: list[float] | str = vector
            if request.encoding_format == "base64":
                value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
            data.append(Embedding(embedding=value, index=i))
        tokens = embedded.prompt_tokens
        return EmbeddingList(
            data=data, model=request.model, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
        )

    # --- completions ------------------------------------------------------------------------------
    async def completion(self, request: CompletionRequest, routing_key: str = "") -> Completion:
        choices = await self._open(request, routing_key)
        async for choice, event in _merged(choices):
            choice.events.append(event)
        out = []
        for choice in choices:
            first = choice.events[0] if choice.events else None
            prompt_logprobs = first.prompt_logprobs if first is not None else None
            echoed = _prompt_text(choice.stream) if request.echo else ""
            text = echoed + "".join(e.text for e in choice.events)
            logprobs = None
            if request.logprobs is not None:
                logprobs = CompletionLogprobs()
                if request.echo:
                    _add_completion_logprobs(logprobs, choice.stream, choice.stream.prompt_ids, prompt_logprobs, 0)
                entries = [e for e in choice.events if e.logprob is not None]
                _add_completion_logprobs(
                    logprobs,
                    choice.stream,
                    [e.logprob.token_id for e in entries],
                    [e.logprob for e in entries],
                    len(echoed),
                )
            out.append(
                CompletionChoice(
                    index=choice.index,
                    text=text,
                    finish_reason=finish_reason(choice.stream.finish_reason),
                    logprobs=logprobs,
                )
            )
        return Completion(
            id=_id("cmpl-"), created=int(time.time()), model=request.model, choices=out, usage=usage(choices)
        )

    async def completion_stream(self, request: CompletionRequest, routing_key: str = "") -> AsyncIterator[Completion]:
        """Opens the generations (their errors are raised here), then yields a chunk per token."""
        choices = await self._open(request, routing_key)
        head = {"id": _id("cmpl-"), "created": int(time.time()), "model": request.model}

        async def chunks() -> AsyncIterator[Completion]:
            async for choice, event in _merged(choices):
                logprobs = None
                if request.echo and not choice.events:  # the prompt first, scored when asked
                    echoed = _prompt_text(choice.stream)
                    if request.logprobs is not None:
                        logprobs = CompletionLogprobs()
                        ids = choice.stream.prompt_ids
                        _add_completion_logprobs(logprobs, choice.stream, ids, event.prompt_logprobs, 0)
                    choice.text += echoed
                    yield Completion(
                        **head,
                        choices=[
                            CompletionChoice(index=choice.index, text=echoed, finish_reason=None, logprobs=logprobs)
                        ],
                    )
                choice.events.append(event)
                if event.text or (request.logprobs is not None and event.logprob is not None):
                    logprobs = None
                    if request.logprobs is not None and event.logprob is not None:
                        logprobs = CompletionLogprobs()
                        _add_completion_logprobs(
                            logprobs, choice.stream, [event.logprob.token_id], [event.logprob], len(choice.text)
                        )
                    choice.text += event.text
                    yield Completion(
                        **head,
                        choices=[
                            CompletionChoice(index=choice.index, text=event.text, finish_reason=None, logprobs=logprobs)
                        ],
                    )
                if event.finish_reason is not None:
                    reason = finish_reason(event.finish_reason)
                    yield Completion(
                        **head, choices=[CompletionChoice(index=choice.index, text="", finish_reason=reason)]
                    )
            if request.include_usage:
                yield Completion(**head, choices=[], usage=usage(choices))

        return chunks()

    # --- chat -------------------------------------------------------------------------------------
    async def chat(self, request: ChatCompletionRequest, routing_key: str = "") -> ChatCompletion:
        choices = await self._open(request, routing_key)
        async for choice, event in _merged(choices):
            choice.events.append(event)
        out = []
        for choice in choices:
            logprobs = None
            if request.logprobs:
                logprobs = ChatLogprobs(
                    content=[_chat_logprob(choice.stream, e.logprob) for e in choice.events if e.logprob]
                )
            message = AssistantMessage(content="".join(e.text for e in choice.events))
            called = False
            if choice.tools is not None:  # the same parser as a stream's, given the whole text
                parsed = choice.tools.feed(message.content or "") + choice.tools.finish()
                calls = choice.tools.calls
                called = bool(calls)
                content = "".join(d.text for d in parsed if d.kind == "content")
                message = AssistantMessage(
                    content=content or (None if called else ""),
                    tool_calls=[
                        ToolCall(id=c.id, function=ToolCallFunction(name=c.name, arguments=c.arguments)) for c in calls
                    ]
                    or None,
                )
            out.append(
                ChatChoice(
                    index=choice.index,
                    message=message,
                    finish_reason=finish_reason(choice.stream.finish_reason, called),
                    logprobs=logprobs,
                )
            )
        return ChatCompletion(
            id=_id("chatcmpl-"), created=int(time.time()), model=request.model, choices=out, usage=usage(choices)
        )

    async def chat_stream(
        self, request: ChatCompletionRequest, routing_key: str = ""
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Opens the generations (their errors are raised here), then yields the role, a chunk per token, the end."""
        choices = await self._open(request, routing_key)
        head = {"id": _id("chatcmpl-"), "created": int(time.time()), "model": request.model}

        async def chunks() -> AsyncIterator[ChatCompletionChunk]:
            for choice in choices:
                role = ChatChunkChoice(index=choice.index, delta=Delta(role="assistant", content=""))
                yield ChatCompletionChunk(**head, choices=[role])
            async for choice, event in _merged(choices):
                logprobs = None
                if request.logprobs and event.logprob is not None:
                    logprobs = ChatLogprobs(content=[_chat_logprob(choice.stream, event.logprob)])
                if choice.tools is None:
                    deltas = [Delta(content=event.text)] if event.text else []
                else:  # content and tool calls as the parser reads them out of the text so far
                    parsed = choice.tools.feed(event.text)
                    if event.finish_reason is not None:
                        parsed += choice.tools.finish()
                    deltas = [_delta(d) for d in parsed]
                if logprobs is not None and not deltas:
                    deltas = [Delta(content="")]  # the token's log-probability, its text held by the parser
                for delta in deltas:
                    yield ChatCompletionChunk(
                        **head, choices=[ChatChunkChoice(index=choice.index, delta=delta, logprobs=logprobs)]
                    )
                    logprobs = None
                if event.finish_reason is not None:
                    called = choice.tools is not None and bool(choice.tools.calls)
                    reason = finish_reason(event.finish_reason, called)
                    end = ChatChunkChoice(index=choice.index, delta=Delta(), finish_reason=reason)
                    yield ChatCompletionChunk(**head, choices=[end])
            if request.include_usage:
                yield ChatCompletionChunk(**head, choices=[], usage=usage(choices))

        return chunks()


async def _merged(choices: list[_Choice]) -> AsyncIterator[tuple[_Choice, TokenEvent]]:
    """Every choice's events as they come (one choice's in order); leaving early ends them all."""
    if len(choices) == 1:  # the common case: no tasks
        async for event in choices[0].stream:
            yield choices[0], event
        return
    queue: asyncio.Queue[tuple[_Choice, TokenEvent | None, BaseException | None]] = asyncio.Queue()

    async def follow(choice: _Choice) -> None:
        try:
            async for event in choice.stream:
                queue.put_nowait((choice, event, None))
            queue.put_nowait((choice, None, None))
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            queue.put_nowait((choice, None, exc))

    tasks = [asyncio.create_task(follow(choice)) for choice in choices]
    try:
        running = len(tasks)
        while running:
            choice, event, error = await queue.get()
            if error is not None:
                raise error
            if event is None:
                running -= 1
            else:
                yield choice, event
    finally:
        for task in tasks:
            task.cancel()  # a choice still generating ends (its stream cancels the generation)
        for choice in choices:
            choice.stream.cancel()


def _delta(parsed: ParsedDelta) -> Delta:
    """A parsed piece as a chat chunk's delta: content, a call's start (id, name) or a piece of its arguments."""
    if parsed.kind == "content":
        return Delta(content=parsed.text)
    if parsed.kind == "call":
        function = FunctionDelta(name=parsed.name, arguments="")
        return Delta(tool_calls=[ToolCallDelta(index=parsed.index, id=parsed.id, type="function", function=function)])
    return Delta(tool_calls=[ToolCallDelta(index=parsed.index, function=FunctionDelta(arguments=parsed.text))])


def _messages(request: ChatCompletionRequest) -> tuple[Message, ...]:
    """The chat's messages, with their tool calls and the calls they answer; content is needed but on calls."""
    out = []
    for i, m in enumerate(request.messages):
        calls = tuple((c.id, c.function.name, c.function.arguments) for c in m.tool_calls or ())
        if m.content is None and not (m.role == "assistant" and calls):
            raise InvalidArgumentError(
                f"messages[{i}].content is needed (only an assistant's tool calls may go without)",
                field=f"messages[{i}].content",
            )
        if m.role == "tool" and m.tool_call_id is None:
            raise InvalidArgumentError(
                f"messages[{i}].tool_call_id names the call a tool message answers", field=f"messages[{i}].tool_call_id"
            )
        out.append(Message(m.role, m.text(), calls, m.tool_call_id, m.name))
    return tuple(out)


def _tool_grammar(tools: tuple[Tool, ...], choice: ToolChoice, parallel: bool) -> Grammar:
    """The grammar of the forced call: the named function's, or (required) any tool's."""
    functions = [
        (t.name, dict(t.parameters or NO_PARAMETERS), f"tools[{i}].function.parameters")
        for i, t in enumerate(tools)
        if choice.mode == "required" or t.name == choice.name
    ]
    return tool_call_grammar(functions, parallel=parallel)


def _prompts(value: Any) -> list[tuple[str, tuple[int, ...]]]:
    """The completion request's prompts: (text, ()) for a text, ("", ids) for token ids."""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [("", tuple(value))]
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        for i, ids in enumerate(value):
            if not ids:
                raise InvalidArgumentError(f"prompt[{i}] must hold token ids", field=f"prompt[{i}]")
        return [("", tuple(ids)) for ids in value]
    if isinstance(value, list) and len(value) > 1:
        return [(prompt_text(text, f"prompt[{i}]"), ()) for i, text in enumerate(value)]
    return [(prompt_text(value, "prompt"), ())]


def _embedding_inputs(value: Any) -> tuple[list[str] | None, list[list[int]] | None]:
    """The embedding request's inputs: (texts, None) or (None, token id lists), each non-empty."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise InvalidArgumentError("input must not be empty", field="input")
    if len(value) > MAX_INPUTS:
        raise InvalidArgumentError(f"input has {len(value)} entries, over the limit of {MAX_INPUTS}", field="input")
    if all(isinstance(v, int) for v in value):
        return None, [list(value)]
    for i, entry in enumerate(value):
        if not entry:
            raise InvalidArgumentError(f"input[{i}] must not be empty", field=f"input[{i}]")
    if isinstance(value[0], str):
        return list(value), None
    return None, [list(ids) for ids in value]


def _prompt_text(stream: GenerationStream) -> str:
    return stream.tokenizer.decode(list(stream.prompt_ids), skip_special_tokens=False)


def _token(stream: GenerationStream, token_id: int) -> str:
    return stream.tokenizer.decode([token_id], skip_special_tokens=False)


def _add_completion_logprobs(
    out: CompletionLogprobs,
    stream: GenerationStream,
    ids: Any,
    entries: Any,
    offset: int,
) -> None:
    """Appends each token's entry: its text, log-probability, alternatives (with the token itself, as vLLM's)."""
    entries = entries or [None] * len(ids)
    for token_id, entry in zip(ids, entries, strict=True):
        text = _token(stream, token_id)
        out.tokens.append(text)
        out.text_offset.append(offset)
        offset += len(text)
        if entry is None:  # the prompt's first token: nothing before it to predict it
            out.token_logprobs.append(None)
            out.top_logprobs.append(None)
            continue
        out.token_logprobs.append(entry.logprob)
        top = {_token(stream, i): lp for i, lp in entry.top}
        top.setdefault(text, entry.logprob)
        out.top_logprobs.append(top)


def _chat_logprob(stream: GenerationStream, entry: TokenLogprob) -> ChatLogprob:
    def one(token_id: int, logprob: float) -> TopLogprob:
        text = _token(stream, token_id)
        return TopLogprob(token=text, logprob=logprob, bytes=list(_token_bytes(stream.tokenizer, token_id, text)))

    head = one(entry.token_id, entry.logprob)
    return ChatLogprob(**head.model_dump(), top_logprobs=[one(i, lp) for i, lp in entry.top])


def _token_bytes(tokenizer: Any, token_id: int, text: str) -> bytes:
    """A token's own bytes: a byte-level BPE token's may be part of a character, which its text cannot show."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    table = _byte_decoder()
    if isinstance(piece, str) and piece and all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return text.encode("utf-8")


_BYTE_DECODER: dict[str, int] = {}


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character to byte (the inverse of its ``bytes_to_unicode``)."""
    if not _BYTE_DECODER:
        printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
        extra = 0
        for byte in range(256):
            if byte in printable:
                _BYTE_DECODER[chr(byte)] = byte
            else:
                _BYTE_DECODER[chr(256 + extra)] = byte
                extra += 1
    return _BYTE_DECODER


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex
