"""The FastAPI app: routes, middlewares (outermost first: request log, CORS if asked, API key, body
limits) and the lifespan that starts the decode thread and, on shutdown, stops it and every training
run this server started (each saves a checkpoint first)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from desktop_app import __version__
from desktop_app.server import openai_routes, sweep_routes, tokenizer_routes, training_routes
from desktop_app.server.errors import install_error_handlers
from desktop_app.server.monitor import Monitor, MonitorMiddleware
from desktop_app.server.runs import RunManager
from desktop_app.server.security import BearerAuth, BodyLimit
from desktop_app.server.state import ServedModel, ServerSettings, ServerState, get_state

DESCRIPTION = """Local API of AZR Model Trainer.

* **OpenAI-compatible** (`/v1`): point any OpenAI client at `http://HOST:PORT/v1`. Concurrent requests
  are decoded together in one batch.
* **Training** (`/api`): create models, upload text files into datasets, start and control training runs,
  download trained models. Same workspace as the desktop app.

When the server was started with `--api-key`, send `Authorization: Bearer <key>` with every request.
"""


def create_app(settings: ServerSettings, workspace: Any, served: ServedModel | None = None,
               monitor: Monitor | None = None) -> FastAPI:
    """The app serving `served` (None: training API only) on `workspace` (a Workspace)."""
    monitor = monitor or Monitor()
    state = ServerState(settings=settings, workspace=workspace, served=served, runs=RunManager(workspace),
                        monitor=monitor)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if served is not None:
            served.batcher.start()
        yield

        def stop() -> None:
            if served is not None:
                served.batcher.close()
            state.runs.shutdown()
            sweep_routes.shutdown(app)

        await run_in_threadpool(stop)

    app = FastAPI(title="AZR Model Trainer API", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.azr = state
    install_error_handlers(app)
    app.include_router(openai_routes.router)
    app.include_router(tokenizer_routes.router)
    app.include_router(training_routes.router)
    app.include_router(sweep_routes.router)

    @app.get("/health", tags=["Server"], summary="Liveness, the served model and the decode load")
    async def health(request: Request) -> dict[str, Any]:
        s = get_state(request)
        return {"status": "ok", "model": s.served.id if s.served else None,
                "decoding": s.served.batcher.load() if s.served else None, "in_flight": s.monitor.in_flight}

    # add_middleware wraps: the last added is the outermost.
    app.add_middleware(BodyLimit, json_limit=settings.json_limit, upload_limit=settings.upload_limit,
                       upload_paths=(training_routes.UPLOAD_PATH,))
    app.add_middleware(BearerAuth, api_key=settings.api_key)
    if settings.cors_origins:  # off unless asked: a web page must not drive the local API by default
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(MonitorMiddleware, monitor=monitor)
    return app
