"""REST errors: the one mapping of the error family to HTTP statuses, and KServe's ``{"error": ...}`` bodies."""

from __future__ import annotations

from typing import Any

import grpc
from starlette.responses import Response

from trainwire_core.errors import ResourceExhaustedError, TrainwireError
from trainwire_predictor.rest.codec import dumps

# The one mapping of the error family's codes to HTTP statuses (google.rpc's HTTP mapping).
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class BodyTooLargeError(ResourceExhaustedError):
    """A request body over the limit: HTTP's own 413, not 429."""


def http_status(err: TrainwireError) -> int:
    """The HTTP status of a trainwire error (500 for a code with no mapping)."""
    if isinstance(err, BodyTooLargeError):
        return 413
    return HTTP_STATUS.get(err.code, 500)


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(dumps(doc), status, media_type="application/json")


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)
