"""The console's HTML pages: templates, their filters, and what every page is rendered with."""

from __future__ import annotations

import asyncio
import urllib.parse
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from trainwire_console import csrf
from trainwire_console.backend import ConsoleBackend, Session
from trainwire_console.errors import status_of
from trainwire_core.errors import TrainwireError

HERE = Path(__file__).parent

# The cookie that holds a signed-in user's token.
COOKIE = "trainwire_token"

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


templates.env.filters["age"] = _age
templates.env.filters["size"] = _size


async def call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a thread: the backend's gRPC calls block."""
    return await asyncio.to_thread(fn, *args)


class Pages:
    """Renders the console's pages for a request's session.

    Args:
        backend: The coordinator and predictor the pages show.
    """

    def __init__(self, backend: ConsoleBackend) -> None:
        self.backend = backend

    def session_of(self, request: Request) -> Session:
        """The session of the request's signed-in token, else the console's own."""
        return self.backend.session(request.cookies.get(COOKIE))

    async def page(self, request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        """Template ``name`` with ``context`` and what the header and forms of every page need."""
        abilities = await call(self.session_of(request).abilities)
        # The token the page's plain forms (sign in, sign out) echo; csrf.ForgedRequestGuard compares them.
        token = request.cookies.get(csrf.CSRF_COOKIE) or csrf.new_token()
        context |= {
            "abilities": abilities,
            "models_enabled": bool(self.backend.predictor),
            "coordinator": self.backend.address,
            "signed_in": bool(request.cookies.get(COOKIE)),
            "csrf_token": token,
        }
        response = templates.TemplateResponse(request, name, context, status_code=status_code)
        if token != request.cookies.get(csrf.CSRF_COOKIE):
            csrf.set_token_cookie(response, token, secure=request.url.scheme == "https")
        return response

    async def page_error(self, request: Request, err: TrainwireError) -> Response:
        """An HTML page's failed call: a token that may not read is sent to sign in."""
        if err.code.name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return RedirectResponse(f"/signin?why={urllib.parse.quote(err.message)}", status_code=303)
        return await self.page(
            request, "signin.html", status_code=status_of(err), error=f"{err.code.name}: {err.message}"
        )
