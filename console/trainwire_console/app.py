"""The console's Starlette application: every route in one list, and the app that serves them.

The endpoints themselves are in endpoints.py, one class per area of the console.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trainwire_console import csrf
from trainwire_console.backend import ConsoleBackend
from trainwire_console.endpoints import (
    AuthEndpoints,
    CheckpointEndpoints,
    HealthEndpoints,
    ModelEndpoints,
    RunEndpoints,
    RunsEndpoints,
)
from trainwire_console.live_list import RunsWatcher
from trainwire_console.pages import HERE, Pages

# How often the runs list asks the coordinator for changes to push to open pages.
LIST_POLL_S = 1.0


def routes(backend: ConsoleBackend) -> list[Route]:
    """The console's routes over ``backend``: each URL and method, and the endpoint that answers it."""
    pages = Pages(backend)
    runs = RunsEndpoints(pages, RunsWatcher(backend.client, LIST_POLL_S))
    run = RunEndpoints(pages, backend)
    checkpoints = CheckpointEndpoints(pages, backend)
    models = ModelEndpoints(pages, backend)
    auth = AuthEndpoints(pages, backend)
    health = HealthEndpoints(backend)
    return [
        Route("/", runs.runs_page),
        Route("/runs", runs.runs_page),
        Route("/api/runs/live", runs.runs_live),
        Route("/runs/{run}", run.run_page),
        Route("/api/runs/{run}/series", run.run_series),
        Route("/api/runs/{run}/events", run.run_events),
        Route("/api/runs/{run}/scores", run.run_scores),
        Route("/api/runs/{run}/sparkline", run.run_sparkline),
        Route("/api/runs/{run}/logs", run.run_logs),
        Route("/runs/{run}/cancel", run.run_cancel, methods=["POST"]),
        Route("/runs/{run}/checkpoints/{checkpoint}", checkpoints.checkpoint_files),
        Route("/runs/{run}/checkpoints/{checkpoint}/zip", checkpoints.checkpoint_zip),
        Route("/runs/{run}/checkpoints/{checkpoint}/files/{path:path}", checkpoints.checkpoint_file),
        Route("/models", models.models_page),
        Route("/models/predict", models.models_predict, methods=["POST"]),
        Route("/signin", auth.signin, methods=["GET", "POST"]),
        Route("/signout", auth.signout, methods=["POST"]),
        Route("/healthz", health.healthz),
    ]


def create_app(backend: ConsoleBackend) -> Starlette:
    """The console's Starlette application over ``backend``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        backend.close()

    static = Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    # One check for every state-changing request, before any route: csrf.py says what it asks.
    return Starlette(
        routes=[*routes(backend), static], lifespan=lifespan, middleware=[Middleware(csrf.ForgedRequestGuard)]
    )
