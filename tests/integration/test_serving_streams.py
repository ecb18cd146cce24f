"""The test rig's in-process server (`tests/support/http.py`) ends open event streams when it shuts
down, whichever other server of the test process is up: a stream left open must not hold the shutdown
until the rig gives up on it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx

from tests.integration.test_console import site
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app


async def test_a_server_shut_down_before_a_later_one_ends_its_open_event_stream(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        run_id = await s.run_waiting(token, "asker")  # it waits for input: its stream stays open
        starting = serving(create_app(s.h.settings, s.h.process))
        base = await starting.__aenter__()
        first: contextlib.AbstractAsyncContextManager[str] | None = starting
        try:
            # Started after the first, so the SIGTERM handler uvicorn installs is this one's.
            async with (
                serving(create_app(s.h.settings, s.h.process)),
                httpx.AsyncClient(verify=TLS, timeout=60) as client,
            ):
                headers = {"Authorization": f"Bearer {token}"}
                async with client.stream("GET", f"{base}/v1/runs/{run_id}/events", headers=headers) as events:
                    lines = events.aiter_lines()
                    assert (await anext(lines)).startswith("event: ")
                    await starting.__aexit__(None, None, None)  # the server shuts down under the open stream
                    rest = [line async for line in lines]
                first = None
        finally:
            if first is not None:
                await first.__aexit__(None, None, None)
    # The stream ended as a stream ends (the server closed it), not cut by the rig's time limit, which
    # would have raised TimeoutError out of the shutdown above.
    assert all(not line.startswith("event: end") for line in rest)
