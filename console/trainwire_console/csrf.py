"""The console's one check against forged requests: every request that may change something passes it.

A POST (or any method but GET, HEAD and OPTIONS) is refused with 403 unless both hold:

1. Where a browser says where the request comes from, it is the console's own origin: ``Origin``,
   else ``Referer``; ``Origin: null`` (a sandboxed or opaque page) is refused. A client that sends
   neither (curl, scripts) is judged by 2 alone.
2. It proves it came from the console's own page: the header the console's scripts send
   (``X-Requested-By: trainwire-console``, or htmx's ``HX-Request``), which a cross-site form cannot
   set and a cross-site script cannot send without CORS consent; or, for the plain HTML forms (sign
   in, sign out), a ``csrf_token`` field equal to the ``trainwire_csrf`` cookie (double submit: the
   console sets that cookie with the page, before any session exists, and another site can read
   neither). The check runs before any route, so a refused request changes no cookie.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The pre-session token of the console's plain forms: a cookie, echoed in a hidden field.
CSRF_COOKIE = "trainwire_csrf"
CSRF_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def new_token() -> str:
    """A fresh random token for the ``trainwire_csrf`` cookie."""
    return secrets.token_urlsafe(32)


def set_token_cookie(response: Response, token: str, secure: bool) -> None:
    """Sets the form token cookie with the same attributes as the session cookie."""
    # HttpOnly: the token reaches the page in the HTML it renders, never through scripts.
    response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", secure=secure)


def origin_of(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL (default port filled in, host lower-cased); None otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return f"{scheme}://{host}:{port}"


def refusal(scope: Scope, headers: Headers, body: bytes) -> str | None:
    """Why a state-changing request looks forged, or None when it passes."""
    # The console's own origin as the browser addressed it (a TLS proxy's scheme arrives through
    # uvicorn's forwarded-header handling).
    own = origin_of(f"{scope.get('scheme', 'http')}://{headers.get('host', '')}")
    claimed = headers.get("origin")
    if claimed is None and (referer := headers.get("referer")):
        # Browsers that send no Origin (older ones, some redirects) still name the page.
        claimed = referer
    if claimed is not None and (own is None or origin_of(claimed) != own):
        return f"a request from another site ({claimed!r} is not this console's origin)"
    if headers.get("hx-request") or headers.get("x-requested-by") == "trainwire-console":
        return None
    if headers.get("content-type", "").split(";")[0].strip() == "application/x-www-form-urlencoded":
        fields = urllib.parse.parse_qs(body.decode("latin-1"), keep_blank_values=True)
        sent = (fields.get(CSRF_FIELD) or [""])[0]
        expected = cookie_parser(headers.get("cookie", "")).get(CSRF_COOKIE, "")
        if sent and expected and hmac.compare_digest(sent.encode(), expected.encode()):
            return None
    return "a forged request? send X-Requested-By: trainwire-console, or the csrf_token of the console's own form"


class ForgedRequestGuard:
    """ASGI middleware: refuses with 403 every state-changing request that ``refusal`` names."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        # The body is read here for the form's token and replayed to the route that reads it again.
        body, receive = await _buffered(receive)
        why = refusal(scope, Headers(scope=scope), body)
        if why is not None:
            await JSONResponse({"error": "PERMISSION_DENIED", "message": why}, 403)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a ``receive`` that hands it over again before anything else."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
