"""This process's liveness mark: a session advisory lock held on a dedicated connection.

A SIGKILLed process's connections close at once, its lock is free, and the leader takes its runs over
without waiting out the lease TTL. The other way round, a process whose liveness connection drops
cannot know whether its lock is still held: it treats every lease as lost and sends nothing more
(DESIGN: "detect death in under 2 s").

The connection is watched all the time, not only at each poll: between heartbeats the watch waits on
its socket, so a connection that drops ends the wait at once. A heartbeat that does not answer within
`heartbeat_within(poll)` counts as a drop too: a hung connection may have lost its lock as surely.

The same connection LISTENs on `ticketiq_handed`, where a take that gives a run to another process
names that process (migration 012): the identity that holds the mark hears of the runs given to it for
as long as it holds the mark, and of none after (`on_handed`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable

from ticketiq.engine import resume
from ticketiq.runtime import release
from ticketiq.runtime.background import Background
from ticketiq.storage import database, leader_store
from ticketiq.storage.database import DEFAULT_LIMITS, ConnectionLimits
from ticketiq.storage.outage import Outage

log = logging.getLogger(__name__)

HANDED = "ticketiq_handed"  # payload: the identity a run was given to


def heartbeat_within(poll_s: float) -> float:
    """How long a heartbeat may take before the liveness connection counts as lost: a few polls, and
    never under a second, so a busy server does not make a live process give up its runs."""
    return max(1.0, 4 * poll_s)


def _ignore() -> None:
    return None


class Liveness:
    def __init__(
        self,
        url: str,
        poll_s: float,
        on_lost: Callable[[str], None],
        limits: ConnectionLimits = DEFAULT_LIMITS,
        on_handed: Callable[[], None] = _ignore,
        outage: Outage | None = None,
    ) -> None:
        self.url = url
        self.poll_s = poll_s
        self.on_lost = on_lost
        self.on_handed = on_handed  # told when a take gave this identity a run (a wake-up, not the truth)
        self.limits = limits
        self.outage = outage or Outage()  # the process's: a lost mark may be the database gone
        self.holder = ""
        self.lock_key: int | None = None
        self._conn: database.Connection | None = None
        self._background = Background("liveness", self.watch)

    async def register(self, holder: str) -> None:
        """Take the mark for `holder` (a fresh identity) and announce it. A mark held before is let go."""
        await self._let_go()
        conn = await database.connect(self.url, self.limits)
        try:
            # Before the row exists: no run can be given to this identity before it listens.
            await database.listen(conn, HANDED, within_s=self.limits.answer_within_s)
            running = release.current()
            lock_key = await leader_store.register(
                conn, holder, os.getpid(), socket.gethostname(), (running.version, running.commit),
                (resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format),
                within_s=self.limits.answer_within_s,
            )  # fmt: skip
        except BaseException:
            await conn.close()
            raise
        self._conn, self.holder, self.lock_key = conn, holder, lock_key

    async def retake(self) -> bool:
        """After the mark's connection was lost: take the same identity's mark again on a new connection
        (the database failed over or restarted, and every lock went with it), giving up the leases it
        held (the process lost them all when the mark went). False when the identity cannot be kept
        (it was found dead, or its old session still holds the lock): the caller takes a new one. A
        database still unreachable raises StorageError."""
        await self._let_go()
        conn = await database.connect(self.url, self.limits)
        try:
            await database.listen(conn, HANDED, within_s=self.limits.answer_within_s)
            lock_key = await leader_store.retake(conn, self.holder, within_s=self.limits.answer_within_s)
        except BaseException:
            await conn.close()
            raise
        if lock_key is None:
            await conn.close()  # a lock this statement took for an identity found dead goes with it
            return False
        self._conn, self.lock_key = conn, lock_key
        return True

    async def watch(self) -> None:
        """Wait on the mark's connection for a poll, then ask it to answer a heartbeat in time; at any
        failure the lock may be gone: report the loss once and stop. The watch keeps to the connection
        it started on: once the mark was taken again on another one (a loss the lease keeper reported),
        what fails here is no news about the mark held now."""
        conn = self._conn
        try:
            if conn is None:
                raise RuntimeError("no liveness mark is held")
            while True:
                # Nothing is sent on it but the heartbeat: the wait watches its socket, and a connection
                # that closes (the server ended it, the network reset it) ends the wait with an error at
                # once. What it hears is runs given to some process: to this one, a wake-up.
                async for notice in conn.notifies(timeout=self.poll_s):
                    if notice.channel == HANDED and notice.payload == self.holder:
                        self.on_handed()
                await leader_store.heartbeat(conn, within_s=heartbeat_within(self.poll_s))
        except Exception as exc:  # any failure: the lock may be gone
            if conn is None or conn is not self._conn:
                return
            log.error("liveness connection of %s lost: %s", self.holder, exc)
            await self._close()
            self.outage.failed(exc)
            self.on_lost(f"liveness connection lost: {exc}")

    def start(self) -> None:
        self._background.start()

    async def release(self) -> None:
        """Let the mark go without saying this identity ended: the leader then finds it dead and claims
        its runs at once, rather than waiting out their leases."""
        await self._background.stop()
        await self._close()

    async def stop(self, db: database.Database | None = None) -> None:
        """Clean stop: say so (so no one takes this for a death) and free the mark."""
        await self._background.stop()
        if db is not None and self.holder:
            with contextlib.suppress(Exception):
                await leader_store.LeaderStore(db).end_process(self.holder)
        await self._close()

    async def _let_go(self) -> None:
        """The watch stopped before its connection closes. Closed under a watch still waiting on it (a
        loss the renewer reported), the old watch failed a poll later, closed the NEW mark's connection
        and reported the mark lost again, and again (a run lost three times over one lost renewal); and
        the event loop went on watching a descriptor number the system could give the next socket."""
        await self._background.stop()
        await self._close()

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
