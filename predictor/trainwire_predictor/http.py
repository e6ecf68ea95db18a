"""HTTP for every front end on the REST port (KServe v2, the generate extension, OpenAI).

The one mapping of the error family's codes to HTTP statuses, JSON bodies, and server-sent events.
"""

from __future__ import annotations

from typing import Any

import grpc
import orjson

from trainwire_core.errors import ResourceExhaustedError, TrainwireError

# Bodies from this size on are parsed in a thread: a megabyte of JSON takes milliseconds that
# every other request on the loop would wait; smaller ones parse faster than a thread hop.
PARSE_OFF_LOOP_BYTES = 1 << 20


def dumps(doc: Any) -> bytes:
    """Compact JSON (orjson)."""
    return orjson.dumps(doc)


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


# Server-sent events: no caching, no proxy buffering (each event goes out as it is written).
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def sse_event(doc: Any) -> bytes:
    """One server-sent event holding ``doc`` as JSON."""
    return b"data: " + orjson.dumps(doc) + b"\n\n"
