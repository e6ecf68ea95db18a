"""The OpenAI API's routes on the predictor's REST port: what the ``openai`` client calls.

``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /v1/embeddings`` (``"stream": true``: server-sent
chunks ending ``data: [DONE]``) and ``GET /v1/models``, with the same tokens (``predict``
scope) and limits as inference. Errors are OpenAI's ``{"error": {"message", "type", "param",
"code"}}``, in the body or, once a stream has begun, as its last event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from trainwire_core.errors import TrainwireError
from trainwire_predictor.http import SSE_HEADERS, http_status, sse_event
from trainwire_predictor.openai.dataplane import OpenAIDataPlane
from trainwire_predictor.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    ErrorInfo,
    ErrorResponse,
    parse,
)

Body = Callable[[Request], Awaitable[dict[str, Any]]]
RouteMaker = Callable[[str, Callable[[Request], Awaitable[Response]], str], Route]

# OpenAI's error types by HTTP status: every other 4xx is the caller's request, every 5xx the server's.
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def openai_error_body(exc: TrainwireError, status: int) -> ErrorResponse:
    """OpenAI's error object for a trainwire error."""
    kind = _OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return ErrorResponse(error=ErrorInfo(message=exc.message, type=kind, param=exc.field or None))


def openai_error(exc: TrainwireError, status: int) -> Response:
    """An error as the OpenAI API answers it (what the ``openai`` client raises from)."""
    return _json(openai_error_body(exc, status), status)


def _json(doc: BaseModel, status: int = 200) -> Response:
    return Response(doc.model_dump_json(), status, media_type="application/json")


class OpenAIEndpoints:
    """The OpenAI routes over one ``OpenAIDataPlane``.

    Args:
        dataplane: What every endpoint calls.
        body: Reads a request's JSON object body within the size limit.
    """

    def __init__(self, dataplane: OpenAIDataPlane, body: Body) -> None:
        self.dataplane = dataplane
        self.body = body

    def routes(self, route: RouteMaker) -> list[Route]:
        return [
            route("/v1/completions", self.completions, "POST"),
            route("/v1/chat/completions", self.chat_completions, "POST"),
            route("/v1/embeddings", self.embeddings, "POST"),
            route("/v1/models", self.models, "GET"),
        ]

    async def models(self, request: Request) -> Response:
        return _json(await self.dataplane.models())

    async def embeddings(self, request: Request) -> Response:
        typed: EmbeddingRequest = parse(EmbeddingRequest, await self.body(request))
        return _json(await self.dataplane.embeddings(typed, request.headers.get("routing-key") or ""))

    async def completions(self, request: Request) -> Response:
        typed: CompletionRequest = parse(CompletionRequest, await self.body(request))
        key = request.headers.get("routing-key") or ""
        if typed.stream:
            return _streamed(await self.dataplane.completion_stream(typed, key))
        return _json(await self.dataplane.completion(typed, key))

    async def chat_completions(self, request: Request) -> Response:
        typed: ChatCompletionRequest = parse(ChatCompletionRequest, await self.body(request))
        key = request.headers.get("routing-key") or ""
        if typed.stream:
            return _streamed(await self.dataplane.chat_stream(typed, key))
        return _json(await self.dataplane.chat(typed, key))


def _streamed(chunks: AsyncIterator[BaseModel]) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                doc = chunk.model_dump()
                if doc.get("usage") is None:
                    doc.pop("usage", None)  # only the last chunk, when asked for
                yield sse_event(doc)
        except TrainwireError as exc:  # after the first byte: the stream's last event says so
            yield sse_event(openai_error_body(exc, http_status(exc)).model_dump())
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
