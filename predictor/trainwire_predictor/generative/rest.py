"""Token generation over REST: the Open Inference Protocol's generate extension and the OpenAI API.

Both are endpoint classes on the ``TextGenerator``; ``RestFrontEnd`` mounts their
routes beside inference, with the same tokens (``predict`` scope) and limits.

- ``POST /v2/models/{m}[/versions/{v}]/generate``: ``{"text_input": ..., "parameters": {...}}`` in,
  ``{"text_output": ...}`` out (Triton's and MLServer's extension);
  ``.../generate_stream``: the same, one server-sent event per token.
- ``POST /v1/completions``, ``POST /v1/chat/completions`` (``"stream": true``: server-sent
  chunks ending ``data: [DONE]``), ``GET /v1/models``: what the ``openai`` client calls.
  Errors are OpenAI's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_predictor.generative.requests import (
    GenerateRequest,
    chat_messages,
    prompt_text,
    sampling_params,
)
from trainwire_predictor.generative.service import GenerationStream, TextGenerator
from trainwire_predictor.rest.errors import http_status

Body = Callable[[Request], Awaitable[dict[str, Any]]]
RouteMaker = Callable[[str, Callable[[Request], Awaitable[Response]], str], Route]
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def _sse(doc: Any) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def _json(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc, separators=(",", ":")), status, media_type="application/json")


class GenerateEndpoints:
    """The OIP generate extension.

    Args:
        generator: What every endpoint calls.
        body: Reads a request's JSON object body within the size limit.
    """

    def __init__(self, generator: TextGenerator, body: Body) -> None:
        self.generator = generator
        self.body = body

    def routes(self, route: RouteMaker) -> list[Route]:
        return [
            route(f"{base}/{kind}", endpoint, "POST")
            for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")
            for kind, endpoint in (("generate", self.generate), ("generate_stream", self.generate_stream))
        ]

    async def _open(self, request: Request) -> GenerationStream:
        doc = await self.body(request)
        parameters = doc.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgumentError("parameters must be an object", field="parameters")
        # Sampling fields may sit at the top level (Triton) or in parameters (MLServer).
        fields = {**{k: v for k, v in doc.items() if k not in ("text_input", "parameters", "id")}, **parameters}
        prefix = "parameters." if parameters else ""
        return await self.generator.open(
            GenerateRequest(
                model_name=request.path_params["model"],
                model_version=request.path_params.get("version", ""),
                prompt=prompt_text(doc.get("text_input"), "text_input"),
                params=sampling_params(fields, self.generator.limits, prefix),
                routing_key=str(fields.get("routing_key") or request.headers.get("routing-key") or ""),
                prompt_field="text_input",
            )
        )

    async def generate(self, request: Request) -> Response:
        stream = await self._open(request)
        text = await stream.text()
        return _json(
            {
                "model_name": stream.model_name,
                "model_version": stream.model_version,
                "text_output": text,
                "finish_reason": stream.finish_reason,
                "usage": _usage(stream),
            }
        )

    async def generate_stream(self, request: Request) -> Response:
        stream = await self._open(request)

        async def events() -> AsyncIterator[bytes]:
            try:
                async for event in stream:
                    yield _sse(
                        {
                            "model_name": stream.model_name,
                            "model_version": stream.model_version,
                            "text_output": event.text,
                            "index": event.index,
                            "finish_reason": event.finish_reason,
                        }
                    )
            except TrainwireError as exc:  # after the first byte: the stream's last event says so
                yield _sse({"error": exc.message})

        return StreamingResponse(events(), media_type="text/event-stream", headers=_SSE_HEADERS)


def _usage(stream: GenerationStream) -> dict[str, int]:
    return {
        "prompt_tokens": stream.prompt_tokens,
        "completion_tokens": stream.completion_tokens,
        "total_tokens": stream.prompt_tokens + stream.completion_tokens,
    }


# OpenAI's error types by HTTP status: every other 4xx is the caller's request, every 5xx the server's.
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def openai_error_body(exc: TrainwireError, status: int) -> dict[str, Any]:
    """OpenAI's ``{"error": {"message", "type", "param", "code"}}`` for a trainwire error."""
    kind = _OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": exc.message, "type": kind, "param": exc.field or None, "code": None}}


