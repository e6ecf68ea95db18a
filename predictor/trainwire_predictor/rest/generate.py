"""The Open Inference Protocol's generate extension over REST (Triton's and MLServer's).

``POST /v2/models/{m}[/versions/{v}]/generate``: ``{"text_input": ..., "parameters": {...}}`` in,
``{"text_output", "finish_reason", "usage"}`` out; ``.../generate_stream``: the same, one
server-sent event per token. Sampling fields may sit at the top level (Triton) or in
``parameters`` (MLServer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from trainwire_core.auth import current_caller
from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_predictor.generative.requests import GenerateRequest, prompt_text, sampling_params, tenant_of
from trainwire_predictor.generative.service import GenerationStream, TextGenerator
from trainwire_predictor.http import SSE_HEADERS, sse_event
from trainwire_predictor.rest.errors import json_response

Body = Callable[[Request], Awaitable[dict[str, Any]]]
RouteMaker = Callable[[str, Callable[[Request], Awaitable[Response]], str], Route]


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
                **tenant_of(current_caller()),
            )
        )

    async def generate(self, request: Request) -> Response:
        stream = await self._open(request)
        text = await stream.text()
        return json_response(
            {
                "model_name": stream.model_name,
                "model_version": stream.model_version,
                "text_output": text,
                "finish_reason": stream.finish_reason,
                "usage": stream.usage(),
            }
        )

    async def generate_stream(self, request: Request) -> Response:
        stream = await self._open(request)

        async def events() -> AsyncIterator[bytes]:
            try:
                async for event in stream:
                    yield sse_event(
                        {
                            "model_name": stream.model_name,
                            "model_version": stream.model_version,
                            "text_output": event.text,
                            "index": event.index,
                            "finish_reason": event.finish_reason,
                        }
                    )
            except TrainwireError as exc:  # after the first byte: the stream's last event says so
                yield sse_event({"error": exc.message})

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
