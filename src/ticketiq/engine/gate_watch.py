"""Knows when the gates' state changed, so runs re-read their gate facts only then.

A dedicated connection LISTENs on `ticketiq_gates` (triggers on the gate tables and on Stop requests
notify it). Every notification bumps `generation`; facts read under an older generation are stale.
While the listener is not connected, nothing is trusted from cache: every step reads afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ticketiq.background import Background
from ticketiq.storage import database

log = logging.getLogger(__name__)


class GateWatch:
    def __init__(self, url: str) -> None:
        self.url = url
        self.generation = 0
        self.connected = False
        self._background = Background("gate-watch", self.run)

    def current(self) -> int | None:
        """The generation to tag facts read now with, or None when no cache may be trusted."""
        return self.generation if self.connected else None

    async def _listen_once(self) -> None:
        conn = await database.connect(self.url)
        try:
            await database.listen(conn, "ticketiq_gates")
            self.generation += 1  # anything may have changed while we were not listening
            self.connected = True
            async for _ in conn.notifies():
                self.generation += 1
        finally:
            self.connected = False
            self.generation += 1
            with contextlib.suppress(Exception):
                await conn.close()

    async def run(self) -> None:
        while True:
            try:
                await self._listen_once()
            except Exception as exc:  # any loss of the listener: read afresh, reconnect
                log.warning("gate listener lost (%s); reading gate facts afresh until it is back", exc)
            await asyncio.sleep(0.5)

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
