"""The OpenAI data plane: typed requests in, generations on the shared ``TextGenerator``, typed answers out.

As KServe's ``protocol/rest/openai/dataplane.py`` sits under its OpenAI endpoints: the
endpoints parse and frame (JSON or server-sent events); this turns a request into a
generation and its tokens into OpenAI's completion objects, whole or as chunks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.generative.engine import DEADLINE, STOP
from trainwire_predictor.generative.requests import ChatMessage as Message
from trainwire_predictor.generative.requests import GenerateRequest, prompt_text, sampling_params
from trainwire_predictor.generative.service import GenerationStream, TextGenerator
from trainwire_predictor.openai.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionChoice,
    CompletionRequest,
    Delta,
    ModelCard,
    ModelList,
    Usage,
)


def finish_reason(reason: str) -> str:
    """OpenAI's finish_reason: ``stop`` and ``length`` as OpenAI's; ``deadline`` when the request's time ran out."""
    return reason if reason in (STOP, DEADLINE) else "length"


def usage(stream: GenerationStream) -> Usage:
    return Usage(**stream.usage())


class OpenAIDataPlane:
    """Completions and chat completions over the predictor's language models.

    Args:
        generator: Resolves, loads and checks each request's model and streams its tokens.
        model_names: Lists the served model names (``GET /v1/models``).
    """

    def __init__(self, generator: TextGenerator, model_names: Callable[[], Awaitable[list[str]]]) -> None:
        self.generator = generator
        self.model_names = model_names

    async def models(self) -> ModelList:
        created = int(time.time())
        return ModelList(data=[ModelCard(id=name, created=created) for name in await self.model_names()])

    async def _open(self, request: CompletionRequest | ChatCompletionRequest, routing_key: str) -> GenerationStream:
        if request.n != 1:
            raise InvalidArgumentError("n must be 1: one choice per request", field="n")
        name, _, version = request.model.partition(":")  # "model:version" names a version or alias
        params = sampling_params(request.sampling_fields(), self.generator.limits, temperature=1.0)
        key = request.user or routing_key
        if isinstance(request, ChatCompletionRequest):
            messages = tuple(Message(m.role, m.text()) for m in request.messages)
            generate = GenerateRequest(name, version, messages=messages, params=params, routing_key=key)
        else:
            prompt = prompt_text(request.prompt, "prompt")
            generate = GenerateRequest(name, version, prompt=prompt, params=params, routing_key=key)
        return await self.generator.open(generate)

    async def completion(self, request: CompletionRequest, routing_key: str = "") -> Completion:
        stream = await self._open(request, routing_key)
        text = await stream.text()
        choice = CompletionChoice(text=text, finish_reason=finish_reason(stream.finish_reason))
        return Completion(
            id=_id("cmpl-"), created=int(time.time()), model=request.model, choices=[choice], usage=usage(stream)
        )

    async def completion_stream(self, request: CompletionRequest, routing_key: str = "") -> AsyncIterator[Completion]:
        """Opens the generation (its errors are raised here), then yields a chunk per token."""
        stream = await self._open(request, routing_key)
        head = {"id": _id("cmpl-"), "created": int(time.time()), "model": request.model}

        async def chunks() -> AsyncIterator[Completion]:
            async for event in stream:
                if event.text:
                    yield Completion(**head, choices=[CompletionChoice(text=event.text, finish_reason=None)])
                if event.finish_reason is not None:
                    reason = finish_reason(event.finish_reason)
                    yield Completion(**head, choices=[CompletionChoice(text="", finish_reason=reason)])
            if request.include_usage:
                yield Completion(**head, choices=[], usage=usage(stream))

        return chunks()

    async def chat(self, request: ChatCompletionRequest, routing_key: str = "") -> ChatCompletion:
        stream = await self._open(request, routing_key)
        text = await stream.text()
        choice = ChatChoice(message=AssistantMessage(content=text), finish_reason=finish_reason(stream.finish_reason))
        return ChatCompletion(
            id=_id("chatcmpl-"), created=int(time.time()), model=request.model, choices=[choice], usage=usage(stream)
        )

    async def chat_stream(
        self, request: ChatCompletionRequest, routing_key: str = ""
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Opens the generation (its errors are raised here), then yields the role, a chunk per token, the end."""
        stream = await self._open(request, routing_key)
        head = {"id": _id("chatcmpl-"), "created": int(time.time()), "model": request.model}

        async def chunks() -> AsyncIterator[ChatCompletionChunk]:
            yield ChatCompletionChunk(**head, choices=[ChatChunkChoice(delta=Delta(role="assistant", content=""))])
            async for event in stream:
                if event.text:
                    yield ChatCompletionChunk(**head, choices=[ChatChunkChoice(delta=Delta(content=event.text))])
                if event.finish_reason is not None:
                    reason = finish_reason(event.finish_reason)
                    yield ChatCompletionChunk(**head, choices=[ChatChunkChoice(delta=Delta(), finish_reason=reason)])
            if request.include_usage:
                yield ChatCompletionChunk(**head, choices=[], usage=usage(stream))

        return chunks()


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex
