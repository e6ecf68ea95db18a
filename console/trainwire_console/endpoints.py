"""The console's HTTP endpoints: server-rendered pages, small JSON answers and server-sent events.

Endpoints stay thin: they read the request, call ConsoleBackend (in a thread: its gRPC calls
block) and render. Live pages follow server-sent events, which browsers resume by themselves
after a drop, sending the last event id they saw (``Last-Event-ID``). Each class serves one
area of the console and holds what it needs; app.routes maps URLs onto their methods.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
import urllib.parse
import zipfile
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse

from trainwire.client import TERMINAL_STATES
from trainwire_console import csrf
from trainwire_console.backend import STATES, ConsoleBackend, run_summary
from trainwire_console.errors import error_response
from trainwire_console.live_list import RunsWatcher
from trainwire_console.pages import COOKIE, Pages, call
from trainwire_console.scores import metric_order, run_scores, served_checkpoint_id
from trainwire_core.errors import TrainwireError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2

# Points of a curve at most, per pixel of its width (min and max of each pixel's reports).
MAX_WIDTH_PX = 4000
# How long a curve request waits for a run's history before answering with what has arrived.
SERIES_WAIT_S = 0.5
# A comment line keeps idle event streams open through proxies.
KEEPALIVE_S = 15.0


def _sse(event: str, data: Any, event_id: str | int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, allow_nan=False)}\n\n"


def _event_stream(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


class RunsEndpoints:
    """The runs list and its live updates.

    Args:
        pages: Renders the list.
        watcher: Polls the newest runs for the open lists.
    """

    def __init__(self, pages: Pages, watcher: RunsWatcher) -> None:
        self.pages, self.watcher = pages, watcher

    @staticmethod
    def _filters(request: Request) -> dict[str, Any]:
        q = request.query_params
        return {
            "states": [s for s in q.getlist("state") if s in STATES],
            "name": q.get("name", "").strip(),
            "framework": q.get("framework", "").strip(),
            "page_size": min(max(int(q.get("page_size", "50") or 50), 1), 500),
            "page_token": q.get("page_token", ""),
        }

    async def runs_page(self, request: Request) -> Response:
        """The runs list, filtered; only its table when htmx asks."""
        f = self._filters(request)
        session = self.pages.session_of(request)
        try:
            rows, next_token = await call(
                session.list_runs, f["states"], f["name"], f["framework"], f["page_size"], f["page_token"]
            )
        except TrainwireError as err:
            return await self.pages.page_error(request, err)
        template = "runs_table.html" if request.headers.get("HX-Request") else "runs.html"
        return await self.pages.page(request, template, rows=rows, next_token=next_token, filters=f, states=STATES)

    async def runs_live(self, request: Request) -> Response:
        """Events ``run``: a row of the newest runs that changed state, attempts or reports."""
        if not (await call(self.pages.session_of(request).abilities)).read:
            return JSONResponse({"error": "PERMISSION_DENIED", "message": "the token may not read runs"}, 403)

        async def stream() -> AsyncIterator[str]:
            queue = self.watcher.subscribe()
            try:
                while True:
                    try:
                        row = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    yield _sse("run", row)
            finally:
                self.watcher.unsubscribe(queue)

        return _event_stream(stream())


class RunEndpoints:
    """One run: its page, its curves, its live events and logs, and cancelling it.

    Args:
        pages: Renders the run's page.
        backend: The coordinator, and the runs' event feeds.
    """

    def __init__(self, pages: Pages, backend: ConsoleBackend) -> None:
        self.pages, self.backend = pages, backend

    async def run_page(self, request: Request) -> Response:
        """The run's page: its state, configuration, checkpoints and charts."""
        session = self.pages.session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return await self.pages.page_error(request, err)
        feed = self.backend.feeds.get(run, session.client)
        request_dict = json_format.MessageToDict(run.request, preserving_proto_field_name=True)
        # Pickled code is bytes nobody can read here: named, not shown.
        _elide_bytes(request_dict)
        checkpoints = {c.checkpoint_id: c for c in [*run.best_checkpoints]}
        if run.HasField("latest_checkpoint"):
            checkpoints.setdefault(run.latest_checkpoint.checkpoint_id, run.latest_checkpoint)
        config = run.request.run_config.checkpoint_config
        served = served_checkpoint_id(run)
        scored = config.checkpoint_score_attribute and run.best_checkpoints
        best = run.best_checkpoints[0].checkpoint_id if scored else ""
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
                "best": c.checkpoint_id == best,
                "served": c.checkpoint_id == served,
            }
            for c in sorted(checkpoints.values(), key=lambda c: -c.index)
        ]
        summary = run_summary(run, time.time())
        score = config.checkpoint_score_attribute
        metrics = metric_order(list(feed.columns) or sorted(struct_to_dict(run.latest_metrics)), score, "time")
        return await self.pages.page(
            request,
            "run.html",
            run=summary,
            error=json_format.MessageToDict(run.error) if run.HasField("error") else None,
            ended=run.state in TERMINAL_STATES,
            # The score metric first (checked and drawn first); the page hides the x axis's own metric.
            metrics=metrics,
            checked=[m for m in metrics if m != "training_iteration"][:4],
            checkpoints=ckpts,
            score_attribute=config.checkpoint_score_attribute,
            score_order="min" if config.checkpoint_score_order == "min" else "max",
            served=served,
            config_json=json.dumps(request_dict, indent=2, sort_keys=True),
            num_workers=max(run.request.scaling_config.num_workers, 1),
            compare=request.query_params.get("compare", ""),
        )

    async def run_series(self, request: Request) -> Response:
        """The chosen metrics of a run, downsampled to the chart's width (JSON)."""
        q = request.query_params
        session = self.pages.session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return error_response(err)
        feed = self.backend.feeds.get(run, session.client)
        # The first look at a run waits briefly for what it had reported so far; a long history
        # arrives in parts (the page asks again until ``complete``), so the page never stalls.
        await call(feed.caught_up.wait, SERIES_WAIT_S)
        x = "time" if q.get("x") == "time" else "training_iteration"
        width = min(max(int(q.get("width", "800") or 800), 10), MAX_WIDTH_PX)
        metrics = [m for m in q.get("metrics", "").split(",") if m] or sorted(feed.columns)
        body = feed.series(metrics, x, width)
        score = run.request.run_config.checkpoint_config.checkpoint_score_attribute
        reported = metric_order(list(feed.columns), score, "")
        body |= {"name": run.name, "state": common_pb2.RunState.Name(run.state), "metrics": reported}
        body["complete"] = feed.caught_up.is_set()
        return JSONResponse(body)

    async def run_scores(self, request: Request) -> Response:
        """The run's score metric and kept checkpoints: which is best, which the predictors serve (JSON)."""
        session = self.pages.session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return error_response(err)
        feed = self.backend.feeds.get(run, session.client)
        await call(feed.caught_up.wait, SERIES_WAIT_S)
        return JSONResponse(run_scores(run, list(feed.columns)))

    async def run_sparkline(self, request: Request) -> Response:
        """The run's score metric over its reports, cut to a sparkline, with its best and last value (JSON)."""
        session = self.pages.session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
            body = await call(self.backend.sparklines.of, run, session.client)
        except TrainwireError as err:
            return error_response(err)
        return JSONResponse(body | {"run_id": run.run_id, "reports": run.last_report_index})

    async def run_events(self, request: Request) -> Response:
        """Server-sent events of a run: ``metrics``, ``state_change``, ``checkpoint``, ``worker_error``, ``end``."""
        session = self.pages.session_of(request)
        try:
            run = await call(session.get_run, request.path_params["run"])
        except TrainwireError as err:
            return error_response(err)
        feed = self.backend.feeds.get(run, session.client)
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

        return _event_stream(stream())

    async def run_logs(self, request: Request) -> Response:
        """Server-sent events ``lines`` (the workers' output, resumable by cursor) and ``end``."""
        q = request.query_params
        ranks = [int(r) for r in q.getlist("rank") if r.lstrip("-").isdigit() and int(r) >= 0]
        after = request.headers.get("last-event-id") or q.get("after", "")
        follow = q.get("follow", "1") != "0"
        run_id = request.path_params["run"]
        session = self.pages.session_of(request)

        async def stream() -> AsyncIterator[str]:
            try:
                async for lines in session.logs(run_id, ranks, after, follow):
                    yield _sse("lines", lines, lines[-1]["cursor"] if lines else None)
            except TrainwireError as err:
                yield _sse("failed", {"error": err.code.name, "message": err.message})
            yield _sse("end", {})

        return _event_stream(stream())

    async def run_cancel(self, request: Request) -> Response:
        """Cancels the run, where the token may; answers its summary."""
        session = self.pages.session_of(request)
        if not (await call(session.abilities)).cancel:
            return JSONResponse({"error": "PERMISSION_DENIED", "message": "the token may not cancel runs"}, 403)
        try:
            run = await call(session.cancel, request.path_params["run"])
        except TrainwireError as err:
            return error_response(err)
        return JSONResponse(run_summary(run, time.time()))


