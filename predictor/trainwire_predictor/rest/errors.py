"""REST errors as KServe's ``{"error": ...}`` bodies (the status mapping is ``trainwire_predictor.http``'s)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from trainwire_predictor.http import dumps


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(dumps(doc), status, media_type="application/json")


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)
