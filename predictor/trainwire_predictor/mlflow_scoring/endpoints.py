"""``mlflow models serve``'s routes on the predictor's REST port, over the data plane.

- ``POST /invocations``: scores with the default model (``mlflow_default_model``);
- ``POST /models/{m}[/versions/{v}]/invocations``: scores with a served model, an MLflow model
  (``mlflow:<name>``) or a trainwire run, the version a number, an alias or a checkpoint id;
- ``GET /ping``, ``GET /health``: 200 while the server is up; ``GET /version``: the server's version.

Errors are answered as MLflow's scoring server answers them:
``{"error_code": "BAD_REQUEST", "message": ...}`` with the status of the trainwire error family.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from trainwire_core.errors import NotFoundError, TrainwireError
from trainwire_predictor.dataplane import DataPlane
from trainwire_predictor.http import PARSE_OFF_LOOP_BYTES, dumps, http_status
from trainwire_predictor.mlflow_scoring.codec import encode_predictions, inference_request, parse_body

Body = Callable[[Request], Awaitable[bytes]]
RouteMaker = Callable[..., Route]
_ERROR_CODES = {400: "BAD_REQUEST", 404: "RESOURCE_DOES_NOT_EXIST", 413: "BAD_REQUEST", 503: "TEMPORARILY_UNAVAILABLE"}


def _json(doc: object, status: int = 200) -> Response:
    return Response(dumps(doc), status, media_type="application/json")


class MlflowScoringEndpoints:
    """MLflow's scoring protocol for every model the data plane serves.

    Args:
        dataplane: What every endpoint calls.
        body: Reads a request's body within the size limit.
        default_model: The model ``POST /invocations`` scores with ("": that route answers 404).
    """

    def __init__(self, dataplane: DataPlane, body: Body, default_model: str = "") -> None:
        self.dataplane = dataplane
        self.body = body
        self.default_model = default_model

    def routes(self, route: RouteMaker) -> list[Route]:
        """The routes, made by the front end's ``route`` (which checks the caller's token)."""
        return [
            route("/invocations", self.invocations, "POST"),
            route("/models/{model}/invocations", self.invocations, "POST"),
            route("/models/{model}/versions/{version}/invocations", self.invocations, "POST"),
            route("/ping", self.ping, "GET", None),
            route("/health", self.ping, "GET", None),
            route("/version", self.version, "GET", None),
        ]

    async def ping(self, request: Request) -> Response:
        return Response(b"\n", 200, media_type="application/json")

    async def version(self, request: Request) -> Response:
        return Response(self.dataplane.version.encode(), 200, media_type="text/plain")

    async def invocations(self, request: Request) -> Response:
        try:
            return await self._invocations(request)
        except TrainwireError as exc:
            status = http_status(exc)
            code = _ERROR_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "BAD_REQUEST")
            return _json({"error_code": code, "message": exc.message}, status)

    async def _invocations(self, request: Request) -> Response:
        name = request.path_params.get("model") or self.default_model
        version = request.path_params.get("version", "")
        if not name:
            raise NotFoundError(
                "no default model: set TRAINWIRE_PREDICTOR_MLFLOW_DEFAULT_MODEL, or POST to /models/{name}/invocations",
                field="model_name",
            )
        body = await self.body(request)
        content_type = request.headers.get("content-type", "application/json")
        if len(body) < PARSE_OFF_LOOP_BYTES:
            data = parse_body(body, content_type)
        else:
            data = await asyncio.to_thread(parse_body, body, content_type)
        meta = await self.dataplane.model_metadata(name, version)
        infer_request = inference_request(data, meta.inputs, name, version)
        doc = await self.dataplane.infer(infer_request, encode_predictions)
        return _json(doc)
