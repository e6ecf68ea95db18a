"""How the console answers a coordinator's or predictor's error: its HTTP status and JSON body."""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

from trainwire_core.errors import TrainwireError

# The status of each error code a caller can act on; any other is the upstream's fault (502).
_STATUS = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "INVALID_ARGUMENT": 400}


def status_of(err: TrainwireError) -> int:
    """The HTTP status that answers ``err``."""
    return _STATUS.get(err.code.name, 502)


def error_response(err: TrainwireError) -> Response:
    """``err`` as a JSON answer: its code and message."""
    return JSONResponse({"error": err.code.name, "message": err.message}, status_code=status_of(err))
