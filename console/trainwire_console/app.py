"""The console's HTTP endpoints: server-rendered pages, small JSON answers and server-sent events.

Endpoints stay thin: they read the request, call ConsoleBackend (in a thread: its gRPC calls
block) and render. Live pages follow server-sent events, which browsers resume by themselves
after a drop, sending the last event id they saw (``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import time
import urllib.parse
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from trainwire.client import TERMINAL_STATES
from trainwire_console import csrf
from trainwire_console.backend import STATES, ConsoleBackend, Session, run_summary
from trainwire_console.live_list import RunsWatcher
from trainwire_core.errors import TrainwireError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2

HERE = Path(__file__).parent
# Points of a curve at most, per pixel of its width (min and max of each pixel's reports).
MAX_WIDTH_PX = 4000
# How often the runs list asks the coordinator for changes to push to open pages.
LIST_POLL_S = 1.0
# How long a curve request waits for a run's history before answering with what has arrived.
SERIES_WAIT_S = 0.5
# A comment line keeps idle event streams open through proxies.
KEEPALIVE_S = 15.0

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


def _sse(event: str, data: Any, event_id: str | int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, allow_nan=False)}\n\n"


def _status_of(err: TrainwireError) -> int:
    codes = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "INVALID_ARGUMENT": 400}
    return codes.get(err.code.name, 502)


def _error_response(err: TrainwireError) -> Response:
    return JSONResponse({"error": err.code.name, "message": err.message}, status_code=_status_of(err))


def create_app(backend: ConsoleBackend) -> Starlette:
    """The console's Starlette application over ``backend``."""

    watcher = RunsWatcher(backend.client, LIST_POLL_S)

    async def call(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def session_of(request: Request) -> Session:
        return backend.session(request.cookies.get(COOKIE))

    async def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        abilities = await call(session_of(request).abilities)
        # The token the page's plain forms (sign in, sign out) echo; csrf.ForgedRequestGuard compares them.
        token = request.cookies.get(csrf.CSRF_COOKIE) or csrf.new_token()
        context |= {
            "abilities": abilities,
            "models_enabled": bool(backend.predictor),
            "signed_in": bool(request.cookies.get(COOKIE)),
            "csrf_token": token,
        }
        response = templates.TemplateResponse(request, name, context, status_code=status_code)
        if token != request.cookies.get(csrf.CSRF_COOKIE):
            csrf.set_token_cookie(response, token, secure=request.url.scheme == "https")
        return response

    async def page_error(request: Request, err: TrainwireError) -> Response:
        """An HTML page's failed call: a token that may not read is sent to sign in."""
        if err.code.name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return RedirectResponse(f"/signin?why={urllib.parse.quote(err.message)}", status_code=303)
        return await page(request, "signin.html", status_code=_status_of(err), error=f"{err.code.name}: {err.message}")

    # --- runs list -------------------------------------------------------------------
    def _filters(request: Request) -> dict[str, Any]:
        q = request.query_params
        return {
            "states": [s for s in q.getlist("state") if s in STATES],
            "name": q.get("name", "").strip(),
            "framework": q.get("framework", "").strip(),
            "page_size": min(max(int(q.get("page_size", "50") or 50), 1), 500),
            "page_token": q.get("page_token", ""),
        }

    async def runs_page(request: Request) -> Response:
        f = _filters(request)
        session = session_of(request)
        try:
            rows, next_token = await call(
                session.list_runs, f["states"], f["name"], f["framework"], f["page_size"], f["page_token"]
            )
        except TrainwireError as err:
            return await page_error(request, err)
        template = "runs_table.html" if request.headers.get("HX-Request") else "runs.html"
        return await page(request, template, rows=rows, next_token=next_token, filters=f, states=STATES)

    async def runs_live(request: Request) -> Response:
        """Events ``run``: a row of the newest runs that changed state, attempts or reports."""

        if not (await call(session_of(request).abilities)).read:
            return JSONResponse({"error": "PERMISSION_DENIED", "message": "the token may not read runs"}, 403)

        async def stream() -> AsyncIterator[str]:
            queue = watcher.subscribe()
            try:
                while True:
                    try:
                        row = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    yield _sse("run", row)
            finally:
                watcher.unsubscribe(queue)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    # --- a run --------------------------------------------------------------------------
    async def run_page(request: Request) -> Response:
        session = session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return await page_error(request, err)
        feed = backend.feeds.get(run, session.client)
        request_dict = json_format.MessageToDict(run.request, preserving_proto_field_name=True)
        # Pickled code is bytes nobody can read here: named, not shown.
        _elide_bytes(request_dict)
        checkpoints = {c.checkpoint_id: c for c in [*run.best_checkpoints]}
        if run.HasField("latest_checkpoint"):
            checkpoints.setdefault(run.latest_checkpoint.checkpoint_id, run.latest_checkpoint)
        config = run.request.run_config.checkpoint_config
        ckpts = [
            {
                "id": c.checkpoint_id,
                "index": c.index,
                "size_bytes": c.size_bytes,
                "metrics": struct_to_dict(c.metrics),
                "score": struct_to_dict(c.metrics).get(config.checkpoint_score_attribute)
                if config.checkpoint_score_attribute
                else None,
                "created": c.created_at.ToDatetime().isoformat(timespec="seconds") if c.HasField("created_at") else "",
                "latest": run.HasField("latest_checkpoint") and c.checkpoint_id == run.latest_checkpoint.checkpoint_id,
            }
            for c in sorted(checkpoints.values(), key=lambda c: -c.index)
        ]
        summary = run_summary(run, time.time())
        return await page(
            request,
            "run.html",
            run=summary,
            error=json_format.MessageToDict(run.error) if run.HasField("error") else None,
            ended=run.state in TERMINAL_STATES,
            metrics=sorted(feed.columns) or sorted(struct_to_dict(run.latest_metrics)),
            checkpoints=ckpts,
            score_attribute=config.checkpoint_score_attribute,
            config_json=json.dumps(request_dict, indent=2, sort_keys=True),
            num_workers=max(run.request.scaling_config.num_workers, 1),
            compare=request.query_params.get("compare", ""),
        )

    async def run_series(request: Request) -> Response:
        """The chosen metrics of a run, downsampled to the chart's width (JSON)."""
        q = request.query_params
        session = session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return _error_response(err)
        feed = backend.feeds.get(run, session.client)
        # The first look at a run waits briefly for what it had reported so far; a long history
        # arrives in parts (the page asks again until ``complete``), so the page never stalls.
        await call(feed.caught_up.wait, SERIES_WAIT_S)
        x = "time" if q.get("x") == "time" else "training_iteration"
        width = min(max(int(q.get("width", "800") or 800), 10), MAX_WIDTH_PX)
        metrics = [m for m in q.get("metrics", "").split(",") if m] or sorted(feed.columns)
        body = feed.series(metrics, x, width)
        body |= {"name": run.name, "state": common_pb2.RunState.Name(run.state), "metrics": sorted(feed.columns)}
        body["complete"] = feed.caught_up.is_set()
        return JSONResponse(body)

    async def run_events(request: Request) -> Response:
        """Server-sent events of a run: ``metrics``, ``state_change``, ``checkpoint``, ``worker_error``, ``end``."""
        session = session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return _error_response(err)
        feed = backend.feeds.get(run, session.client)
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        after_id = int(after) if after.isdigit() else 0

        async def stream() -> AsyncIterator[str]:
            queue: asyncio.Queue = asyncio.Queue()
            stop = feed.subscribe(queue)
            try:
                sent = after_id
                for item in feed.since(after_id):
                    sent = item["event_id"]
                    yield _sse(item["kind"], _finite(item), sent)
                if feed.ended:
                    yield _sse("end", {})
                    return
                while True:
                    try:
                        item = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                        yield ": keep-alive\n\n"
                        continue
                    if item is None:
                        yield _sse("end", {})
                        return
                    if item["event_id"] > sent:
                        sent = item["event_id"]
                        yield _sse(item["kind"], _finite(item), sent)
            finally:
                stop()

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def run_logs(request: Request) -> Response:
        """Server-sent events ``lines`` (the workers' output, resumable by cursor) and ``end``."""
        q = request.query_params
        ranks = [int(r) for r in q.getlist("rank") if r.lstrip("-").isdigit() and int(r) >= 0]
        after = request.headers.get("last-event-id") or q.get("after", "")
        follow = q.get("follow", "1") != "0"
        run_id = request.path_params["run"]
        session = session_of(request)

        async def stream() -> AsyncIterator[str]:
            try:
                async for lines in session.logs(run_id, ranks, after, follow):
                    yield _sse("lines", lines, lines[-1]["cursor"] if lines else None)
            except TrainwireError as err:
                yield _sse("failed", {"error": err.code.name, "message": err.message})
            yield _sse("end", {})

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def run_cancel(request: Request) -> Response:
        session = session_of(request)
        if not (await call(session.abilities)).cancel:
            return JSONResponse({"error": "PERMISSION_DENIED", "message": "the token may not cancel runs"}, 403)
        try:
            run = await call(session.cancel, request.path_params["run"])
        except TrainwireError as err:
            return _error_response(err)
        return JSONResponse(run_summary(run, time.time()))

    # --- checkpoints -------------------------------------------------------------------------
    async def checkpoint_files(request: Request) -> Response:
        p = request.path_params
        try:
            files = await call(backend.checkpoint_files, session_of(request), p["run"], p["checkpoint"])
        except TrainwireError as err:
            return await page_error(request, err)
        return await page(request, "checkpoint_files.html", run_id=p["run"], checkpoint=p["checkpoint"], files=files)

    async def checkpoint_file(request: Request) -> Response:
        p = request.path_params
        try:
            directory = await call(backend.checkpoint_dir, session_of(request), p["run"], p["checkpoint"])
        except TrainwireError as err:
            return _error_response(err)
        target = (directory / p["path"]).resolve()
        if not target.is_file() or not target.is_relative_to(directory.resolve()):
            return JSONResponse({"error": "NOT_FOUND", "message": p["path"]}, 404)
        return FileResponse(target, filename=target.name)

    async def checkpoint_zip(request: Request) -> Response:
        p = request.path_params
        try:
            directory = await call(backend.checkpoint_dir, session_of(request), p["run"], p["checkpoint"])
        except TrainwireError as err:
            return _error_response(err)

        def pack() -> bytes:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(q for q in directory.rglob("*") if q.is_file()):
                    archive.write(path, path.relative_to(directory).as_posix())
            return buffer.getvalue()

        name = f"{p['run']}-{p['checkpoint']}.zip"
        return Response(
            await call(pack),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    # --- models ----------------------------------------------------------------------------------
    async def models_page(request: Request) -> Response:
        try:
            rows = await call(backend.models)
        except TrainwireError as err:
            return _error_response(err)
        template = "models_table.html" if request.headers.get("HX-Request") else "models.html"
        return await page(request, template, rows=rows, selected=request.query_params.get("model", ""))

    async def models_predict(request: Request) -> Response:
        # htmx posts the form urlencoded: parsed here, without a multipart parser to install.
        fields = urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True)
        form = {key: values[0] for key, values in fields.items()}
        model, version = form.get("model", ""), form.get("version", "")
        body, fmt = form.get("body", ""), "csv" if form.get("format") == "csv" else "json"
        try:
            rows = await call(backend.predict, model, version, body, fmt)
            error = None
        except TrainwireError as err:
            rows, error = [], f"{err.code.name}: {err.message}"
        return await page(request, "predict_result.html", rows=rows, error=error)

    # --- signing in ---------------------------------------------------------------------------
    # Like every POST, these pass csrf.ForgedRequestGuard first: another site can neither sign a
    # browser in with its own token nor sign it out.
    async def signin(request: Request) -> Response:
        """A user's own token instead of the console's: kept in a cookie that only this console reads."""
        if request.method == "GET":
            return await page(request, "signin.html", why=request.query_params.get("why", ""))
        fields = urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True)
        token = (fields.get("token") or [""])[0].strip()
        abilities = await call(backend.session(token).abilities) if token else None
        if abilities is None or not abilities.read:
            return await page(request, "signin.html", status_code=401, error="the coordinator does not take that token")
        secure = request.url.scheme == "https"
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=secure)
        # A new form token with the new session: one learnt before signing in is worth nothing after.
        csrf.set_token_cookie(response, csrf.new_token(), secure)
        return response

    async def signout(request: Request) -> Response:
        """Forgets the user's token: the console's own acts for this browser again."""
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def healthz(request: Request) -> Response:
        """200 while the coordinator answers the console's token; 503 otherwise (a compose healthcheck)."""
        try:
            await call(backend.client.list_runs, [], 1, "")
        except TrainwireError as err:
            return JSONResponse({"ok": False, "error": err.code.name}, 503)
        return JSONResponse({"ok": True})

    routes = [
        Route("/", runs_page),
        Route("/runs", runs_page),
        Route("/api/runs/live", runs_live),
        Route("/runs/{run}", run_page),
        Route("/api/runs/{run}/series", run_series),
        Route("/api/runs/{run}/events", run_events),
        Route("/api/runs/{run}/logs", run_logs),
        Route("/runs/{run}/cancel", run_cancel, methods=["POST"]),
        Route("/runs/{run}/checkpoints/{checkpoint}", checkpoint_files),
        Route("/runs/{run}/checkpoints/{checkpoint}/zip", checkpoint_zip),
        Route("/runs/{run}/checkpoints/{checkpoint}/files/{path:path}", checkpoint_file),
        Route("/models", models_page),
        Route("/models/predict", models_predict, methods=["POST"]),
        Route("/signin", signin, methods=["GET", "POST"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        backend.close()

    # One check for every state-changing request, before any route: csrf.py says what it asks.
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(csrf.ForgedRequestGuard)])


def _finite(item: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN or infinity: such values go as null."""
    if item.get("kind") == "metrics":
        metrics = {k: (v if math.isfinite(v) else None) for k, v in item["metrics"].items()}
        return item | {"metrics": metrics}
    return item


def _elide_bytes(value: Any) -> None:
    """Replaces the base64 of pickled fields (code, configs) with their size, in place."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key.startswith("pickled_") and isinstance(inner, str):
                value[key] = f"<{len(inner) * 3 // 4} bytes of pickled Python>"
            else:
                _elide_bytes(inner)
    elif isinstance(value, list):
        for inner in value:
            _elide_bytes(inner)
