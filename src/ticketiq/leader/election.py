"""One leader among the app processes, by the `leader` lease (TTL 8 s, renewed with the process's
other leases in one statement). When it dies another process leads within the TTL, or at once when
the leader's liveness mark is found free. Only the leader sweeps; any process executes runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ticketiq.engine.engine import Engine
from ticketiq.leader.retention import Keeper
from ticketiq.leader.sweep import Sweeper
from ticketiq.runtime.background import Background, cancelled
from ticketiq.storage.leader_store import LeaderStore

log = logging.getLogger(__name__)

LEADER = "leader"


class Elector:
    def __init__(self, engine: Engine, url: str, retry_s: float = 1.0) -> None:
        self.engine = engine
        self.sweeper = Sweeper(engine, url)
        self.retention = Keeper(self.sweeper.retention_pass, float(engine.deps.settings.retention_every))
        self.retry_s = retry_s
        self.leading = False
        self._background = Background("elector", self.run)

    async def try_lead(self) -> bool:
        deps = self.engine.deps
        sent_at = time.monotonic()
        if not await LeaderStore(deps.db).lead(deps.holder, deps.settings.lease_ttl_s):
            return False
        deps.keeper.hold_lease(LEADER, sent_at)
        return True

    async def lead(self) -> None:
        """Sweep while the leader lease is ours: until the renewal loses it or its deadline passes."""
        lease = self.engine.deps.keeper.held[LEADER]
        self.leading = True
        log.info("process %s leads", self.engine.deps.holder)
        sweeping = asyncio.create_task(self.sweeper.run(), name="sweeper")
        # Its own task: a pass after a long pause may take minutes, and the sweeps never wait for it.
        keeping = asyncio.create_task(self.retention.run(), name="retention")
        try:
            while not lease.lost.is_set() and time.monotonic() < lease.deadline:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.25):
                        await lease.lost.wait()
        finally:
            for task in (sweeping, keeping):
                await cancelled(task)
            self.leading = False
            self.engine.deps.keeper.drop_lease(LEADER)
            log.warning("process %s no longer leads", self.engine.deps.holder)

    async def run(self) -> None:
        while True:
            # Never under an identity whose liveness mark is gone: wait until the process holds one.
            await self.engine.admitted.wait()
            try:
                if await self.try_lead():
                    await self.lead()
                    continue
            except Exception:
                log.exception("leader election failed; trying again")
            await asyncio.sleep(self.retry_s)

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
        if self.leading or LEADER in self.engine.deps.keeper.held:
            self.engine.deps.keeper.drop_lease(LEADER)
        # Step down at once so another process leads without waiting out the TTL.
        with contextlib.suppress(Exception):
            await LeaderStore(self.engine.deps.db).step_down(self.engine.deps.holder)
