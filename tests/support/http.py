"""Serve an ASGI app on a real loopback socket inside the test's event loop.

`PromptServer` is uvicorn's server, told to stop at once. uvicorn notices `should_exit` at its next 0.1 s
tick and then sleeps 0.1 s more before it waits for connections: 0.2 s a server, which a test with its
model, vendor and API servers pays three times, most of a simple test's time. Here the tick is an event
and the wait for connections looks every 5 ms; the rest is uvicorn's own (the Date header each second,
connections asked to close, background tasks, the lifespan's shutdown). It overrides `main_loop` and
`shutdown` and reads `servers`, `server_state` and `lifespan`, which uvicorn has kept since 0.2x;
tests/integration/test_prompt_server.py fails the day one of them changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from sse_starlette.sse import AppStatus

from ticketiq.standins.server import listen

LOOK_S = 0.005

# One TLS context for every client the tests make (`httpx.AsyncClient(verify=TLS, ...)`): OpenSSL 3 spends
# some 20-30 ms of CPU making each, certifi's roots read, and tests make several. No test server speaks
# TLS; the context is the one httpx would make.
TLS = httpx.create_ssl_context()

# The tests' plain requests (`web.get(...)` where `httpx.get(...)` would do): `httpx.get` makes a client,
# and with it a TLS context, at every call, and the tests poll. As with `httpx.get`, no connection is
# kept: a request never lands on one a killed server left.
web = httpx.Client(verify=TLS, limits=httpx.Limits(max_keepalive_connections=0))


class PromptServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._told = asyncio.Event()

    def exit(self) -> None:
        """Stop serving now (uvicorn's own `should_exit`, and the wake-up of the loop waiting for it)."""
        self.should_exit = True
        self._told.set()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter += 10  # uvicorn refreshes the Date header every tenth tick: each second here
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._told.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while self.server_state.connections or self.server_state.tasks:
                    await asyncio.sleep(LOOK_S)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()


async def started(server: PromptServer, sock: socket.socket) -> asyncio.Task[None]:
    """The server serving `sock` in a task of its own, once it has started (what stopped it is raised)."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the server stopped before it started")
        await asyncio.sleep(LOOK_S)
    return task


async def stopped(server: PromptServer, task: asyncio.Task[None], timeout_s: float = 15.0) -> None:
    server.exit()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=timeout_s)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Yield the base URL while the app serves; always shut it down, even when the test fails."""
    # The socket is bound here and handed over, never a port picked and bound later: tests run side by
    # side (pytest-xdist), and a port free a moment ago may be another worker's by then.
    sock = listen(0)
    port = sock.getsockname()[1]
    server = PromptServer(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    try:
        task = await started(server, sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        # uvicorn waits for every open connection before it shuts down, and an event stream (sse-starlette)
        # ends only once told the server is exiting: by the signal handler uvicorn installed (a real
        # process's SIGTERM) or, polled, by the `should_exit` of the server that handler belongs to, which
        # here is the last one started in this process, not necessarily this one. So tell sse-starlette
        # outright, for the shutdown only: left set, it would end every stream of every later server.
        AppStatus.should_exit = True
        try:
            await stopped(server, task)
        finally:
            AppStatus.should_exit = False
            sock.close()