class CheckpointEndpoints:
    """A run's checkpoint: its files listed, one file, or all of them zipped.

    Args:
        pages: Renders the file list.
        backend: Where the checkpoints are.
    """

    def __init__(self, pages: Pages, backend: ConsoleBackend) -> None:
        self.pages, self.backend = pages, backend

    async def checkpoint_files(self, request: Request) -> Response:
        """The checkpoint's files, listed."""
        p = request.path_params
        try:
            files = await call(self.backend.checkpoint_files, self.pages.session_of(request), p["run"], p["checkpoint"])
        except TrainwireError as err:
            return await self.pages.page_error(request, err)
        return await self.pages.page(
            request, "checkpoint_files.html", run_id=p["run"], checkpoint=p["checkpoint"], files=files
        )

    async def checkpoint_file(self, request: Request) -> Response:
        """One file of the checkpoint (none outside its directory)."""
        p = request.path_params
        try:
            directory = await call(
                self.backend.checkpoint_dir, self.pages.session_of(request), p["run"], p["checkpoint"]
            )
        except TrainwireError as err:
            return error_response(err)
        target = (directory / p["path"]).resolve()
        if not target.is_file() or not target.is_relative_to(directory.resolve()):
            return JSONResponse({"error": "NOT_FOUND", "message": p["path"]}, 404)
        return FileResponse(target, filename=target.name)

    async def checkpoint_zip(self, request: Request) -> Response:
        """The checkpoint's files in one zip archive."""
        p = request.path_params
        try:
            directory = await call(
                self.backend.checkpoint_dir, self.pages.session_of(request), p["run"], p["checkpoint"]
            )
        except TrainwireError as err:
            return error_response(err)

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


