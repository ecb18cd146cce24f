"""The tests' own uvicorn server (tests/support/http.py) stops as uvicorn's does, only without its fixed
waits: an answer in flight is finished, idle keep-alive connections are closed, background tasks end and
the app's lifespan is shut down, and then nothing listens. It reads uvicorn's `servers`, `server_state` and
`lifespan`: a uvicorn that renames one fails here first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from tests.support.http import TLS, PromptServer, started, stopped
from ticketiq.standins.server import listen


def app_with(seen: list[str], answering: asyncio.Event) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        seen.append("started")
        yield
        seen.append("shut down")

    app = FastAPI(lifespan=lifespan)

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        answering.set()
        await asyncio.sleep(0.3)
        seen.append("answered")
        return {"ok": "slow"}

    @app.get("/quick")
    async def quick() -> dict[str, str]:
        return {"ok": "quick"}

    return app


async def test_stopping_finishes_the_answer_in_flight_closes_idle_connections_and_shuts_the_app_down() -> None:
    seen: list[str] = []
    answering = asyncio.Event()
    sock = listen(0)
    port = sock.getsockname()[1]
    server = PromptServer(uvicorn.Config(app_with(seen, answering), log_config=None, access_log=False))
    task = await started(server, sock)
    try:
        async with (
            httpx.AsyncClient(verify=TLS, base_url=f"http://127.0.0.1:{port}") as idle,
            httpx.AsyncClient(verify=TLS, base_url=f"http://127.0.0.1:{port}") as busy,
        ):
            assert (await idle.get("/quick")).json() == {"ok": "quick"}  # its connection stays open, idle
            assert len(server.server_state.connections) == 1
            in_flight = asyncio.create_task(busy.get("/slow"))
            await answering.wait()
            await stopped(server, task)
            assert (await in_flight).json() == {"ok": "slow"}
            assert seen == ["started", "answered", "shut down"]
            assert not server.server_state.connections and not server.server_state.tasks
            with pytest.raises(httpx.TransportError):
                await idle.get("/quick")
    finally:
        server.exit()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
