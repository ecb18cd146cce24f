"""A connection waiting for notifications (the liveness mark's, the leader's sweep's, the gate watch's)
waits on its socket, bounded by its own timeout: it does not wake to read nothing every 0.1 s, as
psycopg's default interval had each of the three do some ten times a second on an idle process
(storage/database.py: Connection.wait). A notification still ends the wait as it arrives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from ticketiq.storage import database


@pytest.fixture
async def listening(db_url: str) -> AsyncIterator[database.Connection]:
    conn = await database.Connection.connect(db_url, autocommit=True)
    try:
        await conn.execute("LISTEN quiet_probe")
        yield conn
    finally:
        await conn.close()


def watches_of(fd: int, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When the event loop was asked to watch `fd` for reading, from now on (a wait psycopg makes on a
    socket watches it once, and again each time it wakes with nothing to read)."""
    loop = asyncio.get_running_loop()
    add_reader = loop.add_reader
    seen: list[float] = []

    def counted(watched: int, callback: Callable[..., Any], *args: Any) -> None:
        if watched == fd:
            seen.append(time.monotonic())
        add_reader(watched, callback, *args)

    monkeypatch.setattr(loop, "add_reader", counted)
    return seen


async def test_a_quiet_listen_watches_its_socket_once_until_its_timeout(
    listening: database.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = watches_of(listening.pgconn.socket, monkeypatch)
    heard = [n async for n in listening.notifies(timeout=1.0)]
    monkeypatch.undo()
    assert heard == []
    assert len(watched) == 1  # one wait, ended by its timeout (with psycopg's interval: ten)


async def test_a_notification_ends_the_wait_as_it_arrives(db_url: str, listening: database.Connection) -> None:
    async def announce() -> None:
        await asyncio.sleep(0.3)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as other:
            await other.execute("NOTIFY quiet_probe, 'here'")

    sender = asyncio.create_task(announce())
    began = time.monotonic()
    heard = [n.payload async for n in listening.notifies(timeout=60.0, stop_after=1)]
    waited = time.monotonic() - began
    await sender
    assert heard == ["here"]
    # Woken by its socket, not by the backstop (QUIET_WAKE_S) nor by its own 60 s timeout.
    assert waited < database.QUIET_WAKE_S, waited