def openai_error(exc: TrainwireError, status: int) -> Response:
    """An error as the OpenAI API answers it (what the ``openai`` client raises from)."""
    return _json(openai_error_body(exc, status), status)


class OpenAIEndpoints:
    """An OpenAI-compatible API (completions, chat completions, models) on the predictor's port.

    Args:
        generator: What every endpoint calls.
        body: Reads a request's JSON object body within the size limit.
        model_names: Lists the served model names (``GET /v1/models``).
    """

    def __init__(self, generator: TextGenerator, body: Body, model_names: Callable[[], Awaitable[list[str]]]) -> None:
        self.generator = generator
        self.body = body
        self.model_names = model_names

    def routes(self, route: RouteMaker) -> list[Route]:
        return [
            route("/v1/completions", self.completions, "POST"),
            route("/v1/chat/completions", self.chat_completions, "POST"),
            route("/v1/models", self.models, "GET"),
        ]

    async def models(self, request: Request) -> Response:
        created = int(time.time())
        names = await self.model_names()
        return _json(
            {
                "object": "list",
                "data": [{"id": n, "object": "model", "created": created, "owned_by": "trainwire"} for n in names],
            }
        )

    async def _open(self, request: Request, chat: bool) -> tuple[dict[str, Any], GenerationStream]:
        doc = await self.body(request)
        model = doc.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must name a model", field="model")
        if doc.get("n", 1) != 1:
            raise InvalidArgumentError("n must be 1: one choice per request", field="n")
        name, _, version = model.partition(":")  # "model:version" names a version or alias
        fields = dict(doc)
        if chat and doc.get("max_completion_tokens") is not None:
            fields["max_tokens"] = doc["max_completion_tokens"]
        params = sampling_params(fields, self.generator.limits, temperature=1.0)
        routing_key = str(doc.get("user") or request.headers.get("routing-key") or "")
        if chat:
            req = GenerateRequest(
                name, version, messages=chat_messages(doc.get("messages")), params=params, routing_key=routing_key
            )
        else:
            req = GenerateRequest(
                name, version, prompt=prompt_text(doc.get("prompt"), "prompt"), params=params, routing_key=routing_key
            )
        return doc, await self.generator.open(req)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def _answer(self, request: Request, chat: bool) -> Response:
        doc, stream = await self._open(request, chat)
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        head = {"id": ident, "created": created, "model": doc["model"]}
        if not doc.get("stream"):
            text = await stream.text()
            finish = _finish(stream.finish_reason)
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                if chat
                else {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            )
            kind = "chat.completion" if chat else "text_completion"
            return _json({**head, "object": kind, "choices": [choice], "usage": _usage(stream)})
        include_usage = bool((doc.get("stream_options") or {}).get("include_usage"))
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None, first: bool = False) -> bytes:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
                if text:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            return _sse({**head, "object": kind, "choices": [choice]})

        async def events() -> AsyncIterator[bytes]:
            try:
                if chat:
                    yield chunk(None, None, first=True)
                async for event in stream:
                    if event.text:
                        yield chunk(event.text, None)
                    if event.finish_reason is not None:
                        yield chunk(None, _finish(event.finish_reason))
                if include_usage:
                    yield _sse({**head, "object": kind, "choices": [], "usage": _usage(stream)})
            except TrainwireError as exc:  # after the first byte: the stream's last event says so
                yield _sse(openai_error_body(exc, http_status(exc)))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=_SSE_HEADERS)


def _finish(reason: str) -> str:
    """OpenAI's finish_reason: ``stop`` and ``length`` as OpenAI's; ``deadline`` when the request's time ran out."""
    return reason if reason in ("stop", "deadline") else "length"