class ModelEndpoints:
    """The models the predictor serves, and trying one out.

    Args:
        pages: Renders the models page and predictions.
        backend: The predictor.
    """

    def __init__(self, pages: Pages, backend: ConsoleBackend) -> None:
        self.pages, self.backend = pages, backend

    async def models_page(self, request: Request) -> Response:
        """The served models; only their table when htmx asks."""
        try:
            rows = await call(self.backend.models)
        except TrainwireError as err:
            return error_response(err)
        template = "models_table.html" if request.headers.get("HX-Request") else "models.html"
        return await self.pages.page(request, template, rows=rows, selected=request.query_params.get("model", ""))

    async def models_predict(self, request: Request) -> Response:
        """A prediction from the posted model, version and body (JSON or CSV)."""
        # htmx posts the form urlencoded: parsed here, without a multipart parser to install.
        fields = urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True)
        form = {key: values[0] for key, values in fields.items()}
        model, version = form.get("model", ""), form.get("version", "")
        body, fmt = form.get("body", ""), "csv" if form.get("format") == "csv" else "json"
        try:
            rows = await call(self.backend.predict, model, version, body, fmt)
            error = None
        except TrainwireError as err:
            rows, error = [], f"{err.code.name}: {err.message}"
        return await self.pages.page(request, "predict_result.html", rows=rows, error=error)


class AuthEndpoints:
    """Signing in with a user's own token, and signing out.

    Like every POST, these pass csrf.ForgedRequestGuard first: another site can neither sign a
    browser in with its own token nor sign it out.

    Args:
        pages: Renders the sign-in page.
        backend: Checks a token with the coordinator.
    """

    def __init__(self, pages: Pages, backend: ConsoleBackend) -> None:
        self.pages, self.backend = pages, backend

    async def signin(self, request: Request) -> Response:
        """A user's own token instead of the console's: kept in a cookie that only this console reads."""
        if request.method == "GET":
            return await self.pages.page(request, "signin.html", why=request.query_params.get("why", ""))
        fields = urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True)
        token = (fields.get("token") or [""])[0].strip()
        abilities = await call(self.backend.session(token).abilities) if token else None
        if abilities is None or not abilities.read:
            return await self.pages.page(
                request, "signin.html", status_code=401, error="the coordinator does not take that token"
            )
        secure = request.url.scheme == "https"
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=secure)
        # A new form token with the new session: one learnt before signing in is worth nothing after.
        csrf.set_token_cookie(response, csrf.new_token(), secure)
        return response

    async def signout(self, request: Request) -> Response:
        """Forgets the user's token: the console's own acts for this browser again."""
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response


class HealthEndpoints:
    """Whether the console can reach the coordinator.

    Args:
        backend: The coordinator, asked with the console's own token.
    """

    def __init__(self, backend: ConsoleBackend) -> None:
        self.backend = backend

    async def healthz(self, request: Request) -> Response:
        """200 while the coordinator answers the console's token; 503 otherwise (a compose healthcheck)."""
        try:
            await call(self.backend.client.list_runs, [], 1, "")
        except TrainwireError as err:
            return JSONResponse({"ok": False, "error": err.code.name}, 503)
        return JSONResponse({"ok": True})


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
