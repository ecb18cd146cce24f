"""Serve an ASGI app on a real loopback socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from sse_starlette.sse import AppStatus

from ticketiq.standins.server import listen


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Yield the base URL while the app serves; always shut it down, even when the test fails."""
    # The socket is bound here and handed over, never a port picked and bound later: tests run side by
    # side (pytest-xdist), and a port free a moment ago may be another worker's by then.
    sock = listen(0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        # uvicorn waits for every open connection before it shuts down, and an event stream (sse-starlette)
        # ends only once told the server is exiting: by the signal handler uvicorn installed (a real
        # process's SIGTERM) or, polled, by the `should_exit` of the server that handler belongs to, which
        # here is the last one started in this process, not necessarily this one. So tell sse-starlette
        # outright, for the shutdown only: left set, it would end every stream of every later server.
        server.should_exit = True
        AppStatus.should_exit = True
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=15)
        finally:
            AppStatus.should_exit = False
            sock.close()
