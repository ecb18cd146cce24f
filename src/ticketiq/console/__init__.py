"""The operator console at /console (issue 16): server-rendered pages over the engine and the run views
the API uses, signed in by a pasted token (`sessions.py`), one small script of our own for live updates.

It owns its routes, templates and static files, its session store (`storage/console_store.py`), and the
pure view decisions (`views.py`). It imports the engine and the job queue, never SQL.

May import process, jobs, leader, intake, views, engine and everything below them; never entries (whose
`api.py` mounts it).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.staticfiles import StaticFiles

from ticketiq.console import ops_pages, run_pages, sign_in, web
from ticketiq.console.sessions import principal_of
from ticketiq.engine.engine import Engine
from ticketiq.errors import StorageError
from ticketiq.views.runs import RunViews

__all__ = ["add_routes", "install", "principal_of"]

log = logging.getLogger(__name__)

FAILED = "the console failed to answer this request; what went wrong is in this process's log"
UNAVAILABLE = "the database is unavailable; reload the page in a moment"


def install(app: FastAPI) -> None:
    """What each app carries for the console: the headers of every console response, its error pages, the
    way to sign in, and its static files. Its pages are routes of their own (`add_routes`)."""
    app.add_middleware(web.SecurityHeaders)
    _add_error_pages(app)

    @app.exception_handler(web.SignInNeeded)
    async def sign_in_first(request: Request, exc: web.SignInNeeded) -> object:
        return web.to_sign_in(request, exc)

    app.mount("/console/static", StaticFiles(directory=web.HERE / "static"), name="console-static")


def add_routes(
    router: APIRouter, engine: Callable[[Request], Engine], run_views: Callable[[Request], RunViews]
) -> None:
    """The console's pages."""
    sign_in.add_routes(router, engine)
    run_pages.add_routes(router, engine, run_views)
    ops_pages.add_routes(router, engine, run_views)


def _add_error_pages(app: FastAPI) -> None:
    """A console request that fails gets the console's page, with its headers; any other request is
    answered as before (the API's JSON, Starlette's plain 500). The API's handlers are registered before
    the console's (`create_app`), so they are there to hand other paths back to."""
    api_storage = app.exception_handlers[StorageError]
    api_http = app.exception_handlers[HTTPException]

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if not web.is_console(request.url.path):
            return await _answered(api_http(request, exc))
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return web.failed(request, exc.status_code, message, exc.headers)

    @app.exception_handler(StorageError)
    async def storage_failed(request: Request, exc: StorageError) -> Response:
        if not web.is_console(request.url.path):
            return await _answered(api_storage(request, exc))
        log.error("%s %s: %s", request.method, request.url.path, exc)
        if exc.retryable:
            return web.failed(request, 503, UNAVAILABLE, {"Retry-After": "1"})
        return web.failed(request, 500, FAILED)

    # Called by Starlette's outermost middleware, which then raises the error on to the server's log.
    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if not web.is_console(request.url.path):
            return PlainTextResponse("Internal Server Error", status_code=500)  # Starlette's own answer
        return web.failed(request, 500, FAILED)


async def _answered(answer: Response | Awaitable[Response]) -> Response:
    """What an exception handler answered (Starlette takes plain and async ones)."""
    return await answer if inspect.isawaitable(answer) else answer
