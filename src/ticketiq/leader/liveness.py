"""This process's liveness mark: a session advisory lock held on a dedicated connection.

A SIGKILLed process's connections close at once, its lock is free, and the leader takes its runs over
without waiting out the lease TTL. The other way round, a process whose liveness connection drops
cannot know whether its lock is still held: it treats every lease as lost and sends nothing more
(DESIGN: "detect death in under 2 s").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable

from ticketiq.background import Background
from ticketiq.storage import database

log = logging.getLogger(__name__)


class Liveness:
    def __init__(self, url: str, poll_s: float, on_lost: Callable[[str], None]) -> None:
        self.url = url
        self.poll_s = poll_s
        self.on_lost = on_lost
        self.holder = ""
        self.lock_key: int | None = None
        self._conn: database.Connection | None = None
        self._background = Background("liveness", self.watch)

    async def register(self, holder: str) -> None:
        """Take the mark for `holder` (a fresh identity) and announce it."""
        conn = await database.connect(self.url)
        rows = await database.run_on(
            conn, "leader.register", {"id": holder, "pid": os.getpid(), "host": socket.gethostname()}
        )
        self._conn, self.holder, self.lock_key = conn, holder, int(rows[0]["lock_key"])

    async def watch(self) -> None:
        """Look at the mark's connection every poll; report its loss once and stop."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                assert self._conn is not None
                await database.run_on(self._conn, "leader.heartbeat")
            except Exception as exc:  # any failure: the lock may be gone
                log.error("liveness connection of %s lost: %s", self.holder, exc)
                await self._close()
                self.on_lost(f"liveness connection lost: {exc}")
                return

    def start(self) -> None:
        self._background.start()

    async def stop(self, db: database.Database | None = None) -> None:
        """Clean stop: say so (so no one takes this for a death) and free the mark."""
        await self._background.stop()
        if db is not None and self.holder:
            with contextlib.suppress(Exception):
                await db.fetch_all("leader.end_process", {"id": self.holder})
        await self._close()

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
