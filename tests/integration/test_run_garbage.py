"""A run's objects go when it ends, by their reference counts: none is left in a reference cycle for the
garbage collector to find. The run's driver and its call maker once pointed at each other, and each vendor
request's exchange and the transport guard written around it did too; every run and every request then
left its whole graph (the state, the conversation, the checkpoint, the call's context) as cyclic garbage,
some 17,000 objects in 3 s of bench/client.py's load, and the collector's passes over them were 5-10% of
the app's CPU. A `reader` run is served here end to end (the API, the stand-in model and Jira over real
sockets) with the collector saving what it would free, and nothing of ours may be among it."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.http import TLS, serving
from tests.support.standins import Standins, serve_standins
from ticketiq.auth import tokens
from ticketiq.engine.calls import CallMaker
from ticketiq.engine.driver import RunDriver
from ticketiq.entries.api import create_app
from ticketiq.process import AppProcess
from ticketiq.storage.token_store import TokenStore
from ticketiq.tools.base import CallContext
from ticketiq.tools.vendor_pool import _Exchange, _LastMoment

OURS = (RunDriver, CallMaker, CallContext, _Exchange, _LastMoment)


@pytest.fixture
async def standins(db_url: str) -> AsyncIterator[Standins]:
    async with serve_standins(db_url) as running:
        yield running


async def test_a_served_run_and_its_vendor_requests_leave_nothing_for_the_garbage_collector(
    standins: Standins, tmp_path: Path
) -> None:
    process = await AppProcess.start(standins.settings(home=tmp_path, seal_keys="t:garbage", lead=False))
    try:
        token = tokens.mint()
        assert await TokenStore(process.db).create("ops", "operator", None, tokens.token_hash(token), "test")
        bearer = {"Authorization": f"Bearer {token}"}
        async with (
            serving(create_app(process.settings, process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers=bearer) as api,
        ):
            await served(api, process, "Read OPS-1")  # warm: what start-up leaves is not the run's
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                run_id = await served(api, process, "Read OPS-2")
                # Another run's requests take the connections over: what the first left on them is let go.
                await served(api, process, "Read OPS-3")
                gc.collect()
            finally:
                gc.set_debug(0)
            left = [type(o).__name__ for o in gc.garbage if isinstance(o, OURS)]
            gc.garbage.clear()
        assert (await standins.writes()) == []  # a reader: reads only
        assert left == [], f"run {run_id} left {len(left)} of ours in reference cycles: {sorted(set(left))}"
    finally:
        await process.stop()


async def served(api: httpx.AsyncClient, process: AppProcess, text: str) -> str:
    """A `reader` run (three Jira reads, four model steps) started and followed to its end; its id."""
    made = await api.post("/v1/runs", json={"agent": "reader", "input": text})
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    ended = await api.get(f"/v1/runs/{run_id}", params={"wait": 30})
    assert ended.json()["status"] == "succeeded", ended.text
    task = process.engine.tasks.get(run_id)
    if task is not None:
        await task
    return run_id
