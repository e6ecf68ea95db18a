"""The Open Inference Protocol over REST (KServe v2, Triton's binary tensor data extension) on the data plane.

Starlette endpoints served by uvicorn (httptools, on the predictor's own event
loop beside the grpc.aio server) that only convert: HTTP in, ``DataPlane``
calls, HTTP out. Errors are the trainwire family, answered as KServe's
``{"error": "..."}`` with the HTTP status ``http.HTTP_STATUS`` maps their code to.

Routes (``{m}`` a run name or id, ``{v}`` a checkpoint id):

- ``GET /v2/health/live``, ``GET /v2/health/ready``: open, like gRPC health checking;
- ``GET /v2``: server metadata;
- ``GET /v2/models/{m}[/versions/{v}]``, ``.../ready``, ``POST .../infer``;
- ``GET /v2/models[/{m}[/versions/{v}]]/stats``: Triton's statistics extension;
- ``POST /v2/repository/index``, ``POST /v2/repository/models/{m}/load|unload``;
- ``GET /v2/systemsharedmemory[/region/{r}]/status``, ``POST /v2/systemsharedmemory/region/{r}/register``,
  ``POST /v2/systemsharedmemory[/region/{r}]/unregister``: Triton's system shared memory extension
  (``/v2/cudasharedmemory/...`` answers 501, but its unregister: no CUDA region is ever registered);
- ``POST /v2/models/{m}[/versions/{v}]/generate|generate_stream``, ``POST /v1/completions``,
  ``POST /v1/chat/completions``, ``GET /v1/models``: token generation (``rest.generate`` and the
  OpenAI front end, ``openai``, mounted here on the same port).

With tokens configured, every route but health needs ``authorization: Bearer
<token>`` with the ``predict`` scope (load and unload, shared memory register and
unregister: ``admin``), the same
table and scopes as the gRPC service.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from trainwire_core.auth import ADMIN, ANYONE, PREDICT, Caller, TokenTable, reset_caller, set_caller
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError, TrainwireError, UnauthenticatedError
from trainwire_predictor.dataplane import EXTENSIONS, SERVER_NAME, DataPlane, config_json
from trainwire_predictor.http import PARSE_OFF_LOOP_BYTES, BodyTooLargeError, http_status
from trainwire_predictor.mlflow_scoring.endpoints import MlflowScoringEndpoints
from trainwire_predictor.models import TensorSpec
from trainwire_predictor.openai.dataplane import OpenAIDataPlane
from trainwire_predictor.openai.endpoints import OpenAIEndpoints, openai_error
from trainwire_predictor.rest.codec import HEADER_LENGTH, encode_infer_response, parse_infer_request, parse_json
from trainwire_predictor.rest.errors import error_response, json_response
from trainwire_predictor.rest.generate import GenerateEndpoints
from trainwire_predictor.shared_memory import cuda_unimplemented

logger = logging.getLogger(__name__)

_HEADER_LENGTH = HEADER_LENGTH.encode()
_UNAUTHENTICATED = "missing or wrong 'authorization: Bearer <token>' header"


def _tensors(specs: list[TensorSpec]) -> list[dict[str, Any]]:
    return [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in specs]


class _AsgiEndpoint:
    """Has Starlette's router call an ``async (scope, receive, send)`` method as an ASGI app (not a view)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class RestFrontEnd:
    """The REST endpoints of one predictor.

    Args:
        dataplane: What every endpoint calls.
        tokens: Accepted bearer tokens (empty: no check).
        max_body_bytes: Largest request body; a larger one is answered 413.
        mlflow_default_model: The model MLflow's ``POST /invocations`` scores with ("": none).
    """

    def __init__(
        self,
        dataplane: DataPlane,
        tokens: TokenTable | None = None,
        max_body_bytes: int = 64 << 20,
        mlflow_default_model: str = "",
    ) -> None:
        self.dataplane = dataplane
        self.mlflow_default_model = mlflow_default_model
        self.tokens = tokens if tokens else None
        self.max_body_bytes = max_body_bytes

    # --- plumbing --------------------------------------------------------------
    def _authorize(self, header: str | None, scope: str) -> Caller:
        if self.tokens is None:
            return ANYONE
        caller = self.tokens.identify([("authorization", header)] if header is not None else [])
        if caller is None:
            raise UnauthenticatedError(_UNAUTHENTICATED)
        if scope not in caller.scopes:
            raise PermissionDeniedError(f"token {caller.name!r} lacks the {scope!r} scope", field=scope)
        return caller

    async def _body(self, request: Request) -> bytes:
        """The whole body, refused (413) as soon as it is known to exceed the limit."""
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError(f"the request body has {declared} bytes, over the limit of {limit}", field="body")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError(f"the request body is over the limit of {limit} bytes", field="body")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _receive_body(self, declared: bytes | None, receive: Receive) -> bytes:
        """``_body`` on the ASGI messages themselves."""
        limit = self.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError(
                f"the request body has {declared.decode()} bytes, over the limit of {limit}", field="body"
            )
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError(f"the request body is over the limit of {limit} bytes", field="body")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _json_body(self, request: Request) -> dict[str, Any]:
        """An optional JSON object body (repository calls); empty means {}."""
        body = await self._body(request)
        if not body.strip():
            return {}
        doc = parse_json(body) if len(body) < PARSE_OFF_LOOP_BYTES else await asyncio.to_thread(parse_json, body)
        if not isinstance(doc, dict):
            raise InvalidArgumentError("the request body must be a JSON object", field="body")
        return doc

    def _route(
        self, path: str, endpoint: Callable[[Request], Awaitable[Response]], method: str, scope: str | None = PREDICT
    ) -> Route:
        """A route whose endpoint first checks the caller's token for ``scope`` (None: open)."""

        @functools.wraps(endpoint)
        async def guarded(request: Request) -> Response:
            if scope is None:
                return await endpoint(request)
            # The endpoint sees its caller as gRPC handlers do (generation's tenant is the token's name).
            token = set_caller(self._authorize(request.headers.get("authorization"), scope))
            try:
                return await endpoint(request)
            finally:
                reset_caller(token)

        return Route(path, guarded, methods=[method])

    async def _model_names(self) -> list[str]:
        return list(dict.fromkeys(entry.name for entry in await self.dataplane.repository_index()))

    def routes(self) -> list[Route]:
        """Every route, each wrapped to check its scope and map errors."""
        route = self._route
        model = "/v2/models/{model}"
        version = "/v2/models/{model}/versions/{version}"
        generator = self.dataplane.generator
        # Matched in order: inference first, as it is nearly all the traffic.
        return [
            Route(f"{model}/infer", _AsgiEndpoint(self.infer), methods=["POST"]),
            Route(f"{version}/infer", _AsgiEndpoint(self.infer), methods=["POST"]),
            route("/v2/health/live", self.live, "GET", None),
            route("/v2/health/ready", self.ready, "GET", None),
            route("/v2", self.server_metadata, "GET"),
            route("/v2/models/stats", self.stats, "GET"),
            route("/v2/repository/index", self.repository_index, "POST"),
            route("/v2/repository/models/{model}/load", self.load, "POST", ADMIN),
            route("/v2/repository/models/{model}/unload", self.unload, "POST", ADMIN),
            *self._shared_memory_routes(),
            *GenerateEndpoints(generator, self._json_body).routes(route),
            *OpenAIEndpoints(OpenAIDataPlane(generator, self._model_names), self._json_body).routes(route),
            *MlflowScoringEndpoints(self.dataplane, self._body, self.mlflow_default_model).routes(route),
            *(
                r
                for base in (model, version)
                for r in (
                    route(base, self.model_metadata, "GET"),
                    route(f"{base}/ready", self.model_ready, "GET"),
                    route(f"{base}/config", self.model_config, "GET"),
                    route(f"{base}/stats", self.stats, "GET"),
                )
            ),
        ]

    def _shared_memory_routes(self) -> list[Route]:
        """Triton's system shared memory extension; CUDA's answer 501 but unregister (after the same scope checks)."""
        route, shm, cuda = self._route, "/v2/systemsharedmemory", "/v2/cudasharedmemory"
        return [
            route(f"{shm}/status", self.shm_status, "GET"),
            route(f"{shm}/region/{{region}}/status", self.shm_status, "GET"),
            route(f"{shm}/region/{{region}}/register", self.shm_register, "POST", ADMIN),
            route(f"{shm}/unregister", self.shm_unregister, "POST", ADMIN),
            route(f"{shm}/region/{{region}}/unregister", self.shm_unregister, "POST", ADMIN),
            route(f"{cuda}/status", self.cuda_shm, "GET"),
            route(f"{cuda}/region/{{region}}/status", self.cuda_shm, "GET"),
            route(f"{cuda}/region/{{region}}/register", self.cuda_shm, "POST", ADMIN),
            route(f"{cuda}/unregister", self.cuda_unregister, "POST", ADMIN),
            route(f"{cuda}/region/{{region}}/unregister", self.cuda_unregister, "POST", ADMIN),
        ]

    def app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """The ASGI application: ``POST .../infer`` straight to its endpoint, the rest through Starlette."""
        return _InferFirst(self, self.starlette())

    def starlette(self) -> Starlette:
        """Every route in Starlette, and errors as ``{"error": ...}``."""

        async def trainwire_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, TrainwireError)
            if request.url.path.startswith("/v1/"):
                return openai_error(exc, http_status(exc))
            return error_response(exc.message, http_status(exc))

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            message = {
                404: f"no route {request.url.path}",
                405: f"{request.method} is not allowed on {request.url.path}",
            }
            response = error_response(message.get(exc.status_code, str(exc.detail)), exc.status_code)
            # Starlette's own headers: a 405's Allow (the methods the path takes), which RFC 9110 requires.
            response.headers.update(exc.headers or {})
            return response

        async def disconnected(request: Request, exc: Exception) -> Response:
            # The caller went away mid-body: nobody to answer, nothing to log.
            return Response(b"", 499)

        async def unexpected(request: Request, exc: Exception) -> Response:
            # Anything else is a bug in trainwire: say so, keep the details in the log.
            logger.error("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
            return error_response(f"internal error: {type(exc).__name__}: {exc}", 500)

        return Starlette(
            routes=self.routes(),
            exception_handlers={
                TrainwireError: trainwire_error,
                HTTPException: http_error,
                ClientDisconnect: disconnected,
                Exception: unexpected,
            },
        )

    # --- endpoints -------------------------------------------------------------
    async def live(self, request: Request) -> Response:
        return json_response({"live": True})

    async def ready(self, request: Request) -> Response:
        return json_response({"ready": True})

    async def server_metadata(self, request: Request) -> Response:
        extensions = [*EXTENSIONS, "binary_tensor_data"]
        return json_response({"name": SERVER_NAME, "version": self.dataplane.version, "extensions": extensions})

    async def model_metadata(self, request: Request) -> Response:
        p = request.path_params
        meta = await self.dataplane.model_metadata(p["model"], p.get("version", ""))
        return json_response(
            {
                "name": meta.name,
                "versions": list(meta.versions),
                "platform": meta.platform,
                "inputs": _tensors(meta.inputs),
                "outputs": _tensors(meta.outputs),
            }
        )

    async def model_config(self, request: Request) -> Response:
        p = request.path_params
        return json_response(config_json(await self.dataplane.model_config(p["model"], p.get("version", ""))))

    async def model_ready(self, request: Request) -> Response:
        p = request.path_params
        name, version = p["model"], p.get("version", "")
        if await self.dataplane.model_ready(name, version):
            return json_response({"name": name, "ready": True})
        # The protocol answers "not ready" with a 4xx status.
        return json_response({"name": name, "ready": False, "error": f"model {name!r} is not ready"}, 400)

    async def infer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST .../infer`` as a plain ASGI app: nearly all the traffic, so no Request and Response objects."""
        raw_headers, content = await self._infer(scope, receive)
        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
        await send({"type": "http.response.body", "body": content})

    async def _infer(self, scope: Scope, receive: Receive) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The headers and body of an ``/infer`` answer (raises the error family)."""
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization")
        self._authorize(auth.decode("latin-1") if auth is not None else None, PREDICT)
        body = await self._receive_body(headers.get(b"content-length"), receive)
        length = headers.get(_HEADER_LENGTH)
        p = scope["path_params"]
        key = headers.get(b"routing-key")
        parse = functools.partial(
            parse_infer_request,
            body,
            length.decode("latin-1") if length is not None else None,
            p["model"],
            p.get("version", ""),
            key.decode("latin-1") if key is not None else "",
        )
        infer_request, form = parse() if len(body) < PARSE_OFF_LOOP_BYTES else await asyncio.to_thread(parse)
        content, content_headers = await self.dataplane.infer(
            infer_request, functools.partial(encode_infer_response, form=form)
        )
        raw_headers = [(k.encode(), v.encode()) for k, v in content_headers.items()]
        raw_headers.append((b"content-length", str(len(content)).encode()))
        return raw_headers, content

    async def stats(self, request: Request) -> Response:
        p = request.path_params
        stats = await self.dataplane.model_statistics(p.get("model", ""), p.get("version", ""))
        return json_response({"model_stats": [m.json() for m in stats]})

    async def repository_index(self, request: Request) -> Response:
        doc = await self._json_body(request)
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgumentError("ready must be true or false", field="ready")
        index = await self.dataplane.repository_index(ready)
        return json_response(
            [{"name": e.name, "version": e.version, "state": e.state, "reason": e.reason} for e in index]
        )

    async def _version_parameter(self, request: Request) -> str:
        """``parameters.version`` of a repository call's body ("" when absent)."""
        doc = await self._json_body(request)
        params = doc.get("parameters") or {}
        version = params.get("version", "") if isinstance(params, dict) else None
        if not isinstance(version, str):
            raise InvalidArgumentError("parameters.version must be a string", field="parameters.version")
        return version

    async def shm_status(self, request: Request) -> Response:
        regions = self.dataplane.shared_memory.status(request.path_params.get("region", ""))
        return json_response(
            [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in regions]
        )

    async def shm_register(self, request: Request) -> Response:
        doc = await self._json_body(request)
        key = doc.get("key")
        if not isinstance(key, str):
            raise InvalidArgumentError("key must be a string (a POSIX shared memory name, '/name')", field="key")
        self.dataplane.shared_memory.register(
            request.path_params["region"], key, doc.get("offset", 0), doc.get("byte_size")
        )
        return Response(b"", 200)

    async def shm_unregister(self, request: Request) -> Response:
        self.dataplane.shared_memory.unregister(request.path_params.get("region", ""))
        return Response(b"", 200)

    async def cuda_shm(self, request: Request) -> Response:
        raise cuda_unimplemented()

    async def cuda_unregister(self, request: Request) -> Response:
        # No CUDA region can be registered, so none is left to drop: clients that unregister every
        # region as they finish (perf_analyzer) succeed, as against Triton without GPUs.
        return Response(b"", 200)

    async def load(self, request: Request) -> Response:
        await self.dataplane.load(request.path_params["model"], await self._version_parameter(request))
        return Response(b"", 200)

    async def unload(self, request: Request) -> Response:
        await self.dataplane.unload(request.path_params["model"], await self._version_parameter(request))
        return Response(b"", 200)


def infer_path_params(path: str) -> dict[str, str] | None:
    """The path parameters of an ``/infer`` route, as Starlette's router gives them; None: another route."""
    if not (path.startswith("/v2/models/") and path.endswith("/infer")):
        return None
    parts = path[11:-6].split("/")
    if len(parts) == 1 and parts[0]:
        return {"model": parts[0]}
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return {"model": parts[0], "version": parts[2]}
    return None


class _InferFirst:
    """Sends ``POST /v2/models/{m}[/versions/{v}]/infer`` to the endpoint itself, the rest to Starlette.

    Inference is nearly all the traffic: this skips Starlette's middleware, exception
    wrappers and route matching for it, and answers its errors as Starlette's handlers do.
    """

    def __init__(self, front_end: RestFrontEnd, app: Starlette) -> None:
        self.front_end = front_end
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            params = infer_path_params(scope["path"])
            if params is not None:
                scope["path_params"] = params
                await self.infer(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def infer(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            raw_headers, content = await self.front_end._infer(scope, receive)
        except TrainwireError as exc:
            response = error_response(exc.message, http_status(exc))
        except ClientDisconnect:
            response = Response(b"", 499)  # nobody to answer, nothing to log
        except Exception as exc:  # noqa: BLE001 - a bug in trainwire: said so, details in the log
            logger.error("unexpected error in %s %s", scope["method"], scope["path"], exc_info=exc)
            response = error_response(f"internal error: {type(exc).__name__}: {exc}", 500)
        else:
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            await send({"type": "http.response.body", "body": content})
            return
        await response(scope, receive, send)
