"""Tells whoever follows a run (an A2A stream, a co-pilot caller) that its status changed.

A dedicated connection LISTENs on `ticketiq_runs`: a trigger on `runs` notifies the run's id whenever
its status changes, on whichever process made the change. A follower waits for its run's next change
or its timeout, then reads the status itself: a notification is a wake-up, never the truth. While the
listener is not connected followers wake every `RECHECK_S` and read, so a lost notification costs at
most that long, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator

from ticketiq.runtime.background import Background
from ticketiq.storage import database
from ticketiq.storage.database import DEFAULT_LIMITS, ConnectionLimits
from ticketiq.storage.outage import backoff_s

log = logging.getLogger(__name__)

CHANNEL = "ticketiq_runs"
RECHECK_S = 1.0
# Read even while listening: a notification sent while the listener was being re-made (a failover)
# is lost, and the reconnect's wake-up may race it.
LISTENING_RECHECK_S = 5.0


class Follower:
    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self.event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Until the run's status may have changed since the last wait, or the timeout (at most
        RECHECK_S while the listener is down, LISTENING_RECHECK_S while it is up). The caller
        reads the status afterwards."""
        bound = min(timeout_s, LISTENING_RECHECK_S if self.events.connected else RECHECK_S)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, bound)):
                await self.event.wait()
        self.event.clear()


class RunEvents:
    def __init__(self, url: str, limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
        self.url = url
        self.limits = limits
        self.check_s = max(1.0, limits.keepalive_s)
        self.connected = False
        self.listens = 0  # LISTENs that succeeded
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._background = Background("run-events", self.run)

    @contextlib.contextmanager
    def following(self, run_id: str) -> Iterator[Follower]:
        """Follow a run: registered before the caller reads its status, so no change between that
        read and the wait goes unseen."""
        follower = Follower(self)
        self._waiters[run_id].add(follower.event)
        try:
            yield follower
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(follower.event)
                if not waiters:
                    self._waiters.pop(run_id, None)

    def _wake(self, run_id: str) -> None:
        for event in self._waiters.get(run_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for run_id in list(self._waiters):
            self._wake(run_id)

    async def _listen_once(self) -> None:
        conn = await database.connect(self.url, self.limits)
        try:
            await database.listen(conn, CHANNEL, within_s=self.limits.answer_within_s)
            self.connected = True
            self.listens += 1
            self._wake_all()  # anything may have changed while no one listened
            while True:
                async for notice in conn.notifies(timeout=self.check_s):
                    self._wake(notice.payload)
                await database.ping(conn, within_s=self.check_s)
        finally:
            self.connected = False
            self._wake_all()
            with contextlib.suppress(Exception):
                await conn.close()

    async def run(self) -> None:
        tries = 0
        while True:
            listened = self.listens
            try:
                await self._listen_once()
            except Exception as exc:
                log.warning("run events listener lost (%s); followers read every %s s until it is back",
                            exc, RECHECK_S)  # fmt: skip
            # Back soon after a failover, and no storm of attempts while there is no primary.
            tries = 0 if self.listens > listened else tries + 1
            await asyncio.sleep(backoff_s(tries))

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
