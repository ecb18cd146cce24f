"""A process whose token listener is down keeps no token it finds (auth/token_cache.py): it cannot hear
a revocation, so each request looks its token up, and a token revoked meanwhile on another process is
refused at once, not when the listener comes back. Over real sockets, with the listener's connection
cut for good by a TCP relay in front of Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test
from tests.support.http import TLS, serving
from tests.support.tcp_proxy import TcpProxy
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.storage.token_store import TokenStore

SCRIPTS = {"a": [{"text": "answered"}]}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": []}}
NOTHING = "/v1/runs/00000000-0000-0000-0000-000000000000"  # a read every token may make: 404, not 401


@asynccontextmanager
async def process(db_url: str, home: Path, lead: bool) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    async with (
        engine_under_test(db_url, home, SCRIPTS, AGENTS, lead=lead) as h,
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base) as client,
    ):
        yield h, client


async def test_a_process_that_cannot_hear_revocations_looks_each_token_up_and_refuses_a_revoked_one_at_once(
    db_url: str, tmp_path: Path, proxy: TcpProxy
) -> None:
    for home in ("one", "two"):
        (tmp_path / home).mkdir()
    async with (
        process(db_url, tmp_path / "one", True) as (one, _),
        process(db_url, tmp_path / "two", False) as (two, second),
    ):
        watch = two.engine.deps.gate_watch
        # The second process's listener goes through the relay from now on.
        await watch.stop()
        watch.url = proxy.url(db_url)
        watch.start()
        await eventually(lambda: _true(watch.connected), what="the listener connected through the relay")
        token = tokens.mint()
        assert await TokenStore(one.process.db).create("cal", "caller", None, tokens.token_hash(token), "t")
        caller = {"Authorization": f"Bearer {token}"}
        assert (await second.get(NOTHING, headers=caller)).status_code == 404
        assert len(watch.tokens) == 1  # found while listening: kept

        proxy.pause()  # the listener cannot come back: its reconnects get no answer
        assert proxy.cut() >= 1  # its connection is gone
        await eventually(lambda: _true(not watch.connected), what="the listener lost")
        assert len(watch.tokens) == 0  # what it kept is dropped: what it misses from now on is unknown
        assert (await second.get(NOTHING, headers=caller)).status_code == 404  # looked up ...
        assert len(watch.tokens) == 0  # ... and not kept

        # Revoked on the first process; the second hears nothing of it and must not serve the token.
        assert await TokenStore(one.process.db).revoke("cal", "t") is not None
        refused = await second.get(NOTHING, headers=caller)
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"][0]["msg"]
        assert not watch.connected  # refused while still deaf, not because the listener came back
        proxy.resume()


async def _true(value: bool) -> bool:
    return value
