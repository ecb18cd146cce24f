"""Serve an ASGI app on a real loopback socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from sse_starlette.sse import AppStatus


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Yield the base URL while the app serves; always shut it down, even when the test fails."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
    )
    task = asyncio.create_task(server.serve())
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
